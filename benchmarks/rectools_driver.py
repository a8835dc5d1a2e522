"""Time RecTools 0.19's SASRec training epochs (run with the RecTools venv's python, started by run.py).

    RECTOOLS_PYTHON benchmarks/rectools_driver.py BEAUTY_TXT JSON_ARGS

BEAUTY_TXT has one user per line, ``user item item ...`` oldest first (BSARec's Beauty.txt); ``max_users`` in
the arguments keeps the first N lines. Leave-one-out as resdom's split: RecTools fits on each user's items but
the last two; the test input is every item but the last, the target the last (full ranking over the model's
items, the input's items filtered: ``recommend(filter_viewed=True)``). Settings mirror resdom's side of the
comparison: d 64, 2 blocks, 2 heads, dropout 0.5, session_max_len 50, batch 256, Adam lr 1e-3, RecTools'
default ``softmax`` loss (full-catalogue CE at every position of a user's window, one sample per user), id
embeddings only. Each training epoch is timed by a Lightning callback (epoch start to epoch end, data loading
included, as resdom's epoch). ``"valid_each_epoch": true`` adds, after every epoch (untimed), HR@10 / NDCG@10
of each user's second-to-last item given the training part, computed from RecTools' own torch model on its
own recommend batches, full ranking over its items with the input's items filtered. Prints one JSON line.
``"budget_s": S``: no epoch starts once the timed epochs sum to S seconds (``tasks.within_budget``).
``"save_dir": DIR``: after every epoch (untimed) Lightning's checkpoint of the model (``trainer.save_checkpoint``,
what ``model.save`` embeds as its ``fitted_checkpoint``) is written to DIR/epoch-K.ckpt, the file
``resdom import-rectools`` reads; each record names its file under ``"checkpoint"``.

``"batches": k`` instead: interleaved rounds (``tasks.Rounds``, driven by run.py): when Lightning starts
training (data and model prepared) it prints ``{"ready": true, ...}``; a callback then times k training batches
per round, each round started by a ``round`` line on stdin, one JSON line per round, Lightning's own loop
running epoch after epoch until ``stop``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks import Phase, Rounds, report_epoch, set_threads, within_budget  # noqa: E402  (numpy/torch only: importable in the RecTools venv)


def read_beauty(path: str, max_users: int | None):
    import pandas as pd

    users, items = [], []
    with open(path) as f:
        for n, line in enumerate(f):
            if max_users is not None and n >= max_users:
                break
            user, *seq = line.split()
            users += [user] * len(seq)
            items += seq
    df = pd.DataFrame({"user_id": users, "item_id": items, "weight": 1.0})
    df["datetime"] = pd.to_datetime(np.arange(len(df)), unit="s")  # file order = time order
    df["pos_from_end"] = df.groupby("user_id", sort=False).cumcount(ascending=False)
    return df


def rectools_valid(model, torch_model, dataset, valid, batch_size: int = 256) -> dict:  # noqa: ANN001
    """HR@10 / NDCG@10 of ``valid`` (one target per user) from RecTools' torch model on its recommend batches
    of ``dataset`` (each user's training part): full ranking over the model's items, the input's items filtered
    (all of them, as ``recommend(filter_viewed=True)``), pessimistic ties. A target the model does not know is a
    miss. Checked against ``recommend`` on the ml-100k fixture of tests/fixtures/rectools (the same HR / NDCG)."""
    import torch

    prep = model.data_preparator
    users = valid["user_id"].to_numpy()
    data = prep.transform_dataset_u2i(dataset, users)
    ids = prep.item_id_map
    known = set(prep.get_known_item_ids().tolist())
    target = dict(zip(valid["user_id"], valid["item_id"]))
    order = data.user_id_map.get_external_sorted_by_internal()
    seen = data.get_user_item_matrix(include_weights=False).tocsr()  # every item of the input, as filter_viewed
    was_training = torch_model.training
    torch_model.eval()
    ranks, start = [], 0
    with torch.no_grad():
        for batch in prep.get_dataloader_recommend(data, batch_size):
            x = batch["x"]
            logits = torch_model(batch)
            scores = (logits[:, -1] if logits.dim() == 3 else logits).clone()
            scores[:, : prep.n_item_extra_tokens] = -torch.inf
            for row, user in enumerate(order[start : start + len(x)]):
                scores[row, seen.indices[seen.indptr[start + row] : seen.indptr[start + row + 1]]] = -torch.inf
                t = target[user]
                if t not in known:
                    ranks.append(10**9)
                    continue
                s = scores[row, int(ids.convert_to_internal([t])[0])]
                ranks.append(int((scores[row] >= s).sum()))
            start += len(x)
    torch_model.train(was_training)
    r = np.asarray(ranks)
    return {"n_users": len(r), "metrics": {"HR@10": float((r <= 10).mean()),
                                           "NDCG@10": float(np.where(r <= 10, 1 / np.log2(r + 1), 0).mean())}}


def main(beauty: str, args: dict) -> dict:
    import pytorch_lightning as pl
    import rectools
    import torch
    from rectools.dataset import Dataset
    from rectools.models import SASRecModel
    from rectools.models.nn.item_net import IdEmbeddingsItemNet

    out: dict = {"rectools": rectools.__version__, "torch": torch.__version__, "lightning": pl.__version__}
    out["threads"] = set_threads(args.get("threads"))
    pl.seed_everything(int(args.get("seed", 17)), verbose=False)
    with Phase() as prep:
        df = read_beauty(beauty, args.get("max_users"))
        train = df[df["pos_from_end"] >= 2].drop(columns="pos_from_end")
        history = df[df["pos_from_end"] >= 1].drop(columns="pos_from_end")
        test = df[df["pos_from_end"] == 0]
        valid = df[df["pos_from_end"] == 1]
        dataset = Dataset.construct(train)
    out["prepare"] = prep.to_dict()

    epochs = int(args.get("epochs", 1))
    budget = args.get("budget_s")  # training seconds: no epoch starts once the epochs so far reach it
    records: list[dict] = []

    class EpochTimer(pl.Callback):
        def on_train_epoch_start(self, trainer, module) -> None:  # noqa: ANN001
            self.phase = Phase().__enter__()

        def on_train_epoch_end(self, trainer, module) -> None:  # noqa: ANN001
            self.phase.__exit__(None, None, None)
            loss = trainer.callback_metrics.get("train_loss")
            records.append({"epoch": len(records) + 1, "loss": None if loss is None else round(float(loss), 4),
                            **self.phase.to_dict()})
            report_epoch("RecTools", records, budget)
            if not within_budget(records, budget):
                trainer.should_stop = True

    class ValidMetrics(pl.Callback):
        def on_train_epoch_end(self, trainer, module) -> None:  # noqa: ANN001
            records[-1]["valid"] = rectools_valid(model, module.torch_model, dataset, valid)

    class SaveEachEpoch(pl.Callback):
        def on_train_epoch_end(self, trainer, module) -> None:  # noqa: ANN001
            path = Path(args["save_dir"]) / f"epoch-{len(records)}.ckpt"
            path.parent.mkdir(parents=True, exist_ok=True)
            trainer.save_checkpoint(str(path))
            records[-1]["checkpoint"] = str(path)

    rounds = Rounds(int(args["batches"])) if args.get("batches") else None

    class RoundTimer(pl.Callback):
        """Interleaved rounds: k of Lightning's training batches per round (data loading included)."""

        def on_train_start(self, trainer, module) -> None:  # noqa: ANN001
            rounds.ready(library="RecTools", params=sum(p.numel() for p in module.torch_model.parameters()), **out)
            if not rounds.start():
                trainer.should_stop = True

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
            size = len(batch["x"]) if isinstance(batch, dict) else len(batch)
            if not rounds.batch_done(size):
                trainer.should_stop = True

    if rounds is not None:
        epochs = -1  # Lightning's "no limit": the parent's stop ends training
        callbacks: list = [RoundTimer()]
    else:
        callbacks = [EpochTimer()] + ([ValidMetrics()] if args.get("valid_each_epoch") else []) + \
            ([SaveEachEpoch()] if args.get("save_dir") else [])
    model = SASRecModel(n_blocks=2, n_heads=2, n_factors=64, dropout_rate=0.5, session_max_len=int(args.get(
        "max_len", 50)), batch_size=256, lr=1e-3, loss="softmax", epochs=max(epochs, 1),
        item_net_block_types=(IdEmbeddingsItemNet,), recommend_torch_device="cpu", dataloader_num_workers=0,
        deterministic=False)
    model._trainer = pl.Trainer(max_epochs=epochs, min_epochs=None if rounds or budget else epochs,  # noqa: SLF001
                                enable_progress_bar=False, enable_model_summary=False, logger=False,
                                enable_checkpointing=False, accelerator="cpu", devices=1, callbacks=callbacks)
    t0 = time.perf_counter()
    model.fit(dataset)
    if rounds is not None:
        return {"done": True, "rounds": rounds.round}
    out["fit_seconds"] = round(time.perf_counter() - t0, 3)
    n_samples = len(model.data_preparator.train_dataset.user_id_map.external_ids)  # one window per user
    for r in records:
        r["samples"] = n_samples
        r["samples_per_s"] = round(n_samples / r["seconds"], 1)
    out["epochs"] = records
    out["params"] = sum(p.numel() for p in model.lightning_model.torch_model.parameters())
    out["data"] = {"users": int(df["user_id"].nunique()), "items": int(df["item_id"].nunique()),
                   "train_interactions": len(train), "train_samples": n_samples,
                   "model_items": len(model.data_preparator.get_known_item_ids())}
    if args.get("evaluate"):
        t0 = time.perf_counter()
        users = test["user_id"].to_numpy()
        reco = model.recommend(users=users, dataset=Dataset.construct(history), k=10, filter_viewed=True)
        target = dict(zip(test["user_id"], test["item_id"]))
        hits = reco[reco["item_id"] == reco["user_id"].map(target)]
        n = len(users)
        out["test"] = {"n_users": n, "metrics": {
            "HR@10": len(hits) / n, "NDCG@10": float((1.0 / np.log2(hits["rank"].to_numpy() + 1)).sum() / n)},
            "seconds": round(time.perf_counter() - t0, 3)}
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} BEAUTY_TXT JSON_ARGS")
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))), flush=True)
