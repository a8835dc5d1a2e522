"""``resdom remedies``: training-time remedies for residual dominance, trained and compared (docs/remedies.md).

A reproduction grid (``pipeline.reproduce``) over one data set, the variants of one model (labels
``<model>-<variant>`` of ``training.config.MODEL_VARIANTS``; "base" is the model itself) and the seeds, each
trained with the base model's protocol and diagnosed like it; then, beside the grid's summary report::

    DIR/summary/remedies.md              the per-variant table (report.tables.remedies_table), mean ± std over seeds
    DIR/summary/tables/remedies.csv      the same, raw
    DIR/summary/figures/remedies.png     NDCG@10 against HRLI@1 per variant, and the base model's alpha sweep

With ``store`` every finished cell is exported to the results store, as the grid does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resdom.errors import ResdomError
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
    from resdom.training.config import remedy_label

    if not variants:
        raise ResdomError("--variants: give at least one variant")
    labels = [remedy_label(model, v) for v in variants]
    return GridSpec([dataset], labels, seeds, Path(out), **grid)


def remedies(spec: GridSpec, progress: bool = True, echo: Callable[[str], None] = print) -> RemediesResult:
    """Run the grid ``spec`` (resumably), then write the per-variant table and the trade-off figure."""
    from resdom.io import atomic_write_text
    from resdom.report import read_runs
    from resdom.report.figures import fig_remedies
    from resdom.report.tables import remedies_table, to_csv, to_markdown
    from resdom.training.config import REMEDY_MODELS

    result = reproduce(spec, progress=progress, echo=echo)
    finished = [Path(o.run_dir) for o in result.outcomes if o.status in ("done", "skipped")]
    runs = [r for r in read_runs(finished) if r.model in spec.models]
    if not runs:
        return RemediesResult(result, spec.models, None, None)
    summary = spec.out / "summary"
    table = remedies_table(runs, order=spec.models)
    md = summary / "remedies.md"
    atomic_write_text(md, f"## {table.title}\n\n{table.caption}\n\n{to_markdown(table)}")
    atomic_write_text(summary / "tables" / "remedies.csv", to_csv(table))
    base = next((m for m in spec.models if m in REMEDY_MODELS), None)  # "base": the label is the model itself
    fig = fig_remedies(runs, base=base, order=spec.models)
    png = fig.save(summary / "figures")["png"] if fig is not None else None
    return RemediesResult(result, spec.models, md, png)
