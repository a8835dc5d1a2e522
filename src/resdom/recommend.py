"""Recommendations in the user's own ids: the top K items for each user, after everything the split knows of them,
or for ad hoc sessions; and the items most similar to an item.

``recommend(model, split, users, k)`` scores every item for each user exactly as evaluation does (the prediction read
at the last column of the left-padded input, the last ``max_len`` items; ``evaluation.ranking.full_scores``, seen
items -inf when filtering, the whole history's items as evaluation filters the whole input) and returns a pandas
DataFrame in RecTools' columns (``COLUMNS``: user_id, item_id, score, rank) in external ids (``SplitData.user_labels``
/ ``item_labels``). ``sequences=`` scores sessions of item ids instead (a new user, a basket), ``items=`` is a
whitelist of what may be recommended and ``exclude=`` what may not. ``similar_items`` lists each item's nearest
items by cosine over the output item embeddings (``SIMILAR_COLUMNS``: target_item_id, item_id, score, rank).

The input of a user (``history``):

- ``"all"`` (default): the user's whole known sequence (``SplitData.history``: the test input and target, or the
  longest other part, or the full sequence of a user the split dropped): the next item after everything known;
- ``"test"`` / ``"valid"``: that part's inputs, as evaluation sees them (its users only): then the rank of each
  target in the list is the rank evaluation computes (``evaluation.ranking.pessimistic_ranks`` + 1) wherever no
  other item ties with it.

Order: by score, highest first; equal scores by increasing internal item id, so the output is deterministic.
A user's (session's, item's) list and scores are its own, bit for bit, whoever else is asked, in any order,
at any ``batch_size`` (``own_scores``: products of one shape; docs/limits.md).
Items scored -inf (padding, seen items when filtering) are never recommended: a user with fewer than ``k`` unseen
items gets fewer rows (none if every item is seen), and the frame's ``attrs["note"]`` says how many users did and
names the first of them (``resdom recommend`` prints it).
"""

from __future__ import annotations

import contextlib
import math
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from resdom.checks import alpha_value, choice, flag, optional_bool, positive_int
from resdom.data.readers import CANONICAL_INT_BOUND, spelled
from resdom.data.sequences import EvalSet, Sequences, SplitData
from resdom.diagnostics.common import check_model, inference, model_device
from resdom.distributed import resolve_device
from resdom.errors import ResdomError
from resdom.evaluation.batches import activation_chunk, history_pairs, with_progress
from resdom.evaluation.beyond import cosine_scores, top_k, unit_rows
from resdom.evaluation.ranking import full_scores, mask_seen, user_chunk_size
from resdom.limits import quote, short
from resdom.models.interface import final_states, residual_scale

if TYPE_CHECKING:
    import pandas as pd

HISTORIES = ("all", "test", "valid")
COLUMNS = ("user_id", "item_id", "score", "rank")  # RecTools' columns (resdom wrote user, item, rank, score before)
SIMILAR_COLUMNS = ("target_item_id", "item_id", "score", "rank")  # RecTools' item-to-item columns
PART_ROWS = 100_000  # rows of lists made (and written) at a time: ``Lists.frames``
OLD_HEADER = "user,item,rank,score"  # the CSV header resdom recommend wrote before: still an earlier output


def label_texts(labels: np.ndarray) -> list[str]:
    """The text of each label, as it is matched against ids the user gives (``str``: int 7 -> "7")."""
    return [str(x) for x in labels]


def user_index(split: SplitData, users: Iterable[Any], where: str = "users") -> np.ndarray:
    """int64 (n,): the user index of each external id in ``users`` (matched as text, exactly); every id unknown to
    the split is one ResdomError naming them (the first few, and how many)."""
    labels = split.user_labels
    if labels is None:
        raise ResdomError(f"{where}: this split was prepared before resdom kept the users' ids; prepare it again "
                          "(`resdom data split`, or retrain) to recommend by user id")
    index = {text: i for i, text in enumerate(label_texts(labels))}
    wanted = [str(u) for u in users]
    missing = [u for u in wanted if u not in index]
    if missing:
        shown = ", ".join(quote(u) for u in missing[:5])
        more = f" and {len(missing) - 5:,} more" if len(missing) > 5 else ""
        raise ResdomError(f"{where}: {len(missing):,} user id(s) not in the data: {shown}{more} (ids are matched "
                          f"exactly as text; the data has {len(labels):,} users){other_spelling(missing, index)}")
    return np.array([index[u] for u in wanted], dtype=np.int64)


def _inputs(split: SplitData, history: str) -> Sequences:
    """The input sequence of every user that has one (``history``: module docstring), ``users`` their indices."""
    history = choice(history, HISTORIES, "history")  # any case; a did-you-mean
    if history == "all":
        return split.history()
    part: EvalSet = getattr(split, history)
    return part.inputs


def _select(inputs: Sequences, wanted: np.ndarray | None, history: str, ids: list[Any]) -> np.ndarray:
    """Rows of ``inputs`` for user indices ``wanted`` (None: every row), in ``wanted``'s order; ``ids``: the
    external id of each of ``wanted``, for the message naming those without an input."""
    if wanted is None:
        return np.arange(len(inputs), dtype=np.int64)
    row_of = {int(u): r for r, u in enumerate(inputs.users)}
    absent = [ids[j] for j, u in enumerate(wanted) if int(u) not in row_of]
    if absent:
        shown = ", ".join(quote(u) for u in absent[:5]) + (f" and {len(absent) - 5:,} more" if len(absent) > 5 else "")
        raise ResdomError(f"users: {len(absent):,} of them have no {history} input: {shown}; history='all' "
                          "recommends for every user with any interaction")
    return np.array([row_of[int(u)] for u in wanted], dtype=np.int64)


def item_index(split: SplitData, items: Iterable[Any] | str | int, where: str) -> tuple[np.ndarray, list[Any]]:
    """(int64 item ids 1..n_items of the external ids in ``items`` that the split knows, in the order given,
    duplicates kept; the ids it does not know, as given). Ids are matched as text, exactly (``user_index``)."""
    return _match_items(item_lookup(split, where), items, where)


def item_lookup(split: SplitData, where: str) -> dict[str, int]:
    """The item id (1..n_items) of each external item id's text, built once for all the ids a call matches."""
    labels = split.item_labels
    if labels is None:
        raise ResdomError(f"{where}: this split was prepared before resdom kept the items' ids; prepare it again "
                          "(`resdom data split`, or retrain) to name items by id")
    return {text: i + 1 for i, text in enumerate(label_texts(labels[1:]))}


def _match_items(index: dict[str, int], items: Iterable[Any] | str | int, where: str) -> tuple[np.ndarray, list[Any]]:
    """``item_index``'s answer from a built ``item_lookup``; ``where`` names the ids in an error."""
    given = _ids(_as_list(items), where)
    known = [index[str(x)] for x in given if str(x) in index]
    unknown = [x for x in given if str(x) not in index]
    return np.asarray(known, dtype=np.int64), unknown


def _ids(values: list[Any], where: str) -> list[Any]:
    """``values`` as they are; a container among them (a list, a dict, ...: a nesting mistake, such as sessions given
    as ``items``) is a ResdomError naming it, not an id left out (nor a TypeError, unhashable, in the note); so is
    a missing value (``_missing_id``), which matched the id written 'None' or 'nan' as text without a word."""
    for x in values:
        if isinstance(x, (list, tuple, set, frozenset, dict, np.ndarray)):
            raise ResdomError(f"{where}: {short(x)} is not an id (ids are strings or integers, matched as text)")
        if _missing_id(x):
            raise ResdomError(f"{where}: {x!r}, a missing value, is not an id (the data holds none: its readers "
                              "refuse them); drop it first (e.g. ids.dropna())")
    return values


def _missing_id(x: Any) -> bool:
    """Whether ``x`` is a missing value (None, a float NaN, pandas' NA or NaT), which no id of the data is."""
    import pandas as pd

    if x is None:
        return True
    if isinstance(x, (str, bytes)) or np.ndim(x) != 0:
        return False
    try:
        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def _as_list(values: Iterable[Any] | str | int) -> list[Any]:
    """One id (a str, bytes or a scalar) as a one-item list, else the ids as a list."""
    return [values] if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) else list(values)


def unknown_note(unknown: list[Any], what: str, known: Iterable[str] = ()) -> str:
    """One line naming ids not in the data: how many, the first few (quoted where text), what became of them; and
    where one is an id of ``known`` (the data's ids as text) in other Unicode code points, which one
    (``other_spelling``)."""
    shown = ", ".join(quote(x) for x in unknown[:5])
    more = f", and {len(unknown) - 5:,} more" if len(unknown) > 5 else ""
    return f"{len(unknown):,} {what} not in the data, left out: {shown}{more}{other_spelling(unknown, known)}"


def other_spelling(unknown: list[Any], known: Iterable[str]) -> str:
    """Where an id of ``unknown`` is an id of ``known`` but for surrounding spaces (``--users "u1, u2"``, or data
    ids ``" u2"``), or in Unicode's NFC form an id of ``known`` spelled with other code points (an accent composed
    in one, decomposed in the other: they look the same), the clause naming both; else ''. Looked for only where a
    lookup missed."""
    texts = [str(x) for x in unknown]
    if not texts:
        return ""
    spaced = {t.strip(): t for t in texts if t.strip() != t and t.strip()}
    bare = set(texts)
    composed = {unicodedata.normalize("NFC", t): t for t in texts if not t.isascii()}
    for text in known:
        if (given := spaced.get(text)) is not None:
            return f" ({quote(given)} is the data's {quote(text)} with spaces around it; ids are matched exactly)"
        if text.strip() != text and text.strip() in bare:
            return (f" ({quote(text.strip())} is the data's {quote(text)} without the spaces around it; ids are "
                    "matched exactly)")
        if not text.isascii() and (given := composed.get(unicodedata.normalize("NFC", text))) is not None:
            return (f" ({spelled(given)} is the data's {spelled(text)} in other Unicode code points; ids are "
                    "matched exactly)")
    return ""


def session_inputs(split: SplitData, sequences: Any) -> tuple[Sequences, list[Any], list[str]]:
    """``sequences`` (a dict {id: item ids}, or a pandas Series of item-id lists indexed by id, such as
    ``df.groupby("session")["item"].apply(list)``; or a list of item-id lists, ids 0, 1, ... then) -> (their known
    items as Sequences in the given order, oldest first; the id of each; notes: the item ids not in the data, left
    out, and the sequences left with no item, which get no rows). No session with an item of the data is a
    ResdomError, as a whitelist of no known id is (an empty table hid ids of another data set, or typos)."""
    import pandas as pd

    if isinstance(sequences, (Mapping, pd.Series)):  # a Series read as a list lost its index: sessions 0, 1, ...
        pairs = list(sequences.items())
        ids, lists = [sid for sid, _ in pairs], [seq for _, seq in pairs]
    elif isinstance(sequences, (str, bytes)) or not isinstance(sequences, Iterable):
        raise ResdomError(f"sequences: expected a list of item-id lists or a dict {{id: item ids}} (got "
                          f"{type(sequences).__name__})")
    else:
        lists = list(sequences)
        ids = list(range(len(lists)))
    if not lists:
        raise ResdomError("sequences: no sequences in it")
    blank = [j for j, x in enumerate(ids) if _missing_id(x) or str(x) == ""]
    if blank:  # its items would be recommended for a session written as an empty id: whose?
        raise ResdomError(f"sequences: session {blank[0] + 1} of {len(ids):,} has an empty id ({quote(ids[blank[0]])}; "
                          f"{len(blank):,} in all); give every session its id")
    counts = Counter(str(x) for x in ids)
    twice = [x for x in ids if counts[str(x)] > 1]
    if twice:  # ids are written as text: 1 and "1" would be one session in the output
        raise ResdomError(f"sequences: {len(set(map(str, twice))):,} session id(s) given twice (ids are matched and "
                          f"written as text): {', '.join(quote(x) for x in twice[:4])}")
    bad = [x for x in lists if isinstance(x, (str, bytes)) or not isinstance(x, Iterable)]
    if bad:
        raise ResdomError(f"sequences: each sequence must be a list of item ids, oldest first (got {bad[0]!r}; "
                          "one session: [[...]])")
    rows, unknown, empty = [], [], []
    index = item_lookup(split, "sequences")  # once: built per session, it cost a catalogue's worth each
    for sid, seq in zip(ids, lists):
        known, missing = _match_items(index, list(seq), f"sequences: session {quote(sid)}")
        unknown += missing
        rows.append(known.tolist())
        if not len(known):
            empty.append(sid)
    if len(empty) == len(ids):  # as a whitelist none of whose ids is known: not a table of nothing, exit 0
        distinct = list(dict.fromkeys(unknown))
        given = (f"{len(distinct):,} item id(s), none in the data: {', '.join(quote(x) for x in distinct[:5])}"
                 f"{', ...' if len(distinct) > 5 else ''}" if distinct else "no item ids")
        raise ResdomError(f"sequences: none of the {len(ids):,} session(s) holds an item of the data ({given}; ids "
                          f"are matched exactly as text){other_spelling(distinct, index)}")
    notes = []
    if unknown:
        notes.append("sequences: " + unknown_note(list(dict.fromkeys(unknown)), "item id(s)", index))
    if empty:
        named = ", ".join(quote(x) for x in empty[:3])
        notes.append(f"{len(empty):,} sequence(s) with no item of the data get no rows: {named}"
                     f"{', ...' if len(empty) > 3 else ''}")
    return Sequences.from_lists(rows), ids, notes


def allowed_items(split: SplitData, items: Any, exclude: Any) -> tuple[np.ndarray | None, list[str]]:
    """(bool (n_items + 1,) True for an item that may never be recommended (None: every item may be), notes):
    ``items``, a whitelist of external ids (None: every item), ``exclude``, ids never recommended (None: none).
    Ids not in the data are left out with a note; a whitelist none of whose ids is in the data is a ResdomError."""
    if items is None and exclude is None:
        return None, []
    blocked = np.zeros(split.n_items + 1, dtype=bool)
    notes = []
    lookup = item_lookup(split, "items" if items is not None else "exclude")
    if items is not None:
        known, unknown = _match_items(lookup, items, "items")
        if not len(known):
            raise ResdomError(f"items: none of the {len(_as_list(items)):,} item id(s) of the whitelist is in the "
                              f"data (ids are matched exactly as text){other_spelling(unknown, lookup)}")
        blocked[:] = True
        blocked[known] = False
        if unknown:
            notes.append("items: " + unknown_note(unknown, "whitelisted item id(s)", lookup))
    if exclude is not None:
        known, unknown = _match_items(lookup, exclude, "exclude")
        blocked[known] = True
        if unknown:
            notes.append("exclude: " + unknown_note(unknown, "item id(s) to exclude", lookup))
    blocked[0] = True
    return blocked, notes


def recommend(
    model: Any,
    split: SplitData,
    users: Iterable[Any] | str | int | None = None,
    k: int = 10,
    *,
    sequences: Any = None,
    items: Iterable[Any] | str | int | None = None,
    exclude: Iterable[Any] | str | int | None = None,
    filter_seen: bool | None = None,
    alpha: float = 1.0,
    history: str = "all",
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """The top ``k`` items of each user in ``users`` (external ids; None: every user with an input), or of each
    sequence of ``sequences``, as a DataFrame in RecTools' columns (``COLUMNS``: user_id, item_id, score, rank
    1..k), users in the order given (None: increasing user index; one id, e.g. "u7": that user; an id given twice
    is recommended once, at its first place, with a note in ``DataFrame.attrs["note"]``), in external ids.

    ``sequences``: ad hoc sessions instead of the split's users: a dict {session id: item ids, oldest first} (or a
    pandas Series of them indexed by session id) or a list of item-id lists (session ids 0, 1, ...), in the data's
    external item ids; ids not in the data are left out with a note (a session left with none gets no rows).
    ``items``: a whitelist (only these may be recommended); ``exclude``: items never recommended; both in external
    ids, unknown ones left out with a note.
    ``model``: any Diagnosable (``encode``, ``item_embeddings``, ``n_items``, ``max_len``); ``alpha``: the
    residual scale at inference in every attention block (1: the model as trained; ``interface.residual_scale``).
    ``filter_seen``: items of the user's input are never recommended; None: the split's setting
    (``SplitData.filter_seen``: True except for data sets that keep seen items, as evaluation). ``device``:
    where to score, the model's own device (None: wherever it is; another is a ResdomError). ``progress``: on
    stderr, a bar of the users on a terminal, a plain line every 30 s in a log. Ids:
    ``SplitData.item_labels`` / ``user_labels``; a split without them (saved before resdom kept them) gives resdom's
    internal ids, with a note in ``DataFrame.attrs["note"]``.
    """
    return recommend_lists(model, split, users, k, sequences=sequences, items=items, exclude=exclude,
                           filter_seen=filter_seen, alpha=alpha, history=history, batch_size=batch_size,
                           device=device, progress=progress).frame()


def recommend_lists(
    model: Any,
    split: SplitData,
    users: Iterable[Any] | str | int | None = None,
    k: int = 10,
    *,
    sequences: Any = None,
    items: Iterable[Any] | str | int | None = None,
    exclude: Iterable[Any] | str | int | None = None,
    filter_seen: bool | None = None,
    alpha: float = 1.0,
    history: str = "all",
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = False,
    part_rows: int | None = None,
) -> Lists:
    """``recommend``'s lists as they are computed (``Lists``): every argument is checked here, before any list is
    made; ``Lists.frames()`` then yields them in parts of about ``part_rows`` rows (None: ``PART_ROWS``), so that
    ``resdom recommend`` writes a request of any size (``--k 100000`` for every user) in the memory of one part,
    and ``Lists.frame()`` is ``recommend``'s frame."""
    k, batch_size = positive_int(k, "k"), positive_int(batch_size, "batch_size")
    part_rows = PART_ROWS if part_rows is None else positive_int(part_rows, "part_rows")
    filter_seen, alpha = optional_bool(filter_seen, "filter_seen"), alpha_value(alpha, "alpha")
    progress = flag(progress, "progress")
    history = choice(history, HISTORIES, "history")

    try:
        check_model(model)
    except TypeError as e:
        raise ResdomError(f"model: {e}") from None
    if users is not None and sequences is not None:
        raise ResdomError("users, sequences: give one of them (the split's users, or sessions of item ids)")
    if sequences is not None and history != "all":
        raise ResdomError(f"history: {history!r} chooses the input of the split's users; sessions are scored from "
                          "their own items (leave it 'all')")
    if filter_seen is None:
        filter_seen = split.filter_seen
    notes: list[str] = []
    blocked, more = allowed_items(split, items, exclude)
    if sequences is not None:
        inputs, session_ids, more_notes = session_inputs(split, sequences)
        notes += more_notes
        rows = np.flatnonzero(inputs.lengths > 0)
    else:
        inputs = _inputs(split, history)
        if not len(inputs):
            raise ResdomError(f"history: the split holds no {history} users (protocol none holds out none); 'all' "
                              "recommends for every user")
        ids = None
        if users is not None:
            given = _ids(_as_list(users), "users")
            if not given:
                raise ResdomError("users: no user ids given (None: every user)")
            first: dict[str, Any] = {}  # text -> the id as given, at its first place (ids matched as text)
            for u in given:
                first.setdefault(str(u), u)
            ids = list(first.values())
            if len(ids) < len(given):
                counts = Counter(str(u) for u in given)
                repeated = [u for u in ids if counts[str(u)] > 1]
                notes.append(f"{len(repeated):,} user id(s) given more than once "
                             f"({', '.join(map(quote, repeated[:3]))}{', ...' if len(repeated) > 3 else ''}): each "
                             "recommended once, at its first place")
        wanted = None if ids is None else user_index(split, ids)
        rows = _select(inputs, wanted, history, ids or [])
    notes += more
    dev = _scoring_device(model, device)
    if float(alpha) != 1.0 and not list(model.attention_blocks()):
        raise ResdomError("alpha: this model has no attention blocks whose residual could be scaled (e.g. GRU4Rec)")
    chunk = user_chunk_size(int(model.n_items), activation_chunk(model, inputs.lengths[rows], batch_size))
    block = score_rows(model)
    mask = torch.from_numpy(blocked).to(dev) if blocked is not None else None
    per_part = max(1, part_rows // min(int(k), int(model.n_items) + 1))  # users whose lists make a part

    def scaled() -> contextlib.AbstractContextManager[None]:  # alpha 1: the model as it is (also a caller's scale)
        return residual_scale(model, float(alpha)) if float(alpha) != 1.0 else contextlib.nullcontext()

    with inference(model), scaled():
        item_emb = model.item_embeddings()

    def parts() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for start in chunks(len(rows), chunk, progress, "recommend"):
            idx = rows[start:start + chunk]
            with inference(model), scaled():  # not held across a yield: the caller's code between parts
                scores = own_scores(model, inputs, idx, item_emb, block, dev)
                mask_seen(scores, history_pairs(inputs, idx, dev) if filter_seen else None)
                if mask is not None:
                    scores[:, mask] = -math.inf
            yield from _top_parts(scores, int(k), start, per_part)

    def make(r: np.ndarray, found: np.ndarray, scores: np.ndarray, rank: np.ndarray) -> pd.DataFrame:
        import pandas as pd

        if sequences is not None:
            who = np.empty(len(r), dtype=object)
            who[:] = [session_ids[int(j)] for j in rows[r]]
            users_out = _plain(who)
        else:
            users_out = external_ids(split.user_labels, inputs.users[rows[r]])
        return pd.DataFrame({"user_id": users_out, "item_id": external_ids(split.item_labels, found),
                             "score": scores, "rank": rank.astype(np.int64)})

    def finish(per_row: np.ndarray) -> list[str]:
        """The notes only the whole set of lists can give: users with short lists (``per_row``: rows of each)."""
        done = []
        if split.user_labels is None or split.item_labels is None:
            done.append("this split was saved before resdom kept external ids: users and items are resdom's "
                        "internal indices")
        short = np.flatnonzero(per_row < int(k))
        if len(short):
            none = int((per_row == 0).sum())
            if sequences is not None:
                short_ids = [session_ids[int(j)] for j in rows[short[:3]]]
            else:
                short_ids = external_ids(split.user_labels, inputs.users[rows[short[:3]]]).tolist()
            named = ", ".join(quote(x) for x in short_ids)  # quoted: an id may hold a comma or a space
            why = [*(["seen items filtered"] if filter_seen else []),
                   *(["a whitelist"] if items is not None else []),
                   *(["items excluded"] if exclude is not None else [])]
            kind = "sequences" if sequences is not None else "users"
            done.append(f"{len(short):,} of {len(rows):,} {kind} have fewer than {int(k)} recommendable items "
                        f"({''.join(w + ', ' for w in why)}{int(model.n_items):,} items in all) and get "
                        f"fewer rows{f' ({none:,} of them none)' if none else ''}: "
                        f"{kind[:-1] if len(short) == 1 else kind} {named}{', ...' if len(short) > 3 else ''}")
        return done

    return Lists(parts(), len(rows), make, notes, finish)


SCORE_ROWS = 32  # users a forward pass of ``own_scores``: a fixed shape, so a user's scores are its own


def score_rows(model: Any) -> int:
    """Rows of every forward pass of ``own_scores``: ``SCORE_ROWS``, fewer where a pass of the model's whole window
    or the (rows, n_items + 1) scores would pass the budgets (``activation_chunk``, ``user_chunk_size``); a number
    of the model alone, never of the users asked or ``batch_size``."""
    window = np.array([int(model.max_len)])
    return user_chunk_size(int(model.n_items), activation_chunk(model, window, SCORE_ROWS))


def own_width(length: int, max_len: int) -> int:
    """The width of the padded input a user of ``length`` items is scored in: the next power of two, at most
    ``max_len`` (an empty input: ``max_len``, as ``batches.iter_eval_batches`` gives it the whole window)."""
    if length <= 0:
        return max_len
    return min(max_len, 1 << (int(length) - 1).bit_length())


def own_scores(model: Any, inputs: Sequences, idx: np.ndarray, item_emb: torch.Tensor, rows: int,
               device: torch.device) -> torch.Tensor:
    """scores (len(idx), N+1) of the users ``idx`` of ``inputs`` (``ranking.full_scores``, nothing filtered), each
    the same whoever else is scored with it: the arithmetic of a matrix product depends on its shape (a CPU's BLAS
    takes another path for 1 or 8 rows than for 16, a GPU's picks its kernel by shape: 1e-5 apart for d 64 and
    random weights), and the trimmed width of a batch on its longest input, so each pass is ``rows`` users
    (``score_rows``, the last ones repeated to fill it) of one width of their own (``own_width``)."""
    max_len = int(model.max_len)
    lengths = np.minimum(inputs.lengths[idx], max_len)
    widths = np.array([own_width(int(n), max_len) for n in lengths], dtype=np.int64)
    out: torch.Tensor | None = None
    for width in np.unique(widths):
        where = np.flatnonzero(widths == width)
        for a in range(0, len(where), rows):
            at = where[a:a + rows]
            fill = np.concatenate([at, np.repeat(at[-1:], rows - len(at))])
            padded = inputs.padded(max_len, idx[fill])
            padded = np.pad(padded, ((0, 0), (int(width) - padded.shape[1], 0)))
            batch = torch.from_numpy(padded).to(device)
            scores = full_scores(final_states(model, batch), item_emb)
            if out is None:
                out = scores.new_empty((len(idx), scores.shape[1]))
            out[torch.from_numpy(at).to(device)] = scores[:len(at)]
    assert out is not None  # idx is never empty (chunks of rows)
    return out


def similar_items(
    model: Any,
    split: SplitData,
    items: Iterable[Any] | str | int | None = None,
    k: int = 10,
    *,
    batch_size: int = 1024,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """The ``k`` items most similar to each of ``items`` (external ids; None: every item) by cosine over the
    model's output item embeddings (``item_embeddings()``, what it scores against), the item itself excluded, as
    a DataFrame in RecTools' item-to-item columns (``SIMILAR_COLUMNS``: target_item_id, item_id, score (the
    cosine), rank 1..k); equal cosines by increasing internal item id. Ids not in the data are left out with a
    note in ``DataFrame.attrs["note"]``; none known is a ResdomError; an id given twice is listed once. Every item
    is scored against the whole catalogue (items x catalogue work: hours at a million items); ``progress``: on
    stderr, a bar of the items on a terminal, a plain line every 30 s in a log."""
    return similar_lists(model, split, items, k, batch_size=batch_size, device=device, progress=progress).frame()


def similar_lists(
    model: Any,
    split: SplitData,
    items: Iterable[Any] | str | int | None = None,
    k: int = 10,
    *,
    batch_size: int = 1024,
    device: str | torch.device | None = None,
    progress: bool = False,
    part_rows: int | None = None,
) -> Lists:
    """``similar_items``'s lists as they are computed (``Lists``, as ``recommend_lists``): the arguments checked
    here, the lists made as ``Lists.frames()`` asks for them, in parts of about ``part_rows`` rows."""
    k, batch_size = positive_int(k, "k"), positive_int(batch_size, "batch_size")
    part_rows = PART_ROWS if part_rows is None else positive_int(part_rows, "part_rows")
    progress = flag(progress, "progress")
    try:
        check_model(model)
    except TypeError as e:
        raise ResdomError(f"model: {e}") from None
    notes = []
    if items is None:
        targets = np.arange(1, split.n_items + 1, dtype=np.int64)
    else:
        lookup = item_lookup(split, "items")
        targets, unknown = _match_items(lookup, items, "items")
        if not len(targets):
            raise ResdomError(f"items: none of the {len(_as_list(items)):,} item id(s) is in the data (ids are "
                              f"matched exactly as text){other_spelling(unknown, lookup)}")
        if unknown:
            notes.append("items: " + unknown_note(unknown, "item id(s)", lookup))
        targets = np.asarray(list(dict.fromkeys(targets.tolist())), dtype=np.int64)
    if k > split.n_items - 1:  # as recommend names its short lists
        notes.append(f"k: {k:,} is more than the {split.n_items - 1:,} other items of the catalogue: each item gets "
                     f"{split.n_items - 1:,} rows")
    dev = _named_device(device) if device is not None else model_device(model)  # the embeddings are moved there
    chunk = user_chunk_size(int(split.n_items), batch_size)  # (chunk, N+1) cosines within ranking.SCORE_BUDGET
    block = user_chunk_size(int(split.n_items), SCORE_ROWS)  # items a product: its shape the same, whatever is asked
    per_part = max(1, part_rows // min(k, int(split.n_items) + 1))  # items whose lists make a part
    with inference(model):
        item_emb = model.item_embeddings().to(dev)
        unit = unit_rows(item_emb)  # once: normalised per chunk, it cost a catalogue's worth of work each

    def parts() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        for start in chunks(len(targets), chunk, progress, "similar", unit="item"):
            ids = targets[start:start + chunk]
            with inference(model):  # not held across a yield: the caller's code between parts
                scores = torch.cat([own_cosines(item_emb, ids[a:a + block], unit, block, dev)
                                    for a in range(0, len(ids), block)])
            yield from _top_parts(scores, k, start, per_part)

    def make(r: np.ndarray, found: np.ndarray, scores: np.ndarray, rank: np.ndarray) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({"target_item_id": external_ids(split.item_labels, targets[r]),
                             "item_id": external_ids(split.item_labels, found),
                             "score": scores, "rank": rank.astype(np.int64)})

    return Lists(parts(), len(targets), make, notes)


def own_cosines(item_emb: torch.Tensor, ids: np.ndarray, unit: torch.Tensor, rows: int, device: torch.device
                ) -> torch.Tensor:
    """``beyond.cosine_scores`` of the items ``ids`` (at most ``rows``) in one product of ``rows`` rows (the last
    id repeated to fill it): an item's cosines are the same whatever other items are asked with it (``own_scores``)."""
    fill = np.concatenate([ids, np.repeat(ids[-1:], rows - len(ids))])
    return cosine_scores(item_emb, torch.from_numpy(fill).to(device), unit)[:len(ids)]


def _top_parts(scores: torch.Tensor, k: int, start: int, per_part: int
               ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``top_k`` of the rows of ``scores`` (a chunk whose first row is row ``start`` of all), ``per_part`` rows at
    a time: (row, item, score) of each part, rows counted from the first chunk's. Row by row as ``top_k`` of the
    whole chunk (each row's list is its own), and a part's arrays are ``per_part`` lists, not a chunk's: a chunk
    of 256 users at k 100,000 held 25.6 million rows at once."""
    for a in range(0, scores.shape[0], per_part):
        with torch.inference_mode():
            r, i, s = top_k(scores[a:a + per_part], k)
        yield r + (start + a), i, s


class Lists:
    """Top-K lists (``recommend_lists``, ``similar_lists``) made as they are asked for, once: ``frames()`` yields
    them as DataFrames of whole lists, about ``PART_ROWS`` rows each (one list where a list is longer), to write
    one after the other in bounded memory; ``frame()`` gives them as one DataFrame (``recommend``'s,
    ``similar_items``' frame, ``attrs["note"]`` set). After either: ``note`` (None: nothing to say), ``n_rows``
    and ``n_lists`` (the lists with a row)."""

    def __init__(self, parts: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]], n: int,
                 make: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], pd.DataFrame],
                 notes: list[str], finish: Callable[[np.ndarray], list[str]] | None = None) -> None:
        self._parts, self._make, self._notes, self._finish = parts, make, list(notes), finish
        self._per_row = np.zeros(n, dtype=np.int64)  # rows of each list: a number a user (or item), not a row
        self.note: str | None = None
        self.n_rows = self.n_lists = 0

    def frames(self) -> Iterator[pd.DataFrame]:
        made = False
        for r, found, scores in self._parts:
            made = True
            yield self._make(r, found, scores, self._counted(r))
        if not made:  # no list at all: the columns alone
            yield self._make(*_no_rows())
        self._done()

    def frame(self) -> pd.DataFrame:
        got = list(self._parts)
        r, found, scores = (np.concatenate([p[j] for p in got]) for j in range(3)) if got else _no_rows()[:3]
        frame = self._make(r, found, scores, self._counted(r))
        self._done()
        if self.note:
            frame.attrs["note"] = self.note
        return frame

    def _counted(self, r: np.ndarray) -> np.ndarray:
        """The rank (1..) of each row of whole lists ``r`` (sorted), their rows counted."""
        lists, rows = np.unique(r, return_counts=True)
        self._per_row[lists] += rows
        return np.arange(len(r)) - np.searchsorted(r, r, side="left") + 1

    def _done(self) -> None:
        notes = self._notes + (self._finish(self._per_row) if self._finish is not None else [])
        self.note = "; ".join(notes) if notes else None
        self.n_rows, self.n_lists = int(self._per_row.sum()), int((self._per_row > 0).sum())


def _no_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)


def chunks(n: int, size: int, progress: bool, desc: str, unit: str = "user") -> Iterable[int]:
    """The first row of each chunk of ``size`` of ``n`` rows, with progress in ``unit``s where ``progress``: a bar
    on a terminal, plain lines in a log (``batches.with_progress``)."""
    return with_progress(range(0, n, size), n, progress, desc, unit=unit, size=lambda start: min(size, n - start))


def _named_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch.device: a name as ``--device`` takes it (auto, cpu, cuda, mps, any case), where an
    unknown or unavailable one is a ResdomError (``distributed.resolve_device``), or a torch.device as it is."""
    return device if isinstance(device, torch.device) else resolve_device(str(device), "device")


def _scoring_device(model: Any, device: str | torch.device | None) -> torch.device:
    """The model's own device, where ``recommend`` scores (None: that one); ``device`` naming another is a
    ResdomError: the model is never moved behind its owner's back (``model.to(device)`` first)."""
    own = model_device(model)
    if device is None:
        return own
    wanted = _named_device(device)
    if wanted.type != own.type or (None not in (wanted.index, own.index) and wanted.index != own.index):
        raise ResdomError(f"device: the model is on {own}, not {wanted}: move it there first (model.to("
                          f"{str(wanted)!r})), or leave device out to score where it is")
    return own


def _plain(values: np.ndarray) -> np.ndarray:
    """Session ids as an int64 array where every id is an integer label (|id| < 10**18, the readers' rule), as
    their text where every id is an integer but some are not (2**64 was an OverflowError), else as given."""
    if len(values) and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in values):
        if all(-CANONICAL_INT_BOUND < int(x) < CANONICAL_INT_BOUND for x in values):
            return np.asarray([int(x) for x in values], dtype=np.int64)
        return np.asarray([str(int(x)) for x in values], dtype=object)
    return values


def external_ids(labels: np.ndarray | None, index: np.ndarray) -> np.ndarray:
    """``labels[index]`` as an int64 array where every label is an integer, else an object array of str; the
    indices themselves where ``labels`` is None."""
    if labels is None:
        return np.asarray(index, dtype=np.int64)
    picked = np.asarray(labels, dtype=object)[index] if np.asarray(labels).dtype == object else labels[index]
    if np.asarray(picked).dtype.kind in "iu":
        return np.asarray(picked, dtype=np.int64)
    if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in picked):
        return np.asarray(picked, dtype=np.int64)
    return np.asarray([str(x) for x in picked], dtype=object)
