"""Preprocessing (spec §1): ordering, consecutive-repeat removal, iterative k-core, id remapping.

Order of operations, each optional and recorded in ``Prepared.steps``:

0. user sample (off by default): keep ``sample_users`` users drawn uniformly without replacement with
   ``sample_seed`` (users ordered by the string form of their raw id), before anything else (time-to-split
   sampled Zvuk's users from the raw file);
1. order: group by user; within a user sort by timestamp with a *stable* sort, so ties keep source order
   (the rule matters: tie order creates or destroys sequential signal), or with ``ties="item"`` by increasing
   raw item id (string ids as text); without timestamps source order;
2. remove consecutive repeats of the same item within a user (off by default: the MANIFEST counts of Yelp
   include its 3,873 repeats);
3. iterative k-core (off by default; registered paper data sets: k = 5 unless their preset says otherwise):
   drop items with < k interactions and users with < k, until stable.
   With repeat removal on, 2 and 3 alternate until neither removes anything (k-core can create repeats).
   This gives exactly the rows time-to-split's ``core_filter`` keeps (repeats once, then, while some user or
   item has < k: users with < k, items with < k, repeats): a row that can be removed stays removable whatever
   else goes (counts only fall; a repeat's predecessor leaves only through k-core, which removes the repeat
   too, same user and item, or as a repeat itself, when the repeat follows an earlier row of the same item),
   so every order of the passes ends at the same rows (tested against a literal time-to-split loop);
4. remap items to 1..N (0 = padding) in increasing raw id (integer ids; the identity where they already are
   1..N) or in order of first appearance (string ids); users to 0..U-1 the same way.

All steps are vectorised (numpy), no Python loop per interaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import ConfigDict, field_validator

from resdom.checks import NumbersModel, arg
from resdom.data.readers import RawInteractions
from resdom.data.sequences import Sequences
from resdom.errors import ResdomError

TIE_RULE = "stable sort by timestamp within each user; equal timestamps keep source order"
TIE_RULE_ITEM = "sort by timestamp within each user; equal timestamps by increasing raw item id (ties='item')"
TIE_RULE_NO_TIMES = "no timestamps: each user's interactions in source order"


class PreprocessConfig(NumbersModel):
    """Preprocessing options. ``k_core`` None or 0 turns the k-core off (the default: a user's own data is not
    filtered; registered paper data sets apply their protocol's k-core, ``prepare.REGISTERED_DEFAULTS``)."""

    model_config = ConfigDict(extra="forbid")

    k_core: int | None = None
    remove_repeats: bool = False
    sort_by_time: bool = True
    remap: bool = True
    # equal timestamps of a user: "source" keeps the file's order, "item" orders them by increasing raw item id
    ties: Literal["source", "item"] = "source"
    # added later (``LATER_FIELDS``): recorded only when set, so the manifests of earlier splits stay as they were
    sample_users: int | None = None
    sample_seed: int = 0

    @field_validator("k_core")
    @classmethod
    def _k_non_negative(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise ValueError("must be >= 0 (0 or None: off)")
        return v or None

    @field_validator("sample_users")
    @classmethod
    def _sample_positive(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("must be >= 1 (None: all users)")
        return v

    def record(self) -> dict[str, Any]:
        """The configuration for the manifest: every field, except the later ones left at their default (a split
        made before they existed keeps its manifest, and so its data fingerprint, ``runs.data_fingerprint``)."""
        out = self.model_dump()
        for name in LATER_FIELDS:
            if out[name] == type(self).model_fields[name].default:
                del out[name]
        return out


LATER_FIELDS = ("sample_users", "sample_seed")


@dataclass
class Prepared:
    """Full per-user sequences after preprocessing.

    sequences:   Sequences, users 0..U-1 (``sequences.users``), items 1..n_items, times aligned or None.
    user_labels: (U,) raw id of each user index.
    item_labels: (n_items + 1,) raw id of each item id (entry 0, padding, is None / -1).
    steps:       the preprocessing record (one dict per step, with counts).
    changes:     what preprocessing removed or kept that the user should hear of: {"k_core": {"users", "items",
                 "interactions"} removed (or None: off), "repeats": {"repeat_rows", "consecutive", "removed"},
                 "sample_users": {"n", "seed", "users", "items", "interactions"} left out (only when sampling),
                 "removed": all removed}.
    """

    sequences: Sequences
    n_items: int
    user_labels: np.ndarray
    item_labels: np.ndarray
    steps: list[dict[str, Any]] = field(default_factory=list)
    tie_rule: str = TIE_RULE
    changes: dict[str, Any] = field(default_factory=dict)


def encode_ids(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes (n,) int64 in 0..m-1, labels (m,)): integer keys in increasing order, strings by first appearance."""
    if keys.dtype.kind in "iu":
        labels, codes = np.unique(keys, return_inverse=True)
        return codes.astype(np.int64).ravel(), labels
    codes, labels = pd.factorize(keys, sort=False)
    return codes.astype(np.int64), np.asarray(labels, dtype=object)


def label_ranks(labels: np.ndarray) -> np.ndarray:
    """int64 (m,): the place of each code's label in increasing raw id order (``encode_ids``' labels): the codes
    themselves for integer ids (already increasing), the rank of the text for string ids (numbered by first
    appearance)."""
    if labels.dtype.kind in "iu":
        return np.arange(len(labels), dtype=np.int64)
    ranks = np.empty(len(labels), dtype=np.int64)
    ranks[np.argsort(np.asarray([str(x) for x in labels]), kind="stable")] = np.arange(len(labels))
    return ranks


def order_rows(users: np.ndarray, times: np.ndarray | None, items: np.ndarray | None = None) -> np.ndarray:
    """int64 (n,) row order: grouped by user code, then by time; equal times keep source order (stable), or,
    with ``items`` (codes in increasing raw id), go by increasing item."""
    pos = np.arange(len(users), dtype=np.int64)
    if times is None:
        return np.lexsort((pos, users))
    return np.lexsort((pos, times, users) if items is None else (pos, items, times, users))


def consecutive_repeat_mask(users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """bool (n,): False where a row repeats the previous row's item of the same user (rows grouped, ordered)."""
    keep = np.ones(len(items), dtype=bool)
    keep[1:] = ~((users[1:] == users[:-1]) & (items[1:] == items[:-1]))
    return keep


def kcore_mask(users: np.ndarray, items: np.ndarray, k: int) -> tuple[np.ndarray, int]:
    """(bool (n,) rows kept, rounds): iterative k-core on interaction counts (repeats count), to a fixed point.

    ``users`` / ``items`` are codes 0..m-1. Every kept user and item has >= k kept rows.
    """
    keep = np.ones(len(items), dtype=bool)
    n_users = int(users.max(initial=-1)) + 1
    n_items = int(items.max(initial=-1)) + 1
    rounds = 0
    while True:
        uc = np.bincount(users[keep], minlength=n_users)
        ic = np.bincount(items[keep], minlength=n_items)
        drop = keep & ((uc[users] < k) | (ic[items] < k))
        rounds += 1
        if not drop.any():
            return keep, rounds
        keep &= ~drop


def sample_users_mask(labels: np.ndarray, codes: np.ndarray, n: int, seed: int) -> np.ndarray:
    """bool (rows,): rows of ``n`` users drawn uniformly without replacement (``numpy.random.default_rng(seed)``)
    from the users ordered by the string form of their raw id (``labels[code]``), so the draw depends only on the
    file's ids, not on how they were encoded. All rows where there are at most ``n`` users."""
    if n >= len(labels):
        return np.ones(len(codes), dtype=bool)
    by_name = np.argsort(np.asarray([str(x) for x in labels], dtype=object), kind="stable")
    chosen = by_name[np.random.default_rng(seed).choice(len(labels), size=n, replace=False)]
    picked = np.zeros(len(labels), dtype=bool)
    picked[chosen] = True
    return picked[codes]


def _drop_repeats(keep: np.ndarray, ucode: np.ndarray, icode: np.ndarray) -> int:
    """Unmark (in place) the kept rows that repeat the previous kept row's item of the same user; how many."""
    idx = np.flatnonzero(keep)
    rep = consecutive_repeat_mask(ucode[idx], icode[idx])
    keep[idx[~rep]] = False
    return int((~rep).sum())


def _filter(keep: np.ndarray, ucode: np.ndarray, icode: np.ndarray, cfg: PreprocessConfig) -> tuple[int, int, int]:
    """Steps 2 and 3: repeats, then k-core to its fixed point, alternating until neither removes anything.
    Updates ``keep``; returns (repeats removed, k-core removed, rounds)."""
    rounds = removed_repeats = removed_kcore = 0
    while True:
        rounds += 1
        n_before = int(keep.sum())
        if cfg.remove_repeats:
            removed_repeats += _drop_repeats(keep, ucode, icode)
        if cfg.k_core:
            idx = np.flatnonzero(keep)
            kc, _ = kcore_mask(ucode[idx], icode[idx], cfg.k_core)
            keep[idx[~kc]] = False
            removed_kcore += int((~kc).sum())
        if int(keep.sum()) == n_before or not cfg.remove_repeats or not cfg.k_core:
            return removed_repeats, removed_kcore, rounds


def preprocess(raw: RawInteractions, cfg: PreprocessConfig | None = None) -> Prepared:
    """Raw rows -> full per-user sequences (see module docstring for the steps and their order)."""
    cfg = cfg or PreprocessConfig()
    if len(raw) == 0:
        raise ResdomError(f"{_files(raw)}: no interactions")
    ucode, ulabels = encode_ids(raw.users)
    icode, ilabels = encode_ids(raw.items)
    times = raw.times
    steps: list[dict[str, Any]] = [_counts_step("read", ucode, icode, fmt=raw.fmt, notes=raw.notes)]
    sampled = None
    if cfg.sample_users is not None:
        picked = sample_users_mask(ulabels, ucode, cfg.sample_users, cfg.sample_seed)
        sampled = {"n": cfg.sample_users, "seed": cfg.sample_seed, "users": _distinct(ucode) - _distinct(ucode[picked]),
                   "items": _distinct(icode) - _distinct(icode[picked]), "interactions": int((~picked).sum())}
        ucode, icode = ucode[picked], icode[picked]
        times = times[picked] if times is not None else None
        steps.append({**_counts_step("sample_users", ucode, icode), "n": cfg.sample_users, "seed": cfg.sample_seed,
                      "rule": "uniform without replacement over users ordered by raw id (as text)"})

    use_times = times is not None and cfg.sort_by_time
    if cfg.ties == "item" and not use_times:
        raise ResdomError(f"{_files(raw)}: ties='item' orders interactions of equal time, but there are no "
                          "timestamps to sort by")
    tie = (TIE_RULE_ITEM if cfg.ties == "item" else TIE_RULE) if use_times else TIE_RULE_NO_TIMES
    order = order_rows(ucode, times if use_times else None, label_ranks(ilabels)[icode] if cfg.ties == "item" else None)
    ucode, icode = ucode[order], icode[order]
    times = times[order] if times is not None else None
    steps.append(_order_step(ucode, times, tie, moved=int((order != np.arange(len(order))).sum())))

    keep = np.ones(len(icode), dtype=bool)
    removed_repeats, removed_kcore, rounds = _filter(keep, ucode, icode, cfg)
    if cfg.remove_repeats:
        steps.append({"step": "remove_consecutive_repeats", "removed_interactions": removed_repeats})
    else:
        n_rep = int((~consecutive_repeat_mask(ucode, icode)).sum())
        steps.append({"step": "remove_consecutive_repeats", "applied": False, "consecutive_repeats_kept": n_rep})
    if cfg.k_core:
        steps.append({"step": "k_core", "k": cfg.k_core, "removed_interactions": removed_kcore, "passes": rounds})
    else:
        steps.append({"step": "k_core", "applied": False})
    changes = _changes(cfg, ucode, icode, keep, removed_repeats, removed_kcore, times)
    if sampled is not None:  # users left out by the sample (step 0), before everything else
        changes["sample_users"] = sampled
        changes["removed"] = {k: changes["removed"][k] + sampled[k] for k in ("users", "items", "interactions")}
    ucode, icode = ucode[keep], icode[keep]
    times = times[keep] if times is not None else None
    if len(icode) == 0:
        raise ResdomError(f"{_files(raw)}: no interactions left after preprocessing ({_describe(cfg)})")

    new_users, user_idx = np.unique(ucode, return_inverse=True)
    user_idx = user_idx.ravel().astype(np.int64)
    if cfg.remap:
        kept_items, item_ids = np.unique(icode, return_inverse=True)
        item_ids = item_ids.ravel().astype(np.int64) + 1
        item_labels = np.concatenate([np.array([None], dtype=object), ilabels[kept_items].astype(object)])
        rule = "items: increasing raw id -> 1..N" if ilabels.dtype.kind in "iu" else "items: first appearance -> 1..N"
        steps.append({"step": "remap", "rule": rule + "; users: same rule -> 0..U-1", "n_items": len(kept_items)})
    else:
        item_ids, item_labels = _raw_item_ids(raw, ilabels, icode)
        steps.append({"step": "remap", "applied": False, "n_items": len(item_labels) - 1})
    n_users = len(new_users)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(user_idx, minlength=n_users))]).astype(np.int64)
    seqs = Sequences(offsets, item_ids, times, np.arange(n_users, dtype=np.int64))
    steps.append(_counts_step("result", user_idx, item_ids))
    return Prepared(seqs, len(item_labels) - 1, ulabels[new_users], item_labels, steps, tie, changes)


def _changes(cfg: PreprocessConfig, ucode: np.ndarray, icode: np.ndarray, keep: np.ndarray,
             removed_repeats: int, removed_kcore: int, times: np.ndarray | None = None) -> dict[str, Any]:
    """What preprocessing removed (``Prepared.changes``): rows ordered, grouped by user; ``keep`` the rows kept.
    Only the k-core removes users and items (repeat removal keeps the first of each run). ``times``: the rows'
    timestamps, to count the repeats of an earlier (user, item, time) row (``same_time``, only where there are any:
    a logged event twice?)."""
    pair = ucode.astype(np.int64) * (int(icode.max(initial=0)) + 1) + icode
    ordered = np.sort(pair)
    repeat_rows = int((ordered[1:] == ordered[:-1]).sum())  # rows whose (user, item) pair came earlier
    consecutive = int((~consecutive_repeat_mask(ucode, icode)).sum())
    out: dict[str, Any] = {"repeats": {"repeat_rows": repeat_rows, "consecutive": consecutive,
                                       "removed": removed_repeats if cfg.remove_repeats else 0}}
    if times is not None and repeat_rows:
        by = np.lexsort((times, pair))
        same = int(((pair[by][1:] == pair[by][:-1]) & (times[by][1:] == times[by][:-1])).sum())
        if same:
            out["repeats"]["same_time"] = same
    removed = {"users": _distinct(ucode) - _distinct(ucode[keep]), "items": _distinct(icode) - _distinct(icode[keep]),
               "interactions": removed_kcore}
    out["k_core"] = {"k": cfg.k_core, **removed} if cfg.k_core else None
    out["removed"] = {"users": removed["users"], "items": removed["items"], "interactions": int((~keep).sum())}
    return out


def _distinct(codes: np.ndarray) -> int:
    """How many distinct values the codes (ints >= 0) hold."""
    return int((np.bincount(codes) > 0).sum()) if len(codes) else 0


def _raw_item_ids(raw: RawInteractions, ilabels: np.ndarray, icode: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep raw integer item ids (remap off): they must be >= 1; n_items = the largest."""
    if ilabels.dtype.kind not in "iu":
        raise ResdomError(f"{_files(raw)}: item ids are not integers; remapping cannot be turned off")
    ids = ilabels[icode].astype(np.int64)
    if ids.min() < 1:
        raise ResdomError(f"{_files(raw)}: item id {ids.min()} < 1; remapping cannot be turned off (0 is padding)")
    n = int(ids.max())
    labels = np.arange(n + 1, dtype=np.int64).astype(object)
    labels[0] = None
    return ids, labels


def _counts_step(name: str, users: np.ndarray, items: np.ndarray, **extra: Any) -> dict[str, Any]:
    return {"step": name, "users": int(len(np.unique(users))), "items": int(len(np.unique(items))),
            "interactions": int(len(items)), **extra}


def _order_step(users: np.ndarray, times: np.ndarray | None, rule: str, moved: int) -> dict[str, Any]:
    step: dict[str, Any] = {"step": "order", "rule": rule, "rows_moved": moved}
    if times is not None:
        same_user = users[1:] == users[:-1]
        step["equal_time_neighbours"] = int((same_user & (times[1:] == times[:-1])).sum())
    return step


def _files(raw: RawInteractions) -> str:
    return ", ".join(str(p) for p in raw.files) or raw.fmt


def _describe(cfg: PreprocessConfig) -> str:
    """Why nothing is left, in the caller's words (``--k-core 100`` in the CLI, ``k_core=100`` from Python): only the
    k-core removes every row (repeat removal keeps the first of each run, a user sample at least one user)."""
    if cfg.k_core:
        repeats = "repeats removed, " if cfg.remove_repeats else ""
        return (f"{arg('k_core', cfg.k_core)}: no set of users and items has {cfg.k_core} interactions each, "
                f"{repeats}so the k-core removed them all; a lower k keeps some")
    return ", ".join(f"{k}={v}" for k, v in cfg.model_dump().items())
