"""The one internal form of user sequences, and of a prepared, split data set.

Sequences are stored in CSR form: ``items[offsets[u]:offsets[u+1]]`` are user ``u``'s item ids, oldest
first, ids in 1..n_items (0 is padding and never stored). Timestamps, when the source has them, are
aligned with ``items``. A split data set (``SplitData``) is what models, training, evaluation and
diagnostics consume; it saves to a directory as ``arrays.npz`` (no pickles) plus ``manifest.json``.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from resdom.bounded import load_json, load_npz, refuse_special
from resdom.checks import path_argument
from resdom.errors import ResdomError
from resdom.io import atomic_write_files
from resdom.limits import short
from resdom.names import PROTOCOLS
from resdom.rundir import RunDir, first_names, own_entries, require_folder_path


@dataclass(init=False)  # the __init__ below: ``users`` may be left out (None) but is always set
class Sequences:
    """Variable-length integer sequences in CSR form.

    offsets: int64 (n + 1,), non-decreasing, offsets[0] == 0.
    items:   int64 (offsets[-1],), item ids >= 1.
    times:   (offsets[-1],) Unix seconds, int64 (whole seconds) or float64 (fractions kept), or None.
    users:   int64 (n,) user index of each sequence (into the data set's user list); None when built: 0..n-1.
    """

    offsets: np.ndarray
    items: np.ndarray
    times: np.ndarray | None
    users: np.ndarray

    def __init__(self, offsets: np.ndarray, items: np.ndarray, times: np.ndarray | None = None,
                 users: np.ndarray | None = None) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.items = np.asarray(items, dtype=np.int64)
        self.times = as_times(times) if times is not None else None
        if users is None:
            self.users = np.arange(len(self.offsets) - 1, dtype=np.int64)
        else:
            self.users = np.asarray(users, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __repr__(self) -> str:
        return (f"Sequences({len(self):,} sequences, {len(self.items):,} interactions"
                f"{', with times' if self.times is not None else ''})")

    @property
    def lengths(self) -> np.ndarray:
        """int64 (n,): number of items per sequence."""
        return np.diff(self.offsets)

    def sequence(self, i: int) -> np.ndarray:
        return self.items[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_lists(cls, seqs: list[list[int]], users: np.ndarray | None = None) -> Sequences:
        """Build from Python lists (tests and small examples)."""
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        items = np.array([x for s in seqs for x in s], dtype=np.int64)
        return cls(offsets, items, None, users)

    def to_lists(self) -> list[list[int]]:
        return [self.sequence(i).tolist() for i in range(len(self))]

    def take(self, index: np.ndarray) -> Sequences:
        """The sequences at ``index`` (int array), in that order."""
        index = np.asarray(index, dtype=np.int64)
        starts, ends = self.offsets[index], self.offsets[index + 1]
        lengths = ends - starts
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = ranges(starts, lengths)
        times = self.times[flat] if self.times is not None else None
        return Sequences(offsets, self.items[flat], times, self.users[index])

    def padded(self, max_len: int, index: np.ndarray | None = None) -> np.ndarray:
        """int64 (n, L) left-padded matrix of the last ``min(len, max_len)`` items, last item at column L-1.

        L = min(max_len, longest selected sequence) (at least 1): batches are trimmed to their longest
        real sequence. ``index`` selects sequences (default all).
        """
        if index is None:
            index = np.arange(len(self), dtype=np.int64)
        ends = self.offsets[index + 1]
        lengths = np.minimum(ends - self.offsets[index], max_len)
        width = max(1, int(lengths.max(initial=0)))
        cols = np.arange(width) - width  # -width .. -1
        pos = ends[:, None] + cols[None, :]
        valid = cols[None, :] >= -lengths[:, None]
        out = np.zeros((len(index), width), dtype=np.int64)
        out[valid] = self.items[pos[valid]]
        return out


def as_times(times: np.ndarray) -> np.ndarray:
    """Timestamps as int64 (integer input) or float64 (fractional seconds kept, never floored)."""
    times = np.asarray(times)
    return times.astype(np.float64) if times.dtype.kind == "f" else times.astype(np.int64)


def item_counts(seqs: Sequences, n_items: int) -> np.ndarray:
    """int64 (n_items + 1,): how often each item id occurs in ``seqs`` (id 0, padding, never)."""
    return np.bincount(seqs.items, minlength=n_items + 1).astype(np.int64)


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each (s, l), vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(starts - offs, lengths) + np.arange(total, dtype=np.int64)


@dataclass
class EvalSet:
    """Evaluation examples: input sequence ``inputs[i]`` and the single target item ``targets[i]``."""

    inputs: Sequences
    targets: np.ndarray

    def __post_init__(self) -> None:
        self.targets = np.asarray(self.targets, dtype=np.int64)
        if len(self.targets) != len(self.inputs):
            raise ValueError("EvalSet: one target per input sequence")

    def __len__(self) -> int:
        return len(self.targets)

    def __repr__(self) -> str:
        return f"EvalSet({len(self):,} users, {len(self.inputs.items):,} input items)"

    def subset(self, n_users: int, seed: int) -> EvalSet:
        """The same ``n_users`` examples (all when fewer) for every call with ``seed``, in their order here."""
        if len(self) <= n_users:
            return self
        index = np.sort(np.random.default_rng(seed).choice(len(self), size=n_users, replace=False))
        return EvalSet(self.inputs.take(index), self.targets[index])


@dataclass
class SplitData:
    """A prepared, split data set: training sequences, validation and test examples, and its manifest.

    ``n_items`` is the number of real items (ids 1..n_items). ``manifest`` is plain JSON data
    (protocol, thresholds, counts, preprocessing, source hashes).
    ``user_labels`` (U,): the external (raw) id of each user index (``Sequences.users`` index it);
    ``item_labels`` (n_items + 1,) object: the external id of each item id (entry 0, padding, is None). Labels are
    integers where the source's ids are canonical integers (``user_labels`` then int64), else the exact strings;
    None for a split saved before resdom kept them. ``rest``: the full sequences of the users whose interactions
    the parts do not all hold (users the split dropped, e.g. fewer than 3 items under LOO), so every user's whole
    history is known (``history``); None: there are none, or the split predates it. ``folder``: the folder ``load``
    read it from (None: made in memory), where a writer (``fit``, ``Fitted.save``) may not write its output.
    """

    train: Sequences
    valid: EvalSet
    test: EvalSet
    n_items: int
    manifest: dict[str, Any] = field(default_factory=dict)
    user_labels: np.ndarray | None = None
    item_labels: np.ndarray | None = None
    rest: Sequences | None = None
    folder: Path | None = field(default=None, compare=False, repr=False)

    def __repr__(self) -> str:
        source = (self.manifest.get("source") or {}).get("name") if isinstance(self.manifest, dict) else None
        protocol = self.manifest.get("protocol") if isinstance(self.manifest, dict) else None
        return (f"SplitData({protocol or '?'} split{f' of {source!r}' if source else ''}: {self.n_items:,} items, "
                f"train {len(self.train):,} sequences / {len(self.train.items):,} interactions, valid "
                f"{len(self.valid):,} users, test {len(self.test):,} users)")

    def history(self) -> Sequences:
        """Each user's longest known sequence (oldest first): every part is a prefix of the user's full sequence
        (train, valid input + target, test input + target, ``rest``), so the longest is all that is known. One
        sequence per user present anywhere, in increasing user index (``users``)."""
        parts = [self.train, with_targets(self.valid), with_targets(self.test)]
        if self.rest is not None:
            parts.append(self.rest)
        pool = concat(parts)
        order = np.lexsort((-pool.lengths, pool.users))
        first = np.ones(len(order), dtype=bool)
        first[1:] = pool.users[order][1:] != pool.users[order][:-1]
        return pool.take(order[first])

    @property
    def counts(self) -> dict[str, Any]:
        """The numbers of the ``data:`` lines the CLI prints (and ``prepare_split`` logs), as a dict: ``read`` (users,
        items, interactions as read), ``removed`` (by preprocessing in all), ``k_core`` (what it removed; None: off),
        ``repeats``, ``protocol`` (where the default, auto, chose it), ``split`` (users and interactions in no part,
        with the reasons), then ``train``, ``valid``, ``test`` (users, items, interactions of each part; targets and
        cold targets of valid and test). From the manifest's ``changes`` and ``counts``; {} for a split saved
        without them."""
        manifest = self.manifest if isinstance(self.manifest, dict) else {}
        changes, parts = manifest.get("changes"), manifest.get("counts")
        changes = changes if isinstance(changes, dict) else {}
        parts = parts if isinstance(parts, dict) else {}
        keys = ("read", "removed", "k_core", "repeats", "protocol", "split")
        return {**{k: changes[k] for k in keys if k in changes}, **parts}

    @property
    def filter_seen(self) -> bool:
        """Whether evaluation removes each user's input items from the ranking (spec §3): the manifest's
        ``evaluation.filter_seen``, True where absent (every split made before the setting existed)."""
        evaluation = self.manifest.get("evaluation")
        return not (isinstance(evaluation, dict) and evaluation.get("filter_seen") is False)

    def save(self, directory: str | Path) -> None:
        """Write ``arrays.npz`` and ``manifest.json`` into ``directory`` (atomically, both written before either
        replaces an earlier split's file). A ResdomError naming ``directory`` where it is no folder (a file, a
        device: a FileExistsError), lies in a results-store cell, or holds files other than a split's (a run
        directory, a folder of other files: the split's files were added among them)."""
        directory = path_argument(directory, "directory")
        if require_folder_path(directory, "directory"):
            others = [n for n in own_entries(directory) if n not in (self.ARRAYS, self.MANIFEST)]
            if others:
                raise ResdomError(f"directory {directory}: exists, is not empty and is not a split folder (it holds "
                                  f"{first_names(others)}); choose another directory or an empty folder")
        directory.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {"n_items": np.array(self.n_items)}
        for name, seqs in (("train", self.train), ("valid", self.valid.inputs), ("test", self.test.inputs)):
            arrays[f"{name}_offsets"] = seqs.offsets
            arrays[f"{name}_items"] = seqs.items
            arrays[f"{name}_users"] = seqs.users
            if seqs.times is not None:
                arrays[f"{name}_times"] = seqs.times
        arrays["valid_targets"] = self.valid.targets
        arrays["test_targets"] = self.test.targets
        if self.rest is not None:
            arrays.update({"rest_offsets": self.rest.offsets, "rest_items": self.rest.items,
                           "rest_users": self.rest.users})
            if self.rest.times is not None:
                arrays["rest_times"] = self.rest.times
        if self.user_labels is not None:
            arrays.update(_label_arrays("user_labels", self.user_labels))
        if self.item_labels is not None:
            arrays.update(_label_arrays("item_labels", self.item_labels[1:]))
        import io

        buf = io.BytesIO()
        # numpy's stub: mypy matches the **arrays dict against the keyword allow_pickle (a bool) too
        np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
        atomic_write_files({directory / self.ARRAYS: buf.getvalue(),
                            directory / self.MANIFEST: json.dumps(self.manifest, indent=2, sort_keys=True).encode()})

    ARRAYS, MANIFEST = "arrays.npz", "manifest.json"  # the layout of a split directory

    @classmethod
    def exists(cls, directory: str | Path) -> bool:
        """Whether ``directory`` holds a saved split (``save``'s two files). A folder it may not look into is an
        OSError naming the folder (a file in one was named as ``FILE/arrays.npz``, as if it were a split)."""
        directory = Path(directory)
        if not directory.is_dir():
            return False
        try:
            return (directory / cls.ARRAYS).is_file() and (directory / cls.MANIFEST).is_file()
        except PermissionError as e:
            raise PermissionError(e.errno, e.strerror, str(directory)) from None

    @classmethod
    def load(cls, directory: str | Path) -> SplitData:
        directory = Path(directory)
        path = directory / cls.ARRAYS
        if not path.exists():
            inner = directory / "data"
            hint = f"; a run directory: its split is {inner}" if cls.exists(inner) else ""
            raise ResdomError(f"{path}: no prepared split here (expected arrays.npz and manifest.json){hint}")
        redo = ("prepare it again (`resdom data split`; in a run directory, rerun the `resdom train` that made it, "
                "which writes data/ again from the same data and keeps the training)")
        try:  # bounded: a 3 MB file that would unpack to 3 GiB is refused before it is unpacked
            a = load_npz(path)
        except ResdomError as e:
            detail = str(e).removeprefix(str(path)).lstrip(":").strip()
            raise ResdomError(f"{path}: not a readable prepared split ({detail}); {redo}") from None
        try:
            def seqs(name: str) -> Sequences:
                out = Sequences(a[f"{name}_offsets"], a[f"{name}_items"], a.get(f"{name}_times"),
                                a[f"{name}_users"])
                _check_csr(out, int(a["n_items"]), name)
                return out

            split = cls(
                train=seqs("train"),
                valid=EvalSet(seqs("valid"), a["valid_targets"]),
                test=EvalSet(seqs("test"), a["test_targets"]),
                n_items=int(a["n_items"]),
            )
            for name, ev in (("valid", split.valid), ("test", split.test)):
                if len(ev) and (ev.targets.min() < 1 or ev.targets.max() > split.n_items):
                    raise ValueError(f"{name} targets outside 1..{split.n_items}")
            split.rest = seqs("rest") if "rest_offsets" in a else None
            split.user_labels = _labels_from(a, "user_labels")
            items = _labels_from(a, "item_labels")
            if items is not None:
                if len(items) != split.n_items:
                    raise ValueError(f"{len(items)} item labels for {split.n_items} items")
                split.item_labels = np.concatenate([np.array([None], dtype=object), items.astype(object)])
            parts = (split.train, split.valid.inputs, split.test.inputs,
                     *([split.rest] if split.rest is not None else []))  # rest's users are labelled too
            n_users = max((int(p.users.max(initial=-1)) for p in parts), default=-1) + 1
            if split.user_labels is not None and len(split.user_labels) < n_users:
                raise ValueError(f"{len(split.user_labels)} user labels for user indices up to {n_users - 1}")
        except (OSError, EOFError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile, zlib.error) as e:
            detail = f"no array {e}" if isinstance(e, KeyError) else short(str(e) or type(e).__name__)
            raise ResdomError(f"{path}: not a readable prepared split, the file is truncated or corrupt ({detail}); "
                              f"{redo}") from None
        manifest_path = directory / cls.MANIFEST
        refuse_special(manifest_path)
        try:
            split.manifest = load_json(manifest_path.read_bytes(), str(manifest_path), redo)
        except OSError as e:
            raise ResdomError(f"{manifest_path}: cannot read it ({e.strerror}); {redo}") from None
        if not isinstance(split.manifest, dict):
            raise ResdomError(f"{manifest_path}: expected a JSON object; {redo}")
        _check_manifest(split, manifest_path, redo)
        split.folder = directory
        return split


def _check_manifest(split: SplitData, path: Path, redo: str) -> None:
    """ResdomError naming ``path`` and the field where the manifest describes another split than the arrays hold (a
    hand-edited manifest, or one from another folder): the protocol (and the structure it implies), ``n_items``, the
    per-part ``counts`` the CLI prints, ``evaluation.filter_seen``. Fields a manifest lacks are not checked."""
    m = split.manifest

    def refuse(field: str, what: str) -> None:
        raise ResdomError(f"{path}: {field} {what}; {redo}")

    if "protocol" in m and m["protocol"] not in PROTOCOLS:
        refuse("protocol", f"is {short(m['protocol'])}, none of {', '.join(PROTOCOLS)}")
    if "n_items" in m and (isinstance(m["n_items"], bool) or m["n_items"] != split.n_items):
        refuse("n_items", f"is {short(m['n_items'])} but arrays.npz holds {split.n_items} items")
    evaluation = m.get("evaluation")
    if "evaluation" in m and not (isinstance(evaluation, dict) and isinstance(evaluation.get("filter_seen", True),
                                                                              bool)):
        refuse("evaluation.filter_seen", "is not true or false")
    if "counts" in m:
        counts, held = m["counts"], split_counts(split.train, split.valid, split.test)
        if not isinstance(counts, dict):
            refuse("counts", "is not an object")
        for part, numbers in held.items():
            saved = counts.get(part, {})
            if not isinstance(saved, dict):
                refuse(f"counts.{part}", "is not an object")
            for key, value in numbers.items():
                if key in saved and (isinstance(saved[key], bool) or saved[key] != value):
                    refuse(f"counts.{part}.{key}", f"is {short(saved[key])} but arrays.npz holds {value}")
    problem = _protocol_mismatch(split, m.get("protocol"))
    if problem:
        refuse("protocol", f"is {m['protocol']} but {problem}")


def _protocol_mismatch(split: SplitData, protocol: Any) -> str | None:
    """What in the arrays contradicts ``protocol`` (a sentence), or None: loo holds the same users in every part,
    valid input = training sequence, test input = valid input + target (``splits.split_loo``); none holds no test
    users; gts has its thresholds, training at or before T_val (``splits.split_gts``)."""
    train, valid, test = split.train, split.valid, split.test
    if protocol == "none" and len(test):
        return f"arrays.npz holds {len(test)} test users (a none split holds out none)"
    if protocol == "loo":
        joined = with_targets(valid)
        pairs = ((train.users, valid.inputs.users), (valid.inputs.users, test.inputs.users),
                 (train.offsets, valid.inputs.offsets), (train.items, valid.inputs.items),
                 (joined.offsets, test.inputs.offsets), (joined.items, test.inputs.items))
        if not all(np.array_equal(a, b) for a, b in pairs):
            return "arrays.npz does not hold a leave-one-out split (one user set, test input = valid input + target)"
    if protocol == "gts":
        thresholds = split.manifest.get("thresholds")
        t_val, t_test = ((thresholds.get(k) if isinstance(thresholds, dict) else None) for k in ("T_val", "T_test"))
        if not (isinstance(t_val, (int, float)) and isinstance(t_test, (int, float))
                and not isinstance(t_val, bool) and not isinstance(t_test, bool)):
            return "its thresholds (T_val, T_test) are missing or not numbers"
        if t_val > t_test:
            return f"its T_val {t_val} is after its T_test {t_test}"
        if train.times is not None and len(train.times) and float(train.times.max()) > t_val:
            return f"arrays.npz trains on interactions after T_val {t_val} (a gts split trains at or before it)"
    return None


def _label_arrays(name: str, labels: np.ndarray) -> dict[str, np.ndarray]:
    """npz arrays (no pickles) holding ``labels`` exactly: ``<name>_int`` (int64) where every label is an integer,
    else ``<name>_utf8`` (the UTF-8 bytes of every label, concatenated) and ``<name>_offsets`` (int64 (n + 1,))."""
    labels = np.asarray(labels)
    if labels.dtype.kind in "iu" or (labels.dtype == object and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in labels)):
        return {f"{name}_int": labels.astype(np.int64)}
    encoded = [str(x).encode("utf-8") for x in labels]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in encoded])]).astype(np.int64)
    return {f"{name}_utf8": np.frombuffer(b"".join(encoded), dtype=np.uint8), f"{name}_offsets": offsets}


def _labels_from(a: dict[str, np.ndarray], name: str) -> np.ndarray | None:
    """The labels ``_label_arrays`` wrote (int64, or an object array of str), or None where absent."""
    if f"{name}_int" in a:
        return a[f"{name}_int"].astype(np.int64)
    if f"{name}_utf8" not in a:
        return None
    data, offsets = a[f"{name}_utf8"].tobytes(), a[f"{name}_offsets"]
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(data) or bool((np.diff(offsets) < 0).any()):
        raise ValueError(f"inconsistent {name}")
    return np.array([data[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(len(offsets) - 1)],
                    dtype=object)


def seq_counts(seqs: Sequences) -> dict[str, int]:
    """Users (non-empty sequences), distinct items and interactions of ``seqs``."""
    return {
        "users": int((seqs.lengths > 0).sum()),
        "items": int(len(np.unique(seqs.items))),
        "interactions": int(len(seqs.items)),
    }


def split_counts(train: Sequences, valid: EvalSet, test: EvalSet) -> dict[str, dict[str, int]]:
    """Counts of users / items / interactions per part (a manifest's ``counts``); eval parts also count targets and
    cold targets (target items never seen in training)."""
    train_items = np.unique(train.items)
    out = {"train": seq_counts(train)}
    for name, ev in (("valid", valid), ("test", test)):
        c = seq_counts(ev.inputs)
        c["users"] = len(ev)
        c["items"] = int(len(np.unique(np.concatenate([ev.inputs.items, ev.targets]))))
        c["targets"] = len(ev)
        c["cold_targets"] = int((~np.isin(ev.targets, train_items)).sum())
        out[name] = c
    return out


def with_targets(ev: EvalSet) -> Sequences:
    """Each example's input followed by its target: (n,) sequences of length input + 1, same ``users``."""
    seqs = ev.inputs
    lengths = seqs.lengths + 1
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    items = np.zeros(int(offsets[-1]), dtype=np.int64)
    own = ranges(offsets[:-1], seqs.lengths)
    items[own] = seqs.items
    items[offsets[1:] - 1] = ev.targets
    return Sequences(offsets, items, None, seqs.users)


def concat(parts: list[Sequences]) -> Sequences:
    """The sequences of ``parts`` one after another (times dropped)."""
    lengths = np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    items = np.concatenate([p.items for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    users = np.concatenate([p.users for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    return Sequences(offsets, items, None, users)


def _check_csr(seqs: Sequences, n_items: int, name: str) -> None:
    """ValueError where loaded arrays cannot be sequences of items 1..n_items (a damaged file)."""
    for part, array in (("offsets", seqs.offsets), ("items", seqs.items), ("users", seqs.users)):
        if np.ndim(array) != 1 or np.asarray(array).dtype.kind not in "iu":
            raise ValueError(f"{name}_{part} is not a vector of whole numbers")
    o = seqs.offsets
    if (len(o) == 0 or o[0] != 0 or o[-1] != len(seqs.items) or len(seqs.users) != len(o) - 1
            or bool((np.diff(o) < 0).any())):
        raise ValueError(f"inconsistent {name} offsets")
    if len(seqs.items) and (seqs.items.min() < 1 or seqs.items.max() > n_items):
        raise ValueError(f"{name} item ids outside 1..{n_items}")
    if len(seqs.users) and seqs.users.min() < 0:  # -1 would label the row with the last user's id
        raise ValueError(f"{name}_users holds a negative user index ({int(seqs.users.min())})")
    if seqs.times is not None and len(seqs.times) != len(seqs.items):
        raise ValueError(f"{name} times do not match its items")


def check_split_folder(path: str | Path, option: str = "--out") -> dict | None:
    """Refuse ``path`` as the folder of ``resdom data split``, with one line naming ``option``, unless it is absent,
    empty or holds a saved split and nothing else; return that split's manifest (``{}`` where it cannot be read),
    else None. A run directory, and a run's ``data/`` (the split its checkpoint was trained on), are refused."""
    path = Path(path)
    if not require_folder_path(path, option):
        return None
    entries = own_entries(path)  # without resdom's marker and a writer's temporaries
    if not entries:
        return None
    if RunDir(path).is_run():
        raise ResdomError(f"{option} {path}: is a run directory, not a split folder; choose another {option}")
    if path.resolve().name == RunDir(".").data.name and RunDir(path.resolve().parent).is_run():
        raise ResdomError(f"{option} {path}: is the split of the run directory {path.parent} (its checkpoint was "
                          f"trained on it); choose another {option}")
    layout = {SplitData.ARRAYS, SplitData.MANIFEST}
    if not set(entries) <= layout:
        others = [n for n in entries if n not in layout]
        raise ResdomError(f"{option} {path}: exists, is not empty and is not a split folder (it holds "
                          f"{first_names(others)}); choose another {option} "
                          "or an empty folder")
    try:
        manifest = json.loads((path / SplitData.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}
