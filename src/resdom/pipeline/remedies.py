"""``resdom remedies``: training-time remedies for residual dominance, trained and compared (docs/remedies.md).

A reproduction grid (``pipeline.reproduce``) over one data set, the variants of one model (labels
``<model>-<variant>`` of ``experiments.MODEL_VARIANTS``; "base" is the model itself) and the seeds, each
trained with the base model's protocol and diagnosed like it; then, in the grid's summary report::

    DIR/summary/tables/remedies.md       the per-variant table (report.tables.remedies_table), mean ± std over seeds
    DIR/summary/tables/remedies.csv      the same, raw
    DIR/summary/figures/remedies.png     NDCG@10 against HRLI@1 per variant, and the base model's alpha sweep

(the grid's summary report writes them, as ``resdom report`` does for any runs that include remedy variants).

With ``store`` every finished cell is exported to the results store, as the grid does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resdom.errors import ResdomError
from resdom.experiments import remedy_label
from resdom.pipeline.reproduce import GridResult, GridSpec, reproduce


@dataclass
class RemediesResult:
    grid: GridResult
    labels: list[str]
    table_md: Path | None
    figure: Path | None


def remedy_grid(dataset: str, model: str, variants: list[str], seeds: list[int], out: str | Path,
                **grid: Any) -> GridSpec:
    """The reproduction grid of ``variants`` of ``model`` on ``dataset``; ``grid``: further GridSpec fields."""
    if not variants:
        raise ResdomError("--variants: give at least one variant")
    labels = [remedy_label(model, v) for v in variants]
    twice = next((v for i, v in enumerate(variants) if labels[i] in labels[:i]), None)
    if twice is not None:  # "base,BASE" was "--models: repeated value in sasrec,sasrec", neither given
        raise ResdomError(f"--variants: {twice!r} repeats a variant given before it ({', '.join(variants)})")
    return GridSpec([dataset], labels, seeds, Path(out), **grid, dataset_flag="DATASET")


def remedies(spec: GridSpec, progress: bool = True, echo: Callable[[str], None] = print) -> RemediesResult:
    """Run the grid ``spec`` (resumably); its summary report holds the per-variant table and the trade-off figure
    (``report.tables.remedies_table``, ``report.figures.fig_remedies``: written where a variant ran)."""
    result = reproduce(spec, progress=progress, echo=echo)
    md = result.summary_dir / "tables" / "remedies.md"
    png = result.summary_dir / "figures" / "remedies.png"
    return RemediesResult(result, spec.models, md if md.is_file() else None, png if png.is_file() else None)
