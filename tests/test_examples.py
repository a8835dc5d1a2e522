"""The example notebook runs (issue 12): ``examples/quickstart.ipynb`` is executed cell by cell in a Jupyter kernel
(nbclient) and any cell error fails the test; its cells are those of ``examples/quickstart.py``, the percent
script it is generated from. ``python tests/test_examples.py --write`` regenerates and re-executes the notebook."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPT, NOTEBOOK = EXAMPLES / "quickstart.py", EXAMPLES / "quickstart.ipynb"
CELL_TIMEOUT_S = 180  # one cell; the whole notebook takes well under a minute on one core


def script_cells(path: Path) -> list[tuple[str, str]]:
    """(cell type, source) of each ``# %%`` cell of a percent script; markdown cells lose their ``# ``."""
    cells: list[tuple[str, list[str]]] = []
    for line in path.read_text().splitlines():
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            kind, lines = cells[-1]
            lines.append(line[2:] if kind == "markdown" and line.startswith("# ") else
                         line.lstrip("#") if kind == "markdown" else line)
    return [(kind, "\n".join(lines).strip("\n")) for kind, lines in cells]


def build_notebook(path: Path = SCRIPT) -> Any:
    """The notebook (nbformat v4, no outputs) of the percent script ``path``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
    nb.cells = [make[kind](source) for kind, source in script_cells(path)]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    return nb


def execute(nb: Any, record_timing: bool = True) -> float:
    """Run every cell of ``nb`` in a fresh python3 kernel whose working directory is ``examples/`` (one torch
    thread); raises nbclient's CellExecutionError at the first failing cell. Returns the wall time in seconds."""
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=record_timing,
                            resources={"metadata": {"path": str(EXAMPLES)}})
    start = time.perf_counter()
    client.execute(env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def test_notebook_cells_are_the_scripts():
    import nbformat

    saved = nbformat.read(NOTEBOOK, as_version=4)
    assert [(c.cell_type, c.source) for c in saved.cells] == script_cells(SCRIPT), (
        "examples/quickstart.ipynb is out of date: run `python tests/test_examples.py --write`")
    shown = [o for c in saved.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in shown), "the saved notebook is executed (figures kept)"


@pytest.mark.slow
def test_quickstart_notebook_runs_without_errors():
    pytest.importorskip("nbclient")
    nb = build_notebook()
    execute(nb)
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in shown if o.output_type == "error"]
    images = [o for o in shown if "image/png" in o.get("data", {})]
    assert len(images) >= 4, "the figures (mixing, hrli, alpha, RecBole mixing) are shown"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_examples.py --write   (regenerate and execute examples/quickstart.ipynb)")
    import nbformat

    notebook = build_notebook()
    took = execute(notebook, record_timing=False)
    nbformat.write(notebook, NOTEBOOK)
    print(f"{NOTEBOOK}: written, executed in {took:.1f} s")
