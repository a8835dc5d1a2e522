"""Does last-item reliance keep rising after accuracy stops? (docs/results.md, "Beyond the paper", question 4)

A pure function of the stored training curves (``curve.jsonl``: one row an epoch with the validation metrics,
and every ``monitor_every`` epochs a ``monitor`` row with HRLI@1 on a fixed validation subsample). On the
monitored epochs of one cell:

    plateau(x) = the first monitored epoch e with x_e >= x_first + share * (max_e' x_e' - x_first)

(``share`` = 0.95: the epoch by which a series has made 95% of its whole rise; a series that never rises
plateaus at its first epoch). The cell's lag is ``plateau(HRLI@1) - plateau(validation NDCG@10)`` in epochs, and
its reliance gain after accuracy stops is ``max HRLI@1 over the epochs from the NDCG@10 plateau on - HRLI@1 at
the NDCG@10 plateau`` (0 where reliance only falls after it); its change after accuracy stops is ``HRLI@1 at the
last monitored epoch - HRLI@1 at the NDCG@10 plateau`` (signed; unlike the gain, not lifted by the noise of the
largest of several values). Both series are read at the same (monitored) epochs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SHARE = 0.95


def plateau_epoch(epochs: Sequence[int], values: Sequence[float], share: float = SHARE) -> int:
    """The first epoch by which ``values`` has made ``share`` of its rise from the first value to its maximum."""
    if not epochs or len(epochs) != len(values):
        raise ValueError("plateau_epoch: epochs and values must be non-empty and of one length")
    first, top = values[0], max(values)
    bar = first + share * (top - first)
    return next(e for e, v in zip(epochs, values) if v >= bar)


@dataclass(frozen=True)
class Dynamics:
    """One cell's two plateaus (epochs), the lag between them and the HRLI@1 gained after accuracy plateaued."""

    epochs: tuple[int, ...]
    ndcg_plateau: int
    hrli_plateau: int
    hrli_at_ndcg_plateau: float
    hrli_max_after: float  # the largest HRLI@1 from the NDCG@10 plateau on
    hrli_last: float = float("nan")  # HRLI@1 at the last monitored epoch

    @property
    def lag(self) -> int:
        return self.hrli_plateau - self.ndcg_plateau

    @property
    def gain_after(self) -> float:
        return self.hrli_max_after - self.hrli_at_ndcg_plateau

    @property
    def change_after(self) -> float:
        """HRLI@1 at the last monitored epoch - HRLI@1 at the NDCG@10 plateau (signed)."""
        return self.hrli_last - self.hrli_at_ndcg_plateau


def cell_dynamics(curve: Sequence[dict[str, Any]], metric: str = "NDCG@10",
                  reliance: str = "HRLI@1") -> Dynamics | None:
    """The dynamics of one training curve; None where fewer than three epochs carry both series."""
    points = [(int(r["epoch"]), float(r["valid"][metric]), float(r["monitor"][reliance])) for r in curve
              if isinstance(r.get("monitor"), dict) and reliance in r["monitor"]
              and isinstance(r.get("valid"), dict) and metric in r["valid"]]
    if len(points) < 3:
        return None
    epochs = [p[0] for p in points]
    ndcg, hrli = [p[1] for p in points], [p[2] for p in points]
    n_plateau = plateau_epoch(epochs, ndcg)
    at = epochs.index(n_plateau)
    return Dynamics(tuple(epochs), n_plateau, plateau_epoch(epochs, hrli), hrli[at], max(hrli[at:]), hrli[-1])
