"""The import contract of src/resdom (docs/architecture.md, "Layers"), read from the source with ``ast``:

- layers, lowest first: the shared base (vocabulary, errors, files, experiment settings) -> data -> models ->
  evaluation -> training -> diagnostics -> report -> pipeline / api -> cli; a module imports only from its own
  layer or lower ones (``TYPE_CHECKING`` imports included);
- no import circle between modules;
- imports sit at the top of modules: only ``resdom/__init__.py`` loads the API lazily (so ``import resdom`` stays
  torch-free);
- the report is a torch-free function of the stored JSON (checked by importing it in a fresh interpreter).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "resdom"

# Lowest first. A module's layer is that of its longest listed prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("resdom", "resdom.names", "resdom.errors", "resdom.io", "resdom.rundir", "resdom.stored", "resdom.experiments",
     "resdom.checks", "resdom.distributed", "resdom.resources", "resdom.version"),
    ("resdom.data",),
    ("resdom.models", "resdom.runs"),
    ("resdom.evaluation",),
    ("resdom.training", "resdom.adapters"),
    ("resdom.diagnostics",),
    ("resdom.report",),
    ("resdom.pipeline", "resdom.api", "resdom.recommend"),
    ("resdom.cli", "resdom.__main__"),
)
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
    """``resdom.report`` and every module in it."""
    return sorted(m for m in all_modules() if m == "resdom.report" or m.startswith("resdom.report."))


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


def layer_of(module: str) -> int:
    """The layer of ``module``: that of its longest listed prefix (the package ``resdom`` itself only by name, so a
    new top-level module must be listed)."""
    best, layer = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module.startswith(prefix + ".") and prefix != "resdom"
            if (module == prefix or inside) and len(prefix) > best:
                best, layer = len(prefix), i
    assert layer is not None, f"{module} is in no layer: add it to LAYERS"
    return layer


def upward(imports: list[Import]) -> list[str]:
    return [f"{i.module}:{i.line} imports {i.target} (layer {layer_of(i.target)} > {layer_of(i.module)})"
            for i in imports if layer_of(i.target) > layer_of(i.module)
            and (i.top or i.module not in LAZY_ALLOWED)]  # the package's lazy API: the one way up


def cycles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected components (more than one module, or a self-import) of the graph of the imports run
    at import time (module level, not under ``TYPE_CHECKING``)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.top and not i.type_only:
            graph.setdefault(i.module, set()).add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_every_module_has_a_layer() -> None:
    for module in all_modules():
        layer_of(module)


def test_nothing_imports_upward() -> None:
    assert upward(internal_imports()) == []


def test_no_import_circle() -> None:
    assert cycles(internal_imports()) == []


def test_internal_imports_sit_at_the_top_of_modules() -> None:
    inner = [f"{i.module}:{i.line} imports {i.target}" for i in internal_imports()
             if not i.top and i.module not in LAZY_ALLOWED]
    assert inner == []


def test_the_api_does_not_import_the_cli() -> None:
    assert [i for i in internal_imports() if i.module == "resdom.api" and i.target.startswith("resdom.cli")] == []


def test_the_report_reaches_no_torch() -> None:
    """Every module that importing any report module loads (``resdom.report`` and each of its modules, the ones
    ``resdom.report`` does not import too: echo, reliance_dynamics, probes, ...; their runtime imports, followed) is
    torch-free: none of them imports torch, a model, a diagnostic or the trainer, even inside a function."""
    modules = all_modules()
    parsed = {n: imports_in(n, p.read_text(), p.name == "__init__.py", set(modules)) for n, p in modules.items()}
    reached, todo = set(), report_modules()
    while todo:
        module = todo.pop()
        if module in reached:
            continue
        reached.add(module)
        parent = module.rsplit(".", 1)[0]  # importing a submodule runs its package's __init__ first
        todo += [i.target for i in parsed[module][0] if i.top and not i.type_only] + (
            [parent] if parent != module and parent in modules else [])
    assert {"resdom.report.figures", "resdom.report.tables", "resdom.report.values", "resdom.report.echo"} <= reached
    heavy = sorted(m for m in reached if m.startswith(("resdom.models", "resdom.diagnostics", "resdom.training",
                                                        "resdom.evaluation", "resdom.data", "resdom.runs")))
    assert heavy == []
    assert sorted(m for m in reached if "torch" in parsed[m][1]) == []


def test_the_checks_can_fail() -> None:
    """The checks above find what they look for: an upward import, a circle, an import inside a function, a
    module outside every layer."""
    planted = [Import("resdom.report.tables", "resdom.diagnostics.hrli", 1, True, False),
               Import("resdom.diagnostics.hrli", "resdom.report.tables", 2, True, False)]
    assert upward(planted) == ["resdom.diagnostics.hrli:2 imports resdom.report.tables (layer 6 > 5)"]
    assert cycles(planted) == [["resdom.diagnostics.hrli", "resdom.report.tables"]]
    source = ("from typing import TYPE_CHECKING\nimport torch\nfrom resdom.names import STAGES\n"
              "if TYPE_CHECKING:\n    from resdom.api import Fitted\n"
              "def f():\n    from resdom.report import tables\n")
    found, external = imports_in("resdom.x", source, False, {"resdom.report.tables"})
    assert [(i.target, i.top, i.type_only) for i in found] == [
        ("resdom.names", True, False), ("resdom.api", True, True), ("resdom.report.tables", False, False)]
    assert external == {"typing", "torch"}
    with pytest.raises(AssertionError):
        layer_of("elsewhere.module")


@pytest.mark.slow
def test_import_resdom_and_its_report_load_no_torch() -> None:
    """In a fresh interpreter (the one subprocess of this contract): ``import resdom`` loads no torch (the API comes
    on first use), and neither does importing every report module (it reads stored JSON only: no model, trainer or
    diagnostic either)."""
    code = ("import sys, resdom; assert 'torch' not in sys.modules, 'import resdom loaded torch'; "
            "assert 'fit' in dir(resdom); "
            f"import {', '.join(report_modules())}, resdom.experiments; "
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'resdom.models', "
            "'resdom.diagnostics', 'resdom.training'))); assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=SRC.parent, timeout=300)
    assert done.returncode == 0, done.stderr
