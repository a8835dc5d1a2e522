"""The example notebooks run: ``examples/quickstart.ipynb`` and ``examples/practitioner.ipynb``
are executed cell by cell in a Jupyter kernel (nbclient) and any cell error fails the test; the cells of each are
those of its percent script (``examples/quickstart.py``, ``examples/practitioner.py``), which it is generated from.
``python tests/test_examples.py --write`` regenerates and re-executes both (``--write practitioner``: that one)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPT, NOTEBOOK = EXAMPLES / "quickstart.py", EXAMPLES / "quickstart.ipynb"
NOTEBOOKS = ("quickstart", "practitioner")  # examples/NAME.py -> examples/NAME.ipynb
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


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_cells_are_the_scripts(name):
    import nbformat

    saved = nbformat.read(EXAMPLES / f"{name}.ipynb", as_version=4)
    assert [(c.cell_type, c.source) for c in saved.cells] == script_cells(EXAMPLES / f"{name}.py"), (
        f"examples/{name}.ipynb is out of date: run `python tests/test_examples.py --write {name}`")
    shown = [o for c in saved.cells if c.cell_type == "code" for o in c.outputs]
    if name == "quickstart":
        assert any("image/png" in o.get("data", {}) for o in shown), "the saved notebook is executed (figures kept)"
    else:  # executed: every code cell has its output, and no error
        assert all(c.outputs for c in saved.cells if c.cell_type == "code"), "the saved notebook is executed"
        assert not [o for o in shown if o.output_type == "error"]


@pytest.mark.slow
def test_quickstart_notebook_runs_without_errors():
    pytest.importorskip("nbclient")
    nb = build_notebook()
    execute(nb)
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in shown if o.output_type == "error"]
    images = [o for o in shown if "image/png" in o.get("data", {})]
    assert len(images) >= 4, "the figures (mixing, hrli, alpha, RecBole mixing) are shown"


@pytest.mark.slow
def test_practitioner_notebook_runs_without_errors():
    pytest.importorskip("nbclient")
    nb = build_notebook(EXAMPLES / "practitioner.py")
    execute(nb)
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in shown if o.output_type == "error"]
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in shown)
    for needle in ("Coverage@10", "EchoNN@10", "new-1", "new-2", "target_item_id",
                   "sequences: 1 item id(s) not in the data, left out: 'sku-999'"):
        assert needle in text, needle


if __name__ == "__main__":
    if sys.argv[1:2] != ["--write"] or any(n not in NOTEBOOKS for n in sys.argv[2:]):
        sys.exit("usage: python tests/test_examples.py --write [quickstart|practitioner]   (regenerate and execute "
                 "examples/NAME.ipynb; every notebook without a name)")
    import nbformat

    for name in sys.argv[2:] or NOTEBOOKS:
        notebook = build_notebook(EXAMPLES / f"{name}.py")
        took = execute(notebook, record_timing=False)
        nbformat.write(notebook, EXAMPLES / f"{name}.ipynb")
        print(f"{EXAMPLES / name}.ipynb: written, executed in {took:.1f} s")
