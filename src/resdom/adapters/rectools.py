"""Import RecTools (0.19) SASRec and BERT4Rec models, trained by RecTools itself, as resdom runs.

The file is what ``model.save(path)`` writes (a pickle of the model object whose state is the Lightning
checkpoint's bytes), or that Lightning checkpoint itself (``.ckpt``). Both are read with resdom's restricted
unpickler (``safe_pickle``): RecTools' model class becomes an inert stand-in, the checkpoint is unpickled
under the same whitelist (plus object arrays of str / int ids, RecTools' external item ids); nothing from
the file runs, RecTools need not be installed.

RecTools' SASRec (``SASRecTransformerLayers``) is resdom's query-LN SASRec:

- input ``Dropout(E[item] (* sqrt(d) with use_scale_factor) + P)``, positions counted from the end of the
  left-padded window (``LearnableInversePositionalEncoding``: the last column is position 0) ->
  ``embedding="dropout", positions="from_end"`` with the position table reversed;
- per block ``Q = LN_q(X)``, ``H = LN_ff(Q + MHA(Q, X, X))``, ``X' = H + Dropout(W_2 Dropout(ReLU(W_1 H)))``
  (``nn.MultiheadAttention``, FFN inner size d) -> ``query_ln=True, inner_size=d, activation="relu"``;
  block LayerNorms eps 1e-5, the final one (``last_layernorm``) 1e-8 -> ``final_ln=True, final_ln_eps=1e-8``;
- padded states multiplied by 0 before every block and before the final LayerNorm (its timeline mask) ->
  ``zero_padding=True``; causal mask only unless ``use_key_padding_mask`` (then padded keys are masked too);
  every input is left-padded to ``session_max_len`` as RecTools does.

RecTools' BERT4Rec (``PreLNTransformerLayers``) is resdom's BERT4Rec with pre-LN blocks:
``X + MHA(LN_1(X))``, ``+ Dropout(W_2 Dropout(GELU(W_1 LN_2(.))))`` (inner ``ff_factors_multiplier * d``),
no final LayerNorm, bidirectional attention with padded keys masked, the same input and positions, no
token-type embedding; prediction at an appended ``MASK`` token after the last ``session_max_len - 1`` items.

Item rows: RecTools' row 0 is ``PAD`` (BERT4Rec: row 1 ``MASK``), then its items in the order its training
data first showed them; each resdom item id takes the row of its raw id. Scores are dot products
(``DistanceSimilarityModule`` with ``distance="dot"``). Refused, one line each: item nets with feature
embeddings (only id embeddings are read), cosine similarity, other layer, backbone or positional-encoding
types, BERT4Rec without its key-padding mask or with causal attention.

Data: RecTools reads each user's interactions sorted by time with a stable sort (no filtering of its own; the
items the model knows are those of its training windows). At ``recommend`` time it drops interactions with items
it does not know; the importer does the same to ``--data``, then resdom's leave-one-out split (no k-core, no
repeat removal, stable time sort: resdom's own tie rule is RecTools').
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resdom.adapters.common import (
    ImportData,
    TrackedState,
    _keys,
    attention_weights,
    check_heads,
    embedding_table,
    import_inputs,
    imported_model_config,
    integer_ids,
    load_weights,
    setting_mapping,
    setting_number,
    source_rows,
    take_rows,
    write_run,
)
from resdom.adapters.safe_pickle import Inert, load_torch_bytes, loads_restricted
from resdom.bounded import refuse_special
from resdom.data.prepare import read_source
from resdom.data.preprocess import PreprocessConfig, preprocess
from resdom.data.stats import dataset_stats
from resdom.errors import ResdomError
from resdom.models.base import SequentialRecommender
from resdom.models.config import ModelConfig
from resdom.records import counted
from resdom.runs import model_to_load
from resdom.version import __version__

PREFIX = "rectools.models.nn."
SASREC_LAYERS = PREFIX + "transformers.sasrec.SASRecTransformerLayers"
PRELN_LAYERS = PREFIX + "transformers.net_blocks.PreLNTransformerLayers"
DEFAULT_TYPES = {
    "backbone_type": PREFIX + "transformers.torch_backbone.TransformerTorchBackbone",
    "pos_encoding_type": PREFIX + "transformers.net_blocks.LearnableInversePositionalEncoding",
    "similarity_module_type": PREFIX + "transformers.similarity.DistanceSimilarityModule",
    "item_net_constructor_type": PREFIX + "item_net.SumOfEmbeddingsConstructor",
}
MODELS = {"SASRecModel": ("sasrec", SASREC_LAYERS), "BERT4RecModel": ("bert4rec", PRELN_LAYERS)}
ID_EMB = "torch_model.item_model.item_net_blocks.0.ids_emb.weight"
BLOCK_LN_EPS, FINAL_LN_EPS = 1e-5, 1e-8


@dataclass
class RecToolsCheckpoint:
    """What the importer reads from a RecTools file: the model config, item ids and the torch weights."""

    kind: str                          # "sasrec" or "bert4rec"
    config: dict[str, Any]             # hyper_parameters["model_config"]
    item_ids: list[Any]                # external id of each internal item row (extra tokens first)
    extra_tokens: list[str]            # ("PAD",) or ("PAD", "MASK")
    state_dict: dict[str, torch.Tensor]
    version: str | None = None         # the Lightning version that wrote the checkpoint


def read_rectools_file(path: str | Path) -> RecToolsCheckpoint:
    """Read a RecTools ``model.save`` file or Lightning checkpoint safely (nothing from the file runs)."""
    path = Path(path)
    refuse_special(path)
    if not path.is_file():
        raise ResdomError(f"{path}: file not found")
    data = path.read_bytes()
    if data[:4] == b"PK\x03\x04":  # a zip archive (a Lightning checkpoint); model.save writes a pickle
        ckpt = load_torch_bytes(data, (), str(path), object_arrays=True)
    else:
        obj = loads_restricted(data, ("rectools.",), str(path))
        if not isinstance(obj, Inert) or not isinstance(obj.state, dict) or "fitted_checkpoint" not in obj.state:
            what = obj.qualname if isinstance(obj, Inert) else type(obj).__name__
            raise ResdomError(f"{path}: not a fitted RecTools model saved with model.save (got {what}; an unfitted "
                              "model holds no weights)")
        ckpt = load_torch_bytes(obj.state["fitted_checkpoint"], (), f"{path} (fitted_checkpoint)",
                                object_arrays=True)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        raise ResdomError(f"{path}: not a RecTools Lightning checkpoint (no state_dict / hyper_parameters)")
    hp = ckpt["hyper_parameters"]
    config = hp.get("model_config") if isinstance(hp, dict) else None
    if not isinstance(config, dict) or config.get("cls") not in MODELS:
        got = config.get("cls") if isinstance(config, dict) else None
        raise ResdomError(f"{path}: a RecTools model of class {got!r}; resdom imports SASRecModel and BERT4RecModel")
    kind = MODELS[config["cls"]][0]
    items, extra = hp.get("item_external_ids"), hp.get("item_extra_tokens")
    if items is None or not extra:
        raise ResdomError(f"{path}: the checkpoint has no item_external_ids / item_extra_tokens")
    items, extra = _id_list(items, "item_external_ids", path), _id_list(extra, "item_extra_tokens", path)
    if not isinstance(ckpt["state_dict"], dict):
        raise ResdomError(f"{path}: the checkpoint's state_dict is a {type(ckpt['state_dict']).__name__}, not a "
                          "mapping of weight names to tensors")
    state = {k: v for k, v in ckpt["state_dict"].items() if isinstance(v, torch.Tensor)}
    return RecToolsCheckpoint(kind, config, items, [str(t) for t in extra], state,
                              ckpt.get("pytorch-lightning_version"))


def _id_list(value: Any, name: str, path: Path) -> list[Any]:
    """A list of ids from the checkpoint (a list, tuple or 1-d array of str / numbers); one line naming it otherwise."""
    arr = np.asarray(value, dtype=object) if isinstance(value, (list, tuple, np.ndarray)) else None
    plain = (str, int, float, np.integer, np.floating)
    if arr is None or arr.ndim != 1 or not all(isinstance(x, plain) and not isinstance(x, bool) for x in arr):
        raise ResdomError(f"{path}: the checkpoint's {name} is not a list of ids (got {type(value).__name__}: "
                          f"{str(value)[:60]})")
    return list(arr)


def _check_supported(ck: RecToolsCheckpoint, where: str) -> None:
    cfg = ck.config
    layers = MODELS[cfg["cls"]][1]
    if cfg.get("transformer_layers_type") != layers:
        raise ResdomError(f"{where}: {cfg['cls']} with transformer_layers_type {cfg.get('transformer_layers_type')!r}"
                          f" is not supported (resdom reads {layers.rsplit('.', 1)[-1]})")
    for key, expected in DEFAULT_TYPES.items():
        if cfg.get(key) not in (None, expected):
            raise ResdomError(f"{where}: {key} {cfg.get(key)!r} is not supported (resdom reads {expected})")
    item_keys = sorted(k for k in ck.state_dict if k.startswith("torch_model.item_model."))
    if item_keys != [ID_EMB]:
        raise ResdomError(f"{where}: the item net has weights beyond id embeddings ({', '.join(item_keys)[:160]}); "
                          "resdom imports id-only item nets (item_net_block_types=(IdEmbeddingsItemNet,))")
    for key in ("similarity_module_kwargs", "pos_encoding_kwargs", "transformer_layers_kwargs"):
        setting_mapping(cfg.get(key), key, where)
    distance = setting_mapping(cfg.get("similarity_module_kwargs"), "similarity_module_kwargs", where).get(
        "distance", "dot")
    if distance != "dot":
        raise ResdomError(f"{where}: similarity distance {distance!r}; resdom imports dot-product scores only")
    if ck.kind == "bert4rec" and (not cfg.get("use_key_padding_mask", True) or cfg.get("use_causal_attn", False)):
        raise ResdomError(f"{where}: BERT4Rec without its key-padding mask or with causal attention is not supported")
    if ck.kind == "sasrec" and not cfg.get("use_causal_attn", True):
        raise ResdomError(f"{where}: SASRec without causal attention is not supported")
    expected_tokens = ["PAD"] if ck.kind == "sasrec" else ["PAD", "MASK"]
    if ck.extra_tokens != expected_tokens or [str(x) for x in ck.item_ids[: len(expected_tokens)]] != expected_tokens:
        raise ResdomError(f"{where}: item extra tokens {ck.extra_tokens} (expected {expected_tokens})")


def rectools_model_config(ck: RecToolsCheckpoint, n_items: int, where: str = "checkpoint") -> ModelConfig:
    """resdom's ModelConfig equal to the RecTools model ``ck`` (see the module docstring)."""
    _check_supported(ck, where)
    cfg = ck.config

    def number(key: str, kind: type, default: Any = None) -> Any:
        if key not in cfg and default is None:
            raise ResdomError(f"{where}: the checkpoint's model_config has no {key!r}")
        return setting_number(cfg.get(key, default), kind, key, where)

    hidden = int(embedding_table(ck.state_dict, ID_EMB, where).shape[1])
    layers = len([k for k in ck.state_dict if k.endswith(".multi_head_attn.in_proj_weight")])
    heads = number("n_heads", int)
    check_heads(hidden, heads, "n_heads", where)
    pos_kwargs = setting_mapping(cfg.get("pos_encoding_kwargs"), "pos_encoding_kwargs", where)
    dropout = number("dropout_rate", float)
    common: dict[str, Any] = dict(
        n_items=n_items, max_len=number("session_max_len", int), hidden=hidden, layers=layers, heads=heads,
        dropout=dropout, attn_dropout=dropout, embedding="dropout",
        emb_scale=bool(pos_kwargs.get("use_scale_factor", False)), ln_eps=BLOCK_LN_EPS, positions="from_end",
    )
    if layers != number("n_blocks", int):
        raise ResdomError(f"{where}: {layers} attention layers in the weights, n_blocks {cfg['n_blocks']} in config")
    if ck.kind == "sasrec":
        return imported_model_config(where, name="sasrec", **common, inner_size=hidden, activation="relu",
                                     query_ln=True, final_ln=True, final_ln_eps=FINAL_LN_EPS, zero_padding=True,
                                     key_padding_mask=bool(cfg.get("use_key_padding_mask", False)))
    layer_kwargs = setting_mapping(cfg.get("transformer_layers_kwargs"), "transformer_layers_kwargs", where)
    mult = setting_number(layer_kwargs.get("ff_factors_multiplier", 4), int, "ff_factors_multiplier", where)
    return imported_model_config(where, name="bert4rec", **common, inner_mult=mult, activation="gelu",
                                 norm_first=True, final_ln=False,
                                 mask_prob=number("mask_prob", float, 0.15))


def rectools_state_dict(ck: RecToolsCheckpoint, cfg: ModelConfig, rows: np.ndarray, where: str
                        ) -> dict[str, torch.Tensor]:
    """resdom state dict from RecTools' weights; ``rows``: RecTools item row of each resdom item id (0 -> PAD)."""

    def get(name: str) -> torch.Tensor:
        key = "torch_model." + name
        if key not in ck.state_dict:
            raise ResdomError(f"{where}: the checkpoint has no {key!r}")
        return ck.state_dict[key]

    d, L = cfg.hidden, cfg.max_len
    table = get("item_model.item_net_blocks.0.ids_emb.weight")
    items = take_rows(table, rows)
    if ck.kind == "bert4rec":  # resdom's [MASK] is the row after the items
        items = torch.cat([items, table[1:2]], dim=0)
    pos_key = "torch_model.pos_encoding_layer.pos_emb.weight"
    if pos_key in ck.state_dict:
        pos = ck.state_dict[pos_key]
        if pos.shape[0] != L:
            raise ResdomError(f"{where}: position table of {pos.shape[0]} rows for session_max_len {L}")
        pos = pos.flip(0)  # RecTools: the last column is position 0; resdom's from_end: position L - 1
    else:  # use_pos_emb=False
        pos = torch.zeros(L, d)
    out: dict[str, torch.Tensor] = {"item_emb.weight": items, "pos_emb.weight": pos.clone(),
                                    "emb_ln.weight": torch.ones(d), "emb_ln.bias": torch.zeros(d)}
    if ck.kind == "bert4rec":
        out["token_type"] = torch.zeros(d)  # RecTools has no token-type embedding
    else:
        out["final_ln.weight"] = get("transformer_layers.last_layernorm.weight")
        out["final_ln.bias"] = get("transformer_layers.last_layernorm.bias")
    lns = {"sasrec": ("q_layer_norm", "ff_layer_norm"), "bert4rec": ("layer_norm_1", "layer_norm_2")}[ck.kind]
    for i in range(cfg.layers):
        src, dst = f"transformer_layers.transformer_blocks.{i}.", f"blocks.{i}."
        mha = src + "multi_head_attn."
        out.update(attention_weights(dst, get(mha + "in_proj_weight"), get(mha + "in_proj_bias"),
                                     get(mha + "out_proj.weight"), get(mha + "out_proj.bias")))
        for p in ("weight", "bias"):
            out[f"{dst}attn_ln.{p}"] = get(f"{src}{lns[0]}.{p}")
            out[f"{dst}ffn_ln.{p}"] = get(f"{src}{lns[1]}.{p}")
            out[f"{dst}ffn.fc1.{p}"] = get(f"{src}feed_forward.ff_linear_1.{p}")
            out[f"{dst}ffn.fc2.{p}"] = get(f"{src}feed_forward.ff_linear_2.{p}")
    return out


def rectools_model(ck: RecToolsCheckpoint, item_labels: np.ndarray, where: str = "checkpoint"
                   ) -> SequentialRecommender:
    """resdom model (eval mode) whose scores equal RecTools' on the items of ``item_labels`` (raw id per item id)."""
    n_extra = len(ck.extra_tokens)
    tokens = [None] + list(ck.item_ids[n_extra:])  # resdom item id -> RecTools row: rows shifted by the extra tokens
    rows = source_rows(np.asarray(item_labels, dtype=object), tokens, where)
    rows = np.where(rows > 0, rows + n_extra - 1, 0)
    cfg = rectools_model_config(ck, len(item_labels) - 1, where)
    model = model_to_load(cfg)
    load_weights(model, rectools_state_dict(ck, cfg, rows, where), where)
    return model


def rectools_import_data(source: str, known_items: list[Any], data_dir: str | Path | None = None) -> ImportData:
    """resdom's LOO split of ``source`` as RecTools reads it: interactions with items the model does not know
    dropped (as its ``recommend`` does), each user's items in stable time order, no other filtering."""
    raw, record, _preset = read_source(source, data_dir)
    numeric = integer_ids(known_items)
    known = set(_keys(known_items, numeric))
    keep = np.fromiter((k in known for k in _keys(raw.items, numeric)), dtype=np.bool_, count=len(raw.items))
    dropped = int((~keep).sum())
    raw.users, raw.items = raw.users[keep], raw.items[keep]
    if raw.times is not None:
        raw.times = raw.times[keep]
    if len(raw.items) == 0:
        raise ResdomError(f"{source}: none of its items is known to the model (was it trained on this data?)")
    cfg = PreprocessConfig(k_core=None, remove_repeats=False, sort_by_time=True)
    prepared = preprocess(raw, cfg)
    seqs = prepared.sequences
    steps = [{"step": "rectools_known_items", "removed_interactions": dropped, "kept_interactions": int(keep.sum()),
              "rule": "interactions with items the model does not know are dropped, as RecTools' recommend does"},
             *prepared.steps]
    manifest: dict[str, Any] = {
        "resdom_version": __version__, "source": record,
        "preprocessing": {"framework": "rectools", "config": cfg.model_dump(), "steps": steps},
        "tie_rule": prepared.tie_rule, "n_items": prepared.n_items, "n_users": len(seqs),
        "has_timestamps": seqs.times is not None, "dataset": dataset_stats(seqs),
    }
    return ImportData.leave_one_out(prepared, manifest)


def import_rectools(path: str | Path, source: str, out: str | Path, data_dir: str | Path | None = None,
                    force: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """Read a RecTools SASRec / BERT4Rec file, map it onto resdom's model for ``source`` (LOO), write run ``out``."""
    ck = read_rectools_file(path)
    _check_supported(ck, str(path))
    rectools_model_config(ck, 1, str(path))  # refuse bad settings before the data is read
    data = rectools_import_data(source, ck.item_ids[len(ck.extra_tokens):], data_dir)
    ck.state_dict = TrackedState(ck.state_dict)
    model = rectools_model(ck, data.item_labels, str(path))
    ignored = ck.state_dict.unread()
    steps = {s["step"]: s for s in data.manifest["preprocessing"]["steps"]}
    lines = [
        f"RecTools {ck.config['cls']} ({ck.kind}): d {model.cfg.hidden}, {model.cfg.layers} blocks, {model.cfg.heads} "
        f"heads, session_max_len {ck.config['session_max_len']}, "
        f"{counted(len(ck.item_ids) - len(ck.extra_tokens), 'item')} known to the model",
        f"data: {counted(steps['rectools_known_items']['removed_interactions'], 'interaction')} with items unknown "
        f"to the model "
        f"dropped (as RecTools' recommend does); stable time order, no k-core; test split: leave-one-out, "
        f"{counted(len(data.split.test))}",
    ]
    imported = {"format": "rectools", "path": str(Path(path).resolve()), "class": ck.config["cls"],
                "model_config": {k: v for k, v in ck.config.items() if isinstance(v, (str, int, float, bool))},
                "lightning_version": ck.version, "preprocessing": lines[1:], "ignored_weights": ignored}
    return write_run(out, model, data, imported, force, log, lines,
                     import_inputs("MODEL_FILE", path, source, data_dir))
