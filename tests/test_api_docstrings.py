"""The public API's docstrings are numpydoc: a Parameters section naming every parameter of the signature and a
Returns section wherever something is returned."""

from __future__ import annotations

import inspect
import re

import pytest

import resdom
from resdom import api

FUNCTIONS = [getattr(resdom, name) for name in resdom.__all__ if name not in ("__version__", "Fitted", "Diagnosis")]
METHODS = [getattr(cls, name) for cls in (api.Fitted, api.Diagnosis) for name, member in vars(cls).items()
           if not name.startswith("_") and inspect.isfunction(member)]


def section(doc: str, title: str) -> list[str] | None:
    """The lines of numpydoc section ``title`` (under its dashes, up to the next section), or None."""
    lines = inspect.cleandoc(doc).splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == title and re.fullmatch(r"\s*-{3,}\s*", lines[i + 1]):
            out = []
            for j in range(i + 2, len(lines)):
                if j + 1 < len(lines) and re.fullmatch(r"\s*-{3,}\s*", lines[j + 1]):
                    break
                out.append(lines[j])
            return out
    return None


def documented(lines: list[str]) -> set[str]:
    """Parameter names of a Parameters section: its unindented entry lines, ``a, b : type`` naming a and b."""
    indent = min(len(x) - len(x.lstrip()) for x in lines if x.strip())
    names: set[str] = set()
    for line in lines:
        if line.strip() and len(line) - len(line.lstrip()) == indent:
            names.update(n.strip() for n in line.split(":")[0].split(","))
    return names


def signature_names(fn) -> set[str]:  # noqa: ANN001
    out = set()
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        out.add("**" + p.name if p.kind is p.VAR_KEYWORD else "*" + p.name if p.kind is p.VAR_POSITIONAL else p.name)
    return out


@pytest.mark.parametrize("fn", FUNCTIONS + METHODS, ids=lambda f: f.__qualname__)
def test_numpydoc_sections(fn) -> None:  # noqa: ANN001
    doc = fn.__doc__ or ""
    params = signature_names(fn)
    if params:
        lines = section(doc, "Parameters")
        assert lines is not None, f"{fn.__qualname__}: no Parameters section"
        missing = params - documented(lines)
        assert not missing, f"{fn.__qualname__}: Parameters leaves out {sorted(missing)}"
    if inspect.signature(fn).return_annotation not in ("None", None, inspect.Signature.empty):
        assert section(doc, "Returns"), f"{fn.__qualname__}: no Returns section"


def test_the_checker_finds_a_missing_parameter() -> None:
    def f(a: int, b: int) -> int:
        """One line.

        Parameters
        ----------
        a
            The first.

        Returns
        -------
        int
            a + b.
        """
        return a + b

    assert documented(section(f.__doc__ or "", "Parameters") or []) == {"a"}
    assert section(f.__doc__ or "", "Returns") == ["int", "    a + b."]
    assert section("No sections.", "Returns") is None


def test_the_signature_api_writes_out_for_prepare_split_is_its_own() -> None:
    """resdom.api's note on ``prepare_split`` writes its signature out; every default it gives is the function's
    (it said ``protocol="loo"`` after the default became ``"auto"``)."""
    import ast

    from resdom.data.prepare import prepare_split

    written = re.search(r"``prepare_split\((source, [^`]*)\)``", inspect.getsource(api))
    assert written is not None
    params = inspect.signature(prepare_split).parameters
    pairs = [p.strip().partition("=") for p in written.group(1).split(",")]
    assert [name for name, _, _ in pairs] == [p if params[p].kind is not params[p].VAR_KEYWORD else "**" + p
                                              for p in params]
    for name, _, value in pairs:
        if value:
            assert ast.literal_eval(value) == params[name].default, name
