"""Tiny seeded training runs of every model, variant and block option, printed as JSON: each run's test and
validation metrics, its best epoch and a sha256 of its final weights.

The check that a change of how models are configured or assembled changes no number: run it on the code before the
change and on the code after it; the two outputs must be equal, byte for byte. ``tests/test_models_seeded.py`` does
that against the source of a named commit (``git archive``), running this script under each ``src/``::

    PYTHONPATH=src python scripts/seeded_runs.py [LABEL ...] > runs.json
    PYTHONPATH=src python scripts/seeded_runs.py --stored results > built.json

Only the public API is used (``resdom.prepare_split``, ``resdom.fit``), so the script runs unchanged on older code.
Synthetic data (300 users, 60 items), 2 epochs, hidden 16, max length 12, one CPU thread.

``--stored STORE``: every distinct model configuration of the results store's cells (``STORE/*/*/seed*/config.json``)
built as the code reads a stored configuration, its parameters drawn from seed 0: a sha256 of its initial weights
per configuration (keyed by the sha256 of the stored JSON), so that two versions of the code can be shown to build
the same model from every stored cell.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

# label -> (model or variant label, protocol, extra fit options). Every model under loo and gts, every variant of
# experiments.MODEL_VARIANTS under gts (the protocol of the store's cells), and the block options no variant sets.
RUNS: dict[str, tuple[str, str, dict[str, Any]]] = {
    **{f"{m}/loo": (m, "loo", {}) for m in ("sasrec", "duorec", "bsarec", "bert4rec", "gru4rec")},
    **{f"{m}/gts": (m, "gts", {}) for m in ("sasrec", "duorec", "bsarec", "bert4rec", "gru4rec")},
    **{f"{v}/gts": (v, "gts", {}) for v in (
        "sasrec-tts", "duorec-tts", "sasrec-celast",
        "sasrec-res0.5", "sasrec-res0.75", "sasrec-gate", "sasrec-gate-channel", "sasrec-preln", "sasrec-mean3",
        "sasrec-pool", "duorec-res0.5", "duorec-gate", "duorec-gate-channel", "duorec-preln", "duorec-mean3",
        "duorec-pool", "bsarec-res0.5", "bsarec-gate", "bsarec-gate-channel", "bsarec-mean3", "bsarec-pool",
        "sasrec-query", "sasrec-untied", "sasrec-projected", "duorec-query", "duorec-untied", "duorec-projected")},
    "sasrec-preln/loo": ("sasrec-preln", "loo", {}),
    "sasrec/pad0-nokpm-zero": ("sasrec", "loo", {"positions": "from_end_pad0", "key_padding_mask": False,
                                                 "zero_padding": True, "final_ln": True, "final_ln_eps": 1e-8}),
    "sasrec/dropout-relu-inner": ("sasrec", "loo", {"embedding": "dropout", "activation": "relu", "inner_size": 24,
                                                    "ffn_dropout": True, "qkv_init": "xavier", "init_padding": True}),
    "sasrec/dropout_ln-scale": ("sasrec", "loo", {"embedding": "dropout_ln", "emb_scale": True, "ln_eps": 1e-8,
                                                  "positions": "from_start", "layers": 1, "heads": 4}),
    "duorec/sup": ("duorec", "loo", {"duorec_views": "sup", "duorec_tau": 0.5, "duorec_lambda": 0.2}),
    "duorec/both": ("duorec", "loo", {"duorec_views": "both", "objective": "ce_last"}),
    "bsarec/a-c": ("bsarec", "loo", {"bsa_a": 0.5, "bsa_c": 5}),
    "bert4rec/mask": ("bert4rec", "gts", {"mask_prob": 0.3, "max_len": 6}),
    "gru4rec/2layers": ("gru4rec", "gts", {"layers": 2, "dropout": 0.3}),
}
DATA = "synthetic:n_users=300,n_items=60,min_len=4,max_len=16,seed=3"
OPTIONS: dict[str, Any] = {"epochs": 2, "hidden": 16, "max_len": 12, "seed": 1, "batch_size": 64}


def weights_sha256(model: Any) -> str:
    """sha256 over the state dict's names, dtypes, shapes and bytes, in its order."""
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def run(label: str) -> dict[str, Any]:
    import resdom

    model, protocol, extra = RUNS[label]
    split = resdom.prepare_split(DATA, protocol=protocol)
    fitted = resdom.fit(split, model, progress=False, device="cpu", **{**OPTIONS, **extra})
    m = fitted.metrics
    return {"best_epoch": m.get("best_epoch"), "valid": (m.get("valid") or {}).get("metrics"),
            "test": (m.get("test") or {}).get("metrics"), "weights": weights_sha256(fitted.model)}


def stored_configs(store: str) -> dict[str, dict[str, Any]]:
    """sha256 of the stored JSON -> each distinct ``model`` section of the store's cells' config.json."""
    from pathlib import Path

    out = {}
    for path in sorted(Path(store).glob("*/*/seed*/config.json")):
        model = json.loads(path.read_text())["model"]
        key = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]
        out[key] = model
    return out


def build_stored(model: dict[str, Any]) -> str:
    """The weights hash of the model a stored configuration describes, parameters drawn from seed 0."""
    import torch

    import resdom.models as models

    reader = getattr(models, "read_model_config", None)  # the code of before it read the flat form directly
    cfg = reader(model) if reader is not None else models.ModelConfig(**model)
    torch.manual_seed(0)
    return weights_sha256(models.build_model(cfg))


def main(labels: list[str]) -> None:
    import logging

    import torch

    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    if labels[:1] == ["--stored"]:
        out = {key: build_stored(model) for key, model in stored_configs(labels[1]).items()}
    else:
        out = {label: run(label) for label in (labels or RUNS)}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
