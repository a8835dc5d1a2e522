"""Time RecBole 1.2.1's SASRec training epochs (run with the RecBole venv's python, started by run.py).

    RECBOLE_PYTHON benchmarks/recbole_driver.py DATA_PATH DATASET JSON_ARGS

DATA_PATH/DATASET/DATASET.inter is a RecBole atomic file (user_id:token, item_id:token, timestamp:float).
Settings mirror resdom's side of the comparison: d 64, 2 layers, 2 heads, inner 256, GELU, dropout 0.5 / 0.5,
LayerNorm eps 1e-12, max length 50, CE over all items at the last position with every prefix a sample
(RecBole's data augmentation), Adam lr 1e-3, batch 256, leave-one-out by time, no filtering. Only
``trainer._train_epoch`` is timed (RecBole's checkpoint loading fails on torch >= 2.6; nothing is reloaded).
``"valid_each_epoch": true`` adds RecBole's own validation metrics after every epoch (untimed).
``"budget_s": S``: no epoch starts once the timed epochs sum to S seconds (``tasks.within_budget``).
``"save_dir": DIR``: after every epoch (untimed) the model is saved as RecBole's trainer saves it
(``trainer._save_checkpoint``: config, epoch, state_dict, optimizer) to DIR/epoch-K.pth, the file
``resdom import-recbole`` reads; each record names its file under ``"checkpoint"``. Prints one JSON line.

``"batches": k`` instead: interleaved rounds (``tasks.Rounds``, driven by run.py): after preparation it prints
``{"ready": true, ...}``, then runs ``trainer._train_epoch`` over its own batches, k per round, each round
started by a ``round`` line on stdin, one JSON line per round, epochs following each other until ``stop``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks import Phase, Rounds, report_epoch, set_threads, within_budget  # noqa: E402  (numpy/torch only: importable in the RecBole venv)


def recbole_config(data_path: str, checkpoint_dir: str, args: dict) -> dict:
    return {
        "data_path": data_path, "checkpoint_dir": checkpoint_dir, "use_gpu": False, "seed": args.get("seed", 17),
        "reproducibility": True, "state": "ERROR", "show_progress": False, "save_dataset": False,
        "save_dataloaders": False, "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
        "user_inter_num_interval": "[0,inf)", "item_inter_num_interval": "[0,inf)",
        "MAX_ITEM_LIST_LENGTH": args.get("max_len", 50), "hidden_size": 64, "inner_size": 256, "n_layers": 2,
        "n_heads": 2, "hidden_dropout_prob": 0.5, "attn_dropout_prob": 0.5, "hidden_act": "gelu",
        "layer_norm_eps": 1e-12, "initializer_range": 0.02, "loss_type": "CE", "train_neg_sample_args": None,
        "epochs": args.get("epochs", 1), "train_batch_size": 256, "learning_rate": 1e-3,
        "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "mode": "full", "group_by": "user"},
        "eval_batch_size": 256, "metrics": ["Hit", "NDCG"], "topk": [10], "valid_metric": "NDCG@10",
        "worker": 0,
    }


def main(data_path: str, dataset_name: str, args: dict) -> dict:
    import recbole
    import torch
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_seed

    out: dict = {"recbole": recbole.__version__, "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(model="SASRec", dataset=dataset_name, config_dict=recbole_config(data_path, tmp, args))
        valid_each = bool(args.get("valid_each_epoch"))
        init_seed(config["seed"], config["reproducibility"])
        out["threads"] = set_threads(args.get("threads"))
        with Phase() as prep:
            dataset = create_dataset(config)
            train_data, valid_data, test_data = data_preparation(config, dataset)
        out["prepare"] = prep.to_dict()
        out["data"] = {"users": int(dataset.user_num - 1), "items": int(dataset.item_num - 1),
                       "interactions": int(dataset.inter_num), "train_samples": int(len(train_data.dataset))}
        init_seed(config["seed"], config["reproducibility"])
        model = SASRec(config, train_data.dataset)
        trainer = Trainer(config, model)
        out["params"] = sum(p.numel() for p in model.parameters())
        if args.get("batches"):  # interleaved rounds: RecBole's own epoch loop over its own batches
            rounds = Rounds(int(args["batches"]))
            rounds.ready(library="RecBole", **out)
            epoch = 0
            while not rounds.stopped:
                trainer._train_epoch(rounds.wrap(train_data, len), epoch, show_progress=False)
                epoch += 1
            return {"done": True, "rounds": rounds.round, "epochs_started": epoch}
        records = []
        n = len(train_data.dataset)
        for epoch in range(int(args.get("epochs", 1))):
            with Phase() as ph:
                loss = trainer._train_epoch(train_data, epoch, show_progress=False)
            loss = float(sum(loss)) if isinstance(loss, tuple) else float(loss)
            records.append({"epoch": epoch + 1, "loss_sum": round(loss, 3), "samples": n,
                            "samples_per_s": round(n / ph.seconds, 1), **ph.to_dict()})
            if args.get("save_dir"):  # untimed: the checkpoint the common evaluator scores (run.py's tta section)
                path = Path(args["save_dir"]) / f"epoch-{epoch + 1}.pth"
                path.parent.mkdir(parents=True, exist_ok=True)
                trainer._save_checkpoint(epoch, verbose=False, saved_model_file=str(path))
                records[-1]["checkpoint"] = str(path)
            if valid_each:  # untimed: validation NDCG@10 for the time-to-accuracy curve
                valid = trainer.evaluate(valid_data, load_best_model=False, show_progress=False)
                records[-1]["valid"] = {k: float(v) for k, v in dict(valid).items()}
            report_epoch("RecBole", records, args.get("budget_s"))
            if not within_budget(records, args.get("budget_s")):
                break
        out["epochs"] = records
        if args.get("evaluate"):
            t0 = time.perf_counter()
            result = trainer.evaluate(test_data, load_best_model=False, show_progress=False)
            out["test"] = {"metrics": {k: float(v) for k, v in dict(result).items()},
                           "seconds": round(time.perf_counter() - t0, 3)}
    return out


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(f"usage: {sys.argv[0]} DATA_PATH DATASET JSON_ARGS")
    print(json.dumps(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))), flush=True)
