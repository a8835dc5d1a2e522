"""What import-linter does not check of the import contract of src/resdom (docs/architecture.md, "Layers").

The layers, the absence of any import circle (type-only imports included) and the torch-free report are contracts
of import-linter (``[tool.importlinter]`` in pyproject.toml, run by ``lint-imports`` in ``make test``). Checked here,
from the source with ``ast``:

- imports of resdom modules sit at the top of modules: only ``resdom/__init__.py`` loads the API lazily (so
  ``import resdom`` stays torch-free);
- ``import resdom`` and every report module load no torch (in a fresh interpreter).
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "resdom"

LAZY_ALLOWED = {"resdom"}  # the package's __init__: the API on first use


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (a submodule where ``from package import submodule``)
    line: int
    top: bool  # at module level (not inside a function or class body)
    type_only: bool  # under ``if TYPE_CHECKING:``


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def report_modules() -> list[str]:
    """``resdom.report`` and every module in it, and the same of the study above it (``resdom.study``)."""
    return sorted(m for m in all_modules() if m in ("resdom.report", "resdom.study")
                  or m.startswith(("resdom.report.", "resdom.study.")))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    out = []
    for a in node.names:  # ``from resdom.models import config`` imports the submodule resdom.models.config
        out.append(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_in(name: str, source: str, is_package: bool, known: set[str]) -> tuple[list[Import], set[str]]:
    """The imports of resdom modules in module ``name``'s ``source``, and the top-level names of the other packages
    it imports anywhere (``torch``, ``numpy``, ...)."""
    found: list[Import] = []
    external: set[str] = set()

    def visit(node: ast.AST, top: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in _targets(child, name, is_package, known):
                    if target == "resdom" or target.startswith("resdom."):
                        found.append(Import(name, target, child.lineno, top, type_only))
                    elif target and not type_only:
                        external.add(target.split(".")[0])
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for sub in child.body:
                    visit(ast.Module(body=[sub], type_ignores=[]), top, True)
                for sub in child.orelse:
                    visit(ast.Module(body=[sub], type_ignores=[]), top, type_only)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                visit(child, False, type_only)
            else:
                visit(child, top, type_only)

    visit(ast.parse(source), True, False)
    return found, external


@functools.cache
def _internal_imports() -> tuple[Import, ...]:
    modules = all_modules()
    found: list[Import] = []
    for name, path in modules.items():
        found += imports_in(name, path.read_text(), path.name == "__init__.py", set(modules))[0]
    return tuple(found)


def internal_imports() -> list[Import]:
    """Every import of a resdom module by a resdom module (the source read once per session)."""
    return list(_internal_imports())


def test_internal_imports_sit_at_the_top_of_modules() -> None:
    inner = [f"{i.module}:{i.line} imports {i.target}" for i in internal_imports()
             if not i.top and i.module not in LAZY_ALLOWED]
    assert inner == []


def test_the_check_can_fail() -> None:
    """``imports_in`` finds an import inside a function, and tells a type-only import from a runtime one."""
    source = ("from typing import TYPE_CHECKING\nimport torch\nfrom resdom.names import STAGES\n"
              "if TYPE_CHECKING:\n    from resdom.api import Fitted\n"
              "def f():\n    from resdom.report import tables\n")
    found, external = imports_in("resdom.x", source, False, {"resdom.report.tables"})
    assert [(i.target, i.top, i.type_only) for i in found] == [
        ("resdom.names", True, False), ("resdom.api", True, True), ("resdom.report.tables", False, False)]
    assert external == {"typing", "torch"}


@pytest.mark.slow
def test_import_resdom_and_its_report_load_no_torch() -> None:
    """In a fresh interpreter (the one subprocess of this contract): ``import resdom`` loads no torch (the API comes
    on first use), and neither does importing every module of the report or the study (they read stored JSON only:
    no model, trainer or diagnostic either); nor matplotlib, imported where a figure is drawn."""
    code = ("import sys, resdom; assert 'torch' not in sys.modules, 'import resdom loaded torch'; "
            "assert 'fit' in dir(resdom); "
            f"import {', '.join(report_modules())}, resdom.experiments; "
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'resdom.models', "
            "'resdom.diagnostics', 'resdom.training'))); assert not bad, bad; "
            "assert 'matplotlib' not in sys.modules, 'importing the report loaded matplotlib'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=SRC.parent, timeout=300)
    assert done.returncode == 0, done.stderr


IMPORT_STATE = """
import logging, os, pkgutil, random, signal, sys, warnings
import numpy as np, torch
def state():
    return (dict(os.environ), repr(warnings.filters), torch.get_num_threads(), torch.get_default_dtype(),
            torch.are_deterministic_algorithms_enabled(), torch.get_rng_state().tolist(), repr(np.random.get_state()),
            random.getstate(), repr(logging.getLogger().handlers), logging.getLogger().level, np.geterr(),
            [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)], sorted(os.listdir(TMP)))
TMP = sys.argv[1]
before = state()
import resdom
for m in pkgutil.walk_packages(resdom.__path__, "resdom."):
    if not m.name.endswith("__main__"):
        __import__(m.name)
after = state()
names = ["environ", "warnings filters", "torch threads", "default dtype", "deterministic", "torch rng", "numpy rng",
         "random", "root handlers", "root level", "numpy errors", "signals", "TMPDIR"]
changed = [n for n, a, b in zip(names, before, after) if a != b]
assert not changed, [(n, a, b) for n, a, b in zip(names, before, after) if a != b][:2]
assert "torch._dynamo" not in sys.modules, "importing resdom imported torch's compiler"
split = resdom.prepare_split("synthetic:n_users=40,n_items=20,min_len=5,max_len=10,seed=0", "loo")
from resdom.models import build_model, make_model_config
model = build_model(make_model_config(name="sasrec", n_items=split.n_items, hidden=8, layers=1, heads=1, max_len=8))
before = state()  # building a model draws its weights: torch's own way
resdom.evaluate(model.eval(), split, device="cpu")
resdom.diagnose(model, split, what="hrli,mixing", device="cpu")
after = state()
changed = [n for n, a, b in zip(names, before, after) if a != b]
assert not changed, ("evaluate, diagnose", [(n, a, b) for n, a, b in zip(names, before, after) if a != b][:2])
assert "torch._dynamo" not in sys.modules, "evaluating imported torch's compiler"
"""


@pytest.mark.slow
def test_importing_every_module_evaluating_and_diagnosing_leave_the_processs_state_alone(tmp_path: Path) -> None:
    """Importing resdom and every module of it (the CLI's included), then evaluating and diagnosing a model, change
    nothing of the calling program: its environment, warnings filters, torch's threads, dtype and random states,
    logging, signal handlers, TMPDIR. Importing torch's compiler (``torch.compiler.disable`` applied at import) set
    TORCHINDUCTOR_CACHE_DIR, made a folder in TMPDIR, added a warnings filter and took seconds of every start.
    (Training imports it all the same: torch's optimizers do, at their construction.)"""
    env = {**{k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"},
           "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", IMPORT_STATE, str(tmp_path)], capture_output=True, text=True,
                          cwd=SRC.parent, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_architecture_layout_names_every_module() -> None:
    """docs/architecture.md's layout of src/resdom names every module file, so a reader finds each one's job there
    (report/markdown.py, the one table writer, and __main__.py were missing)."""
    text = (SRC.parent / "docs" / "architecture.md").read_text()
    layout = text.split("```", 2)[1]  # the first code block: the package layout
    missing = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if p.name != "__init__.py" and p.name not in layout)
    assert not missing, f"docs/architecture.md's layout does not name {missing}"
