"""Files that ship inside the package (package data), so an installed resdom needs nothing from the repository:

    resdom/configs/*.yaml          the reference configurations (``resdom config list``; ``--config NAME``)
    resdom/sample_data/recbole/    a tiny RecBole SASRec checkpoint and its .inter file (the example notebook)
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIGS_DIR = PACKAGE_DIR / "configs"
SAMPLE_DATA_DIR = PACKAGE_DIR / "sample_data"


def reference_configs() -> dict[str, Path]:
    """The shipped reference configurations by name (file name without ``.yaml``), sorted."""
    return {p.stem: p for p in sorted(CONFIGS_DIR.glob("*.yaml"))}


def reference_config(name: str | Path) -> Path | None:
    """The shipped configuration called ``name`` (``sasrec_loo`` or ``sasrec_loo.yaml``); None when there is none.
    A name with a folder in it is never a shipped configuration."""
    text = str(name)
    if not text or "/" in text or "\\" in text:
        return None
    return reference_configs().get(text[:-5] if text.endswith(".yaml") else text)


def describe_config(path: Path) -> str:
    """The first comment line of a configuration file (what it is), without the ``#``."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def recbole_example() -> tuple[Path, Path]:
    """(checkpoint, interactions) of the shipped RecBole example: a tiny SASRec (40 items, 60 users) saved by
    RecBole 1.x's trainer and the ``.inter`` file it was trained on (``resdom.adapters.import_recbole`` reads
    both; RecBole itself is not needed)."""
    folder = SAMPLE_DATA_DIR / "recbole"
    return folder / "sasrec_tiny.pth", folder / "tiny.inter"
