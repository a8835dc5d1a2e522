"""Seeded synthetic user sequences with planted, known structure (the embedded default data set).

What is planted (``planted_structure(cfg)`` returns it, so diagnostics can be checked against the truth):

- ``succ_last``: a fixed first-order transition, a random single cycle over items 1..n_items (so it has no
  fixed point: the successor of an item is never the item itself);
- ``succ_skip2``: a second, different fixed mapping, also a single cycle, with
  ``succ_skip2[i] != succ_last[i]`` for every item (so the two signals are distinguishable);
- ``item_cluster``: items split into ``n_clusters`` random clusters of (near) equal size;
  ``user_cluster``: each user's long-term preferred cluster;
- ``ring``: all items in a random circular order (``ring_pos[i]``: item i's place on it), the hidden
  "similarity" of items: items within ``near_radius`` places of each other are neighbours.

Each next item x_t of a user is drawn, independently per position, as
- with probability ``p_last``:   ``succ_last[x_{t-1}]``   (follows from the last item),
- with probability ``p_skip2``:  ``succ_skip2[x_{t-2}]``  (follows from the item two steps back),
- with probability ``p_user``:   uniform over the user's preferred cluster (long-term preference),
- with probability ``p_repeat``: ``x_{t-1}`` itself (a consecutive repeat; 0 by default),
- with probability ``p_near``:   uniform over the ``2 * near_radius`` ring neighbours of ``x_{t-1}`` (an item
  similar to the last one, never the last one itself; 0 by default),
- otherwise (``1 - sum``):       uniform over all items (noise).
At positions without the needed history (t = 0 for ``p_last`` / ``p_repeat`` / ``p_near``, t < 2 for
``p_skip2``) that probability mass goes to the user preference instead. Lengths are uniform in
[min_len, max_len]; times are strictly increasing per user (start uniform over ``span_days`` from
``start_time``, gaps 1 s + exponential with mean ``mean_gap_hours``), so both LOO and GTS apply.
Generation is vectorised over users (< 1 s).

With the defaults a model that has learnt the first-order transition alone reaches HR@1 of about ``p_last``
plus the noise share it gets right by chance; the skip-2 signal is visible to a model that reads position L-2.
The successor of the last item is never the last item, so a trained model ranks the last item low (HRLI@1
near 0): the defaults plant a permutation, not the similarity structure of real data.

``PRESETS["demo"]`` (source ``synthetic:demo``, what ``resdom demo`` trains on) plants that similarity
structure instead: the next item is mostly a ring neighbour of the last one (``p_near``), as consecutive
purchases on Amazon are mostly related items. The best prediction from the last item is then a small
neighbourhood around it, and with tied input/output embeddings neighbours get similar embeddings, so the last
item's own embedding, carried to the output by the residual connection, scores highest: a trained SASRec ranks
the last input item first for most users (unfiltered), as on sparse real data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from hashlib import sha256

import numpy as np
from pydantic import ConfigDict, Field, ValidationError, model_validator

from resdom.checks import NumbersModel
from resdom.data.sequences import Sequences
from resdom.errors import ResdomError
from resdom.limits import SYNTHETIC_INTERACTIONS, SYNTHETIC_ITEMS, SYNTHETIC_USERS


class SyntheticConfig(NumbersModel):
    """Knobs of the generator (see the module docstring for what each one plants)."""

    model_config = ConfigDict(extra="forbid")

    n_users: int = Field(3000, ge=1)
    n_items: int = Field(500, ge=4)
    min_len: int = Field(10, ge=1)
    max_len: int = Field(40, ge=1)
    p_last: float = Field(0.6, ge=0.0, le=1.0)
    p_skip2: float = Field(0.1, ge=0.0, le=1.0)
    p_user: float = Field(0.2, ge=0.0, le=1.0)
    p_repeat: float = Field(0.0, ge=0.0, le=1.0)
    p_near: float = Field(0.0, ge=0.0, le=1.0)
    near_radius: int = Field(2, ge=1)
    n_clusters: int = Field(20, ge=1)
    seed: int = 0
    start_time: int = 1_500_000_000
    span_days: float = Field(730.0, gt=0)
    mean_gap_hours: float = Field(48.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> SyntheticConfig:
        total = self.p_last + self.p_skip2 + self.p_user + self.p_repeat + self.p_near
        if total > 1.0 + 1e-9:
            raise ValueError(f"p_last + p_skip2 + p_user + p_repeat + p_near = {total:g} > 1")
        if 2 * self.near_radius >= self.n_items:
            raise ValueError(f"near_radius {self.near_radius}: needs 2 * near_radius < n_items ({self.n_items})")
        if self.min_len > self.max_len:
            raise ValueError(f"min_len {self.min_len} > max_len {self.max_len}")
        if self.n_clusters > self.n_items:
            raise ValueError(f"n_clusters {self.n_clusters} > n_items {self.n_items}")
        for value, limit in ((self.n_users, SYNTHETIC_USERS), (self.n_items, SYNTHETIC_ITEMS),
                             (self.n_users * self.max_len, SYNTHETIC_INTERACTIONS)):
            if value > limit.value:  # generated in memory: 10^7 users would take gigabytes
                raise ValueError(f"{value:,} {limit.what.split(' of ')[0]}, more than {limit.value:,} ({limit.env} "
                                 "raises the limit)")
        return self

    @property
    def p_noise(self) -> float:
        return max(0.0, 1.0 - self.p_last - self.p_skip2 - self.p_user - self.p_repeat - self.p_near)

    def sha256(self) -> str:
        """Content hash of the configuration (the synthetic source's 'file hash' in manifests)."""
        return sha256(json.dumps(self.model_dump(), sort_keys=True).encode()).hexdigest()


# Named settings: ``synthetic:<name>`` (knobs may follow: ``synthetic:demo,n_users=1000``).
PRESETS: dict[str, dict[str, float | int]] = {
    # the similarity structure of real purchase sequences (module docstring): 70% a ring neighbour of the last
    # item (4 candidates), 20% the user's long-term cluster, 10% noise
    "demo": {"p_last": 0.0, "p_skip2": 0.0, "p_near": 0.7, "near_radius": 2, "p_user": 0.2},
}


@dataclass
class PlantedStructure:
    """The truth behind ``generate(cfg)``. Arrays indexed by item id (entry 0, padding, is 0).

    succ_last: int64 (n_items + 1,); succ_skip2: int64 (n_items + 1,); item_cluster: int64 (n_items + 1,);
    user_cluster: int64 (n_users,); ring: int64 (n_items,), the item ids in ring order; ring_pos: int64
    (n_items + 1,), each item's index in ``ring``.
    """

    succ_last: np.ndarray
    succ_skip2: np.ndarray
    item_cluster: np.ndarray
    user_cluster: np.ndarray
    ring: np.ndarray
    ring_pos: np.ndarray

    def near(self, item: int, radius: int) -> list[int]:
        """The ``2 * radius`` ring neighbours of ``item`` (offsets -radius..-1, 1..radius)."""
        n, p = len(self.ring), int(self.ring_pos[item])
        return [int(self.ring[(p + k) % n]) for k in range(-radius, radius + 1) if k != 0]


def _random_cycle(rng: np.random.Generator, n: int) -> np.ndarray:
    """int64 (n + 1,): a single n-cycle over 1..n (no fixed points); entry 0 stays 0."""
    perm = rng.permutation(n) + 1
    succ = np.zeros(n + 1, dtype=np.int64)
    succ[perm] = np.roll(perm, -1)
    return succ


def planted_structure(cfg: SyntheticConfig) -> PlantedStructure:
    """The mappings and clusters planted by ``generate(cfg)`` (same seed, same structure)."""
    rng = np.random.default_rng([cfg.seed, 0])
    succ_last = _random_cycle(rng, cfg.n_items)
    for _ in range(1000):  # redraw until the skip-2 mapping differs from succ_last everywhere
        succ_skip2 = _random_cycle(rng, cfg.n_items)
        if not np.any(succ_skip2[1:] == succ_last[1:]):
            break
    else:  # pragma: no cover - probability ~ e^-1000
        raise RuntimeError("could not draw a skip-2 mapping distinct from the last-item mapping")
    item_cluster = np.zeros(cfg.n_items + 1, dtype=np.int64)
    item_cluster[rng.permutation(cfg.n_items) + 1] = np.arange(cfg.n_items) % cfg.n_clusters
    user_cluster = rng.integers(0, cfg.n_clusters, size=cfg.n_users)
    ring = np.random.default_rng([cfg.seed, 2]).permutation(cfg.n_items).astype(np.int64) + 1
    ring_pos = np.zeros(cfg.n_items + 1, dtype=np.int64)
    ring_pos[ring] = np.arange(cfg.n_items)
    return PlantedStructure(succ_last, succ_skip2, item_cluster, user_cluster.astype(np.int64), ring, ring_pos)


def generate(cfg: SyntheticConfig | None = None) -> Sequences:
    """Sequences of ``cfg.n_users`` users (users 0..n-1), items 1..n_items, strictly increasing times."""
    cfg = cfg or SyntheticConfig()
    truth = planted_structure(cfg)
    rng = np.random.default_rng([cfg.seed, 1])
    n, width = cfg.n_users, cfg.max_len
    lengths = rng.integers(cfg.min_len, cfg.max_len + 1, size=n)
    # members[c] = item ids of cluster c; draw a uniform member of a user's cluster by index
    order = np.argsort(truth.item_cluster[1:], kind="stable") + 1
    sizes = np.bincount(truth.item_cluster[1:], minlength=cfg.n_clusters)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    ucl = truth.user_cluster

    def preferred() -> np.ndarray:
        return order[first[ucl] + (rng.random(n) * sizes[ucl]).astype(np.int64)]

    x = np.zeros((n, width), dtype=np.int64)
    edges = np.cumsum([cfg.p_last, cfg.p_skip2, cfg.p_user, cfg.p_repeat, cfg.p_near])
    # the ring-neighbour offsets come from their own stream, so p_near = 0 leaves every other draw as it was
    near_rng = np.random.default_rng([cfg.seed, 3])
    for t in range(width):
        r = rng.random(n)
        pref = preferred()
        noise = rng.integers(1, cfg.n_items + 1, size=n)
        offset = near_rng.integers(1, cfg.near_radius + 1, size=n) * np.where(near_rng.random(n) < 0.5, -1, 1)
        choice = np.searchsorted(edges, r, side="right")  # 0 last, 1 skip2, 2 user, 3 repeat, 4 near, 5 noise
        if t < 1:
            choice[(choice == 0) | (choice == 3) | (choice == 4)] = 2
        if t < 2:
            choice[choice == 1] = 2
        nxt = np.where(choice == 5, noise, pref)
        if t >= 1:
            nxt = np.where(choice == 0, truth.succ_last[x[:, t - 1]], nxt)
            nxt = np.where(choice == 3, x[:, t - 1], nxt)
            near = truth.ring[(truth.ring_pos[x[:, t - 1]] + offset) % cfg.n_items]
            nxt = np.where(choice == 4, near, nxt)
        if t >= 2:
            nxt = np.where(choice == 1, truth.succ_skip2[x[:, t - 2]], nxt)
        x[:, t] = nxt
    gaps = 1 + rng.exponential(cfg.mean_gap_hours * 3600.0, size=(n, width)).astype(np.int64)
    start = cfg.start_time + (rng.random(n) * cfg.span_days * 86400).astype(np.int64)
    times = start[:, None] + np.cumsum(gaps, axis=1) - gaps[:, :1]
    mask = np.arange(width)[None, :] < lengths[:, None]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return Sequences(offsets, x[mask], times[mask], np.arange(n, dtype=np.int64))


def parse_synthetic_source(source: str) -> SyntheticConfig:
    """``"synthetic"`` -> defaults; ``"synthetic:p_last=0.3,n_users=2000,seed=3"`` -> those knobs overridden;
    ``"synthetic:demo"`` -> the preset ``PRESETS["demo"]`` (knobs after it override it: ``synthetic:demo,seed=2``).

    An unknown knob or preset or a bad value is a ResdomError naming it.
    """
    name, _, spec = source.partition(":")
    if name != "synthetic":
        raise ResdomError(f"not a synthetic source: {source!r}")
    values: dict[str, object] = {}
    given: set[str] = set()  # the knobs written out (a preset's values may be overridden, a knob only once)
    for i, part in enumerate(filter(None, (p.strip() for p in spec.split(",")))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq and i == 0 and part in PRESETS:
            values.update(PRESETS[part])
            continue
        if not eq or not key:
            raise ResdomError(f"{source!r}: expected knob=value (or a preset first: {', '.join(PRESETS)}), "
                              f"got {part!r}")
        if key not in SyntheticConfig.model_fields:
            raise ResdomError(
                f"{source!r}: unknown synthetic knob {key!r}; knobs: {', '.join(SyntheticConfig.model_fields)}"
            )
        if key in given:  # "n_users=40,...,n_users=50": the last one won in silence
            raise ResdomError(f"{source!r}: knob {key!r} given twice")
        given.add(key)
        values[key] = value.strip()
    try:
        return SyntheticConfig(**values)  # type: ignore[arg-type]  # pydantic coerces the strings
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "config"
        raise ResdomError(f"{source!r}: {where}: {err['msg'].removeprefix('Value error, ')}") from None
