"""Make the RecBole 1.2.1 SASRec fixture in tests/fixtures/recbole (run ONCE, in the RecBole venv).

    bash scripts/make_recbole_venv.sh                       # -> benchmarks/.recbole-venv
    OMP_NUM_THREADS=1 benchmarks/.recbole-venv/bin/python scripts/make_recbole_fixture.py [OUT_DIR]

Writes, into OUT_DIR (default tests/fixtures/recbole):

- ``tiny.inter``: a small synthetic RecBole atomic file (60 users, 40 items, every user and item with >= 5
  interactions so resdom's default 5-core keeps everything; integer item tokens that first appear in an
  order different from their numeric order, so RecBole's ids (order of first appearance) and resdom's ids
  (increasing raw id) differ; rows shuffled so the timestamp order matters; timestamps unique);
- ``sasrec_tiny.pth``: the checkpoint exactly as RecBole's trainer saves it (``Config`` object pickled);
- ``expected.npz``: RecBole's own ``full_sort_predict`` scores for the test users (float32, columns in RecBole
  item-id order), the users' tokens, their input item tokens (oldest first) and RecBole's item-token table;
- ``numbering.json``: RecBole's item-token table of ``tiny.inter`` under filtering settings (``FILTERS``).

RecBole is only imported here. Nothing is reloaded through RecBole (its loader fails on torch >= 2.6).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

N_USERS, N_ITEMS, SEED = 60, 40, 7
ROOT = Path(__file__).resolve().parents[1]


def synthetic_rows(rng: np.random.Generator) -> list[tuple[str, str, int]]:
    """(user token, item token, timestamp) rows with a sequential signal: next item = item + 1 or a jump."""
    rows = []
    t = 1_000_000
    for u in range(N_USERS):
        length = int(rng.integers(6, 21))
        item = int(rng.integers(N_ITEMS))
        for _ in range(length):
            rows.append((f"u{u:03d}", item, t))
            t += int(rng.integers(1, 100))
            item = (item + 1) % N_ITEMS if rng.random() < 0.7 else int(rng.integers(N_ITEMS))
    counts = np.bincount([r[1] for r in rows], minlength=N_ITEMS)
    for item in np.flatnonzero(counts < 5):  # top up rare items so every item has >= 5 interactions
        for k in range(5 - int(counts[item])):
            rows.append((f"u{k:03d}", int(item), t))
            t += 1
    tokens = rng.permutation(N_ITEMS) + 1  # item code -> integer token 1..N in a scrambled order
    rows = [(u, str(int(tokens[i])), ts) for u, i, ts in rows]
    order = rng.permutation(len(rows))
    return [rows[k] for k in order]


def write_inter(path: Path, rows: list[tuple[str, str, int]]) -> None:
    text = "user_id:token\titem_id:token\ttimestamp:float\n" + "".join(f"{u}\t{i}\t{t}\n" for u, i, t in rows)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def recbole_config(data_path: Path, checkpoint_dir: Path) -> dict:
    return {
        "data_path": str(data_path), "checkpoint_dir": str(checkpoint_dir), "use_gpu": False, "seed": SEED,
        "reproducibility": True, "state": "ERROR", "show_progress": False, "save_dataset": False,
        "load_col": {"inter": ["user_id", "item_id", "timestamp"]}, "MAX_ITEM_LIST_LENGTH": 10,
        "hidden_size": 16, "inner_size": 24, "n_layers": 2, "n_heads": 2, "hidden_dropout_prob": 0.2,
        "attn_dropout_prob": 0.2, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "loss_type": "CE",
        "train_neg_sample_args": None, "epochs": 5, "train_batch_size": 64, "learning_rate": 0.01,
        "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "mode": "full", "group_by": "user"},
        "eval_batch_size": 64,
    }


def main(out_dir: Path) -> None:
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_seed

    out_dir.mkdir(parents=True, exist_ok=True)
    rows = synthetic_rows(np.random.default_rng(SEED))
    write_inter(out_dir / "tiny.inter", rows)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "tiny").mkdir()
        shutil.copy(out_dir / "tiny.inter", tmp / "tiny" / "tiny.inter")
        config = Config(model="SASRec", dataset="tiny", config_dict=recbole_config(tmp, tmp / "saved"))
        init_seed(config["seed"], config["reproducibility"])
        dataset = create_dataset(config)
        train_data, _valid_data, test_data = data_preparation(config, dataset)
        model = SASRec(config, train_data.dataset)
        trainer = Trainer(config, model)
        trainer.fit(train_data, valid_data=None, saved=True, show_progress=False)  # saves after every epoch
        shutil.copy(trainer.saved_model_file, out_dir / "sasrec_tiny.pth")
        expected = test_scores(model, dataset, test_data)
        numbering = recbole_numberings(tmp)
    np.savez_compressed(out_dir / "expected.npz", **expected)
    tmp_json = out_dir / ".numbering.json.tmp"
    tmp_json.write_text(json.dumps(numbering, indent=1, sort_keys=True) + "\n")
    tmp_json.replace(out_dir / "numbering.json")
    print(f"wrote {out_dir}: {len(rows)} interactions, {len(expected['users'])} test users, torch {torch.__version__}")


FILTERS = {  # RecBole settings that change its item numbering; numbering.json holds RecBole's result for each
    "kcore": {"user_inter_num_interval": "[5,inf)", "item_inter_num_interval": "[17,inf)"},
    "intervals": {"user_inter_num_interval": "[6,10];(12,inf)", "item_inter_num_interval": "(10,40]"},
    "dedup_last": {"rm_dup_inter": "last", "item_inter_num_interval": "[12,inf)"},
}


def recbole_numberings(data_path: Path) -> dict:
    """{name: {"config": the settings the importer reads, "tokens": RecBole's item table}} for FILTERS."""
    from recbole.config import Config
    from recbole.data import create_dataset

    keys = ["field_separator", "USER_ID_FIELD", "ITEM_ID_FIELD", "TIME_FIELD", "rm_dup_inter", "val_interval",
            "user_inter_num_interval", "item_inter_num_interval", "load_col", "benchmark_filename",
            "alias_of_item_id", "encoding"]
    out = {}
    for name, extra in FILTERS.items():
        cfg = recbole_config(data_path, data_path / "saved")
        config = Config(model="SASRec", dataset="tiny", config_dict={**cfg, **extra})
        dataset = create_dataset(config)
        out[name] = {"config": {k: config.final_config_dict.get(k) for k in keys},
                     "tokens": [str(t) for t in dataset.field2id_token[dataset.iid_field]]}
    return out


def test_scores(model, dataset, test_data) -> dict[str, np.ndarray]:
    """RecBole's own full-sort scores for every test user, with the inputs it saw (as tokens)."""
    import torch

    uid, iid = dataset.uid_field, dataset.iid_field
    users, inputs, targets, scores = [], [], [], []
    model.eval()
    with torch.no_grad():
        for interaction, _history, _pos_u, _pos_i in test_data:
            s = model.full_sort_predict(interaction).view(len(interaction), -1)
            items = interaction[model.ITEM_SEQ]
            lengths = interaction[model.ITEM_SEQ_LEN]
            for row in range(len(interaction)):
                users.append(dataset.id2token(uid, [int(interaction[uid][row])])[0])
                seq = items[row, : int(lengths[row])].tolist()
                inputs.append(" ".join(dataset.id2token(iid, seq)))
                targets.append(dataset.id2token(iid, [int(interaction[iid][row])])[0])
            scores.append(s.float().numpy())
    return {
        "users": np.array(users, dtype=str), "inputs": np.array(inputs, dtype=str),
        "targets": np.array(targets, dtype=str), "scores": np.concatenate(scores).astype(np.float32),
        "item_tokens": np.array(dataset.field2id_token[iid][1:], dtype=str),  # RecBole id k -> item_tokens[k-1]
    }


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "recbole")
