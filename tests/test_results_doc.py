"""docs/results.md, docs/remedies.md and docs/results/tables/ are exactly what the committed results store
regenerates."""

from __future__ import annotations

from pathlib import Path

from resdom.pipeline.store import block_names, fill_blocks, store_cells
from resdom.report import document_blocks, read_runs

ROOT = Path(__file__).resolve().parents[1]


def test_committed_tables_equal_what_the_store_regenerates() -> None:
    cells = store_cells(ROOT / "results")
    assert cells, "results/ holds no cell"
    tables = document_blocks(read_runs(cells))
    for name, needed in (("results.md", "accuracy"), ("remedies.md", "remedies")):
        doc = (ROOT / "docs" / name).read_text()
        assert set(block_names(doc)) <= set(tables) and needed in block_names(doc), name
        assert fill_blocks(doc, tables) == doc, f"docs/{name} is stale: rerun the command docs/results.md names"
    for name, text in tables.items():
        committed = ROOT / "docs" / "results" / "tables" / f"{name}.md"
        assert committed.read_text() == text, f"{committed} is stale: rerun the command in docs/results.md"


def test_every_cell_names_one_checkpoint_and_early_stopping_or_its_cap() -> None:
    import json

    for cell in store_cells(ROOT / "results"):
        meta = json.loads((cell / "cell.json").read_text())
        assert meta["stopped"] in ("early_stopping", "max_epochs") and meta["best_epoch"] >= 1, cell
        for path in (cell / "diagnostics").glob("*.json"):
            assert json.loads(path.read_text())["checkpoint"] == meta["checkpoint"], path
        assert json.loads((cell / "metrics.json").read_text())["checkpoint"] == meta["checkpoint"], cell
        assert sum(p.stat().st_size for p in cell.rglob("*") if p.is_file()) < 200_000, cell
