"""The vocabulary shared by every layer, in one place: models, protocols, block stages, metrics (the diagnostics' names
are those registered in ``diagnostics.registry``)."""

from __future__ import annotations

# models.MODEL_CLASSES holds a class for each; bert4rec and gru4rec are the paper's contrast models (spec §7)
MODELS: tuple[str, ...] = ("sasrec", "duorec", "bsarec", "bert4rec", "gru4rec")
PROTOCOLS: tuple[str, ...] = ("loo", "gts")
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
