"""docs/results.md, docs/remedies.md and docs/results/tables/ are exactly what the committed results store
regenerates."""

from __future__ import annotations

from pathlib import Path

from resdom.pipeline.store import block_names, fill_blocks, store_cells
from resdom.report import document_blocks, read_runs

ROOT = Path(__file__).resolve().parents[1]


DOCUMENTS = ("results.md", "remedies.md")


def missing_blocks(docs: dict[str, str], tables: dict[str, str]) -> list[str]:
    """Problems with the documents' table blocks: every table the report makes is in exactly one document, once,
    and no block names a table the report does not make."""
    found = [(name, block) for name, text in docs.items() for block in block_names(text)]
    where: dict[str, list[str]] = {}
    for name, block in found:
        where.setdefault(block, []).append(name)
    problems = [f"no document holds the {t!r} block" for t in tables if t not in where]
    problems += [f"{block!r} is in {', '.join(names)}" for block, names in where.items() if len(names) > 1]
    return problems + [f"{name}: unknown block {block!r}" for name, block in found if block not in tables]


def test_committed_tables_equal_what_the_store_regenerates() -> None:
    cells = store_cells(ROOT / "results")
    assert cells, "results/ holds no cell"
    tables = document_blocks(read_runs(cells))
    docs = {name: (ROOT / "docs" / name).read_text() for name in DOCUMENTS}
    assert missing_blocks(docs, tables) == []
    for name, doc in docs.items():
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


def test_deleting_any_table_block_is_caught() -> None:
    """Each whole block deleted from either document (or doubled) is reported."""
    import re

    tables = {"accuracy": "", "hrli": "", "remedies": ""}
    block = "<!-- resdom:table {} -->\nx\n<!-- /resdom:table -->\n"
    docs = {"results.md": "# R\n" + block.format("accuracy") + block.format("hrli"),
            "remedies.md": block.format("remedies")}
    assert missing_blocks(docs, tables) == []
    for name, text in docs.items():
        for table in block_names(text):
            cut = re.sub(re.escape(block.format(table)), "", text)
            assert missing_blocks({**docs, name: cut}, tables) == [f"no document holds the {table!r} block"]
    assert missing_blocks({**docs, "remedies.md": docs["remedies.md"] + block.format("hrli")}, tables) == [
        "'hrli' is in results.md, remedies.md"]
