"""The vocabulary shared by every layer, in one place: models, protocols, block stages, metrics (the diagnostics' names
are those registered in ``resdom.records``)."""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

# models.MODEL_CLASSES holds a class for each; bert4rec and gru4rec are the paper's contrast models (spec §7)
MODELS: tuple[str, ...] = ("sasrec", "duorec", "bsarec", "bert4rec", "gru4rec")
PROTOCOLS: tuple[str, ...] = ("loo", "gts", "none")  # none: nothing held out (fit on all data)
# the default of every command and of the API: gts where the data has timestamps, loo where it has none, resolved once
# from the data (data.prepare.resolve_protocol; docs/choices.md, "One protocol default"); a split records the protocol
# it resolved to, never "auto"
AUTO_PROTOCOL = "auto"
DeviceName = Literal["auto", "cpu", "cuda", "mps"]  # --device / train.device: auto = cuda, then mps, then cpu
DEVICES: tuple[str, ...] = get_args(DeviceName)
PARTS: tuple[str, ...] = ("valid", "test")
# what diagnose writes besides the registered diagnostics: the per-user evidence (RUN_DIR/diagnostics/users.npz), also
# a choice of ``--what`` / ``DiagnoseOptions.what``
USERS = "users"  # the evaluation parts of a split (evaluate, diagnose: --part / part)
STAGES: tuple[str, ...] = ("Attn", "+Res", "+LN")  # the stages of an attention block, in computation order
CUTOFFS: tuple[int, ...] = (1, 5, 10, 20)  # K of HR@K / NDCG@K
METRICS: tuple[str, ...] = (*(f"HR@{k}" for k in CUTOFFS), *(f"NDCG@{k}" for k in CUTOFFS), "MRR")
# Lower edges of the bands of a last input item's training frequency (hrli.json "by_frequency"): 0 (never in
# training), 1-4, 5-19, 20+.
FREQUENCY_BANDS: tuple[int, ...] = (0, 1, 5, 20)


def band_names(edges: tuple[int, ...] | list[int] = FREQUENCY_BANDS) -> list[str]:
    """(0, 1, 5, 20) -> ["0", "1-4", "5-19", "20+"]."""
    out = []
    for lo, hi in zip(edges, [*edges[1:], None]):
        out.append(f"{lo}+" if hi is None else str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}")
    return out


_METRIC = re.compile(r"(HRL(\d*)I|HR|NDCG|MRR)(?:@(\d+))?((?:_.*)?)")
_FAMILY = {"HR": 0, "NDCG": 1, "MRR": 2}


def metric_key(name: Any) -> tuple[Any, ...]:
    """Sort key putting metric names in the canonical order HR@1, HR@5, HR@10, HR@20, NDCG@1, ..., MRR, then
    HRLI@K, HRL2I@K, ... (a suffix such as ``_unfiltered`` groups after the plain names), then the block stages
    Attn, +Res, +LN; other keys follow, alphabetically."""
    if name in STAGES:
        return (0, "", 4, STAGES.index(name), 0)
    m = _METRIC.fullmatch(str(name))
    if m is None:
        return (1, str(name))
    family, k_last, cutoff, suffix = m.groups()
    rank = _FAMILY.get(family, 3)
    return (0, suffix, rank, int(k_last or 1) if rank == 3 else 0, int(cutoff or 0))
