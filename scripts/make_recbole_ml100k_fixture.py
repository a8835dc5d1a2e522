"""Make the RecBole 1.2.1 ml-100k fixture in tests/fixtures/recbole_ml100k (run ONCE, in the RecBole venv).

    bash scripts/make_recbole_venv.sh                       # -> benchmarks/.recbole-venv
    OMP_NUM_THREADS=1 benchmarks/.recbole-venv/bin/python scripts/make_recbole_ml100k_fixture.py \
        [--inter ../shared/data/raw/ml-100k/ml-100k.inter] [--out tests/fixtures/recbole_ml100k]

Trains a tiny SASRec (hidden 32, 2 layers, a few epochs, one thread) with RecBole's own pipeline on the real
MovieLens-100K as RecBole distributes it (data set name ``ml-100k``, so RecBole's ``ml-100k.yaml`` preset
applies: ``normalize_all: True``, no interaction-count filter) and its sequential defaults (``LS:
valid_and_test``, ``TO``, full ranking). Writes, into OUT:

- ``sasrec_ml100k.pth``: the checkpoint exactly as RecBole's trainer saves it (``Config`` object pickled);
- ``recbole_eval.json``: RecBole's own test evaluation (``Trainer.evaluate``, as it prints it: hit@10,
  ndcg@10), the number of test users, the versions used and the settings;
- ``test_split.npz``: RecBole's test users (tokens), their inputs (item tokens, oldest first, the last
  MAX_ITEM_LIST_LENGTH) and targets, and the 0-based pessimistic rank of each target under RecBole's own
  ``full_sort_predict`` (all items, padding excluded, no seen-item filter: RecBole's sequential evaluation).

RecBole is only imported here; resdom's tests read these files without it. Nothing is reloaded through
RecBole (its loader fails on torch >= 2.6).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

SEED = 2020
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INTER = ROOT.parent / "shared" / "data" / "raw" / "ml-100k" / "ml-100k.inter"

SETTINGS = {  # everything else is RecBole 1.2.1's default for SASRec on ml-100k
    "MAX_ITEM_LIST_LENGTH": 50, "hidden_size": 32, "inner_size": 64, "n_layers": 2, "n_heads": 2,
    "hidden_dropout_prob": 0.2, "attn_dropout_prob": 0.2, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
    "loss_type": "CE", "train_neg_sample_args": None, "epochs": 6, "train_batch_size": 256, "learning_rate": 0.002,
    "metrics": ["Hit", "NDCG"], "topk": [10], "valid_metric": "NDCG@10", "eval_batch_size": 1024,
    "metric_decimal_place": 6,
}


def main(inter: Path, out_dir: Path) -> None:
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_seed

    torch.set_num_threads(1)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "ml-100k").mkdir()
        shutil.copy(inter, tmp / "ml-100k" / "ml-100k.inter")
        config_dict = {"data_path": str(tmp), "checkpoint_dir": str(tmp / "saved"), "use_gpu": False, "seed": SEED,
                       "reproducibility": True, "state": "ERROR", "show_progress": False, "save_dataset": False,
                       "worker": 0, **SETTINGS}
        config = Config(model="SASRec", dataset="ml-100k", config_dict=config_dict)
        init_seed(config["seed"], config["reproducibility"])
        dataset = create_dataset(config)
        train_data, _valid_data, test_data = data_preparation(config, dataset)
        init_seed(config["seed"] + config["local_rank"], config["reproducibility"])
        model = SASRec(config, train_data.dataset)
        trainer = Trainer(config, model)
        trainer.fit(train_data, valid_data=None, saved=True, show_progress=False)  # saves after every epoch
        shutil.copy(trainer.saved_model_file, out_dir / "sasrec_ml100k.pth")
        result = trainer.evaluate(test_data, load_best_model=False, show_progress=False)
        printed = "    ".join(f"{k} : {v}" for k, v in result.items())
        print(f"RecBole test result: {printed}")
        split = test_split(model, dataset, test_data)
    np.savez_compressed(out_dir / "test_split.npz", **split)
    record = {
        "recbole_test_result": {k: float(v) for k, v in result.items()}, "printed": printed,
        "n_test_users": int(len(split["users"])), "metric_decimal_place": SETTINGS["metric_decimal_place"],
        "dataset": "ml-100k", "inter_sha256": _sha256(inter), "settings": SETTINGS, "seed": SEED,
        "normalize_all": config["normalize_all"], "eval_args": config["eval_args"],
        "versions": {"recbole": __import__("recbole").__version__, "torch": torch.__version__,
                     "numpy": np.__version__, "pandas": __import__("pandas").__version__},
        "made_by": "scripts/make_recbole_ml100k_fixture.py",
    }
    tmp_json = out_dir / ".recbole_eval.json.tmp"
    tmp_json.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    tmp_json.replace(out_dir / "recbole_eval.json")
    print(f"wrote {out_dir}: {len(split['users'])} test users, torch {torch.__version__}")


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_split(model, dataset, test_data) -> dict[str, np.ndarray]:
    """RecBole's test users, inputs, targets (tokens) and the pessimistic rank of each target in its scores."""
    import torch

    uid, iid = dataset.uid_field, dataset.iid_field
    users, inputs, targets, ranks = [], [], [], []
    model.eval()
    with torch.no_grad():
        for interaction, _history, _pos_u, _pos_i in test_data:
            scores = model.full_sort_predict(interaction).view(len(interaction), -1).float()
            scores[:, 0] = -torch.inf  # RecBole's evaluation never ranks the padding item
            items, lengths = interaction[model.ITEM_SEQ], interaction[model.ITEM_SEQ_LEN]
            target = interaction[iid]
            own = scores.gather(1, target.view(-1, 1))
            ranks.extend((scores >= own).sum(1).sub(1).tolist())  # ties count against the target
            for row in range(len(interaction)):
                users.append(dataset.id2token(uid, [int(interaction[uid][row])])[0])
                seq = items[row, : int(lengths[row])].tolist()
                inputs.append(" ".join(dataset.id2token(iid, seq)))
                targets.append(dataset.id2token(iid, [int(target[row])])[0])
    return {"users": np.array(users, dtype=str), "inputs": np.array(inputs, dtype=str),
            "targets": np.array(targets, dtype=str), "ranks": np.array(ranks, dtype=np.int64)}


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inter", type=Path, default=DEFAULT_INTER, help="RecBole's ml-100k.inter")
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "recbole_ml100k")
    args = p.parse_args()
    if not args.inter.is_file():
        sys.exit(f"{args.inter}: not found (RecBole's dataset/ml-100k/ml-100k.inter; see ../shared/data)")
    main(args.inter, args.out)
