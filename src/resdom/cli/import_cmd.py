"""``resdom import-recbole``, ``import-pmixer``, ``import-rectools``: turn a model from elsewhere into a run directory.

The run directory is then read by ``resdom evaluate RUN_DIR`` and ``resdom diagnose RUN_DIR`` like a trained
one. Checkpoints are read with a restricted unpickler (``resdom.adapters.safe_pickle``): nothing in the file
is executed, and a file that needs anything beyond tensors, plain containers and inert stand-ins is refused.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import typer

from resdom.adapters import pmixer, recbole, rectools
from resdom.cli.values import say

RECBOLE_DATA_HELP = ("RecBole's .inter file the model was trained on, or a registered RecBole data set (ml-100k); "
                     "RecBole's own filters, numbering and order are rebuilt from the checkpoint's config")
PMIXER_DATA_HELP = ("the data file the model was trained on (pmixer's `user item` lines), or a registered name; "
                    "used as it is, as pmixer does (no k-core, file order)")
FORCE_HELP = ("replace the run in a non-empty --out: the old one is moved aside (OUT.replaced-K), never deleted; a "
              "results-store cell or a folder of other files is refused even then")


def _arg(path: Path) -> str:
    """``path`` as a command line takes it (quoted where it holds a space or a shell character)."""
    return shlex.quote(str(path))


def _data_options(k_core: int | None) -> dict[str, Any]:
    return {} if k_core is None else {"k_core": k_core}


def import_recbole(
    checkpoint: Path = typer.Argument(..., help="a RecBole 1.x SASRec checkpoint (.pth saved by its trainer)"),
    data: str = typer.Option(..., "--data", help=RECBOLE_DATA_HELP),
    out: Path = typer.Option(..., "--out", help="run directory to write"),
    data_dir: Path = typer.Option(None, "--data-dir", help="where registered data sets are found"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Import a RecBole SASRec checkpoint (weights, RecBole's preprocessing and item numbering) as a resdom run."""
    path = recbole.import_recbole(checkpoint, data, out, data_dir=data_dir, force=force, log=say)
    say(f"imported {checkpoint} -> {path} (evaluate: resdom evaluate {_arg(path)} --no-filter-seen; diagnose: "
        f"resdom diagnose {_arg(path)})")


def import_pmixer(
    state_dict: Path = typer.Argument(..., help="a pmixer/SASRec.pytorch state dict (torch.save(model.state_dict()))"),
    data: str = typer.Option(..., "--data", help=PMIXER_DATA_HELP),
    out: Path = typer.Option(..., "--out", help="run directory to write"),
    heads: int = typer.Option(1, "--heads", min=1, help="attention heads the model was trained with (num_heads)"),
    norm_first: bool = typer.Option(False, "--norm-first/--post-ln", help="the model was trained with --norm_first"),
    max_len: int = typer.Option(None, "--max-len", min=1, help="--maxlen it was trained with (default: from weights)"),
    data_dir: Path = typer.Option(None, "--data-dir", help="where registered data sets are found"),
    k_core: int = typer.Option(None, "--k-core", min=0, help="a k-core to apply to --data (default: none, as pmixer)"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Import a pmixer/SASRec.pytorch SASRec state dict (post-LN or --norm-first) as a resdom run."""
    path = pmixer.import_pmixer(state_dict, data, out, heads=heads, norm_first=norm_first, max_len=max_len,
                                data_dir=data_dir, force=force, log=say, **_data_options(k_core))
    say(f"imported {state_dict} -> {path} (evaluate: resdom evaluate {_arg(path)}; diagnose: resdom diagnose "
        f"{_arg(path)})")


def import_rectools(
    model_file: Path = typer.Argument(..., help="a RecTools SASRecModel / BERT4RecModel file (model.save) or its "
                                      "Lightning checkpoint (.ckpt)"),
    data: str = typer.Option(..., "--data", help="the interactions the model was trained on (a file or a registered "
                             "name); items the model does not know are dropped, as RecTools' recommend does"),
    out: Path = typer.Option(..., "--out", help="run directory to write"),
    data_dir: Path = typer.Option(None, "--data-dir", help="where registered data sets are found"),
    force: bool = typer.Option(False, "--force", help=FORCE_HELP),
) -> None:
    """Import a RecTools SASRec or BERT4Rec model (id embeddings, dot-product scores) as a resdom run."""
    path = rectools.import_rectools(model_file, data, out, data_dir=data_dir, force=force, log=say)
    say(f"imported {model_file} -> {path} (evaluate: resdom evaluate {_arg(path)}; diagnose: resdom diagnose "
        f"{_arg(path)})")


def register(app: typer.Typer) -> None:
    app.command("import-recbole")(import_recbole)
    app.command("import-pmixer")(import_pmixer)
    app.command("import-rectools")(import_rectools)
