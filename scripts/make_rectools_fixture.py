"""Make tests/fixtures/rectools/: tiny RecTools 0.19 SASRec and BERT4Rec models trained by RecTools itself on ml-100k.

Run with the RecTools venv (scripts/make_rectools_venv.sh), one thread:

    OMP_NUM_THREADS=1 benchmarks/.rectools-venv/bin/python scripts/make_rectools_fixture.py [ML100K_INTER]

Data: ``../shared/data/raw/ml-100k/ml-100k.inter`` (RecBole's atomic file); each user's interactions sorted by
timestamp with a stable sort (equal times keep file order, as RecTools' own data preparator and resdom do), the
last one held out; RecTools fits on the rest. Scores and metrics are then computed on the split resdom's
importer makes: interactions with items the model does not know dropped, each user's last one held out.

Writes, per model (``sasrec``, ``bert4rec``):

- ``<model>.rectools``: ``model.save(...)``, RecTools' own saving format (a pickle of the model object that holds
  the Lightning checkpoint bytes);
- ``<model>_scores.npz``: for the first 40 users (in ``users``): RecTools' full-catalogue logits from its own
  torch model on its own recommend batch (``logits``, columns = ``item_ids``, RecTools' external ids of its
  internal ids, extra tokens included), the input RecTools read (``inputs``, external ids, left-padded with -1),
  and ``recommend(k=10, filter_viewed=False)``'s items and scores (``reco_items``, ``reco_scores``);
- ``<model>_eval.json``: HR@10 / NDCG@10 of ``recommend(k=10, filter_viewed=True)`` on every user's held-out item.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "rectools"
DEFAULT_INTER = ROOT.parent / "shared" / "data" / "raw" / "ml-100k" / "ml-100k.inter"
N_USERS = 40


def read_interactions(path: Path) -> pd.DataFrame:
    """The file's interactions in stable time order (RecTools' columns)."""
    df = pd.read_csv(path, sep="\t")
    df.columns = [c.split(":")[0] for c in df.columns]
    df = df.rename(columns={"user_id": "user_id", "item_id": "item_id"})
    df = df.sort_values("timestamp", kind="stable").reset_index(drop=True)
    df = pd.DataFrame({"user_id": df["user_id"].astype(np.int64), "item_id": df["item_id"].astype(np.int64),
                       "weight": 1.0, "datetime": pd.to_datetime(df["timestamp"], unit="s"),
                       "order": np.arange(len(df))})
    return df


def loo(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(history, held-out last interaction of each user) of time-ordered ``df``."""
    last = df.groupby("user_id", sort=False)["order"].transform("max") == df["order"]
    return df[~last].drop(columns="order").reset_index(drop=True), df[last].drop(columns="order")


def make(kind: str, df: pd.DataFrame) -> None:
    import pytorch_lightning as pl
    from rectools.dataset import Dataset
    from rectools.models import BERT4RecModel, SASRecModel
    from rectools.models.nn.item_net import IdEmbeddingsItemNet

    pl.seed_everything(17, workers=True)
    common = dict(n_blocks=2, n_heads=2, n_factors=16, dropout_rate=0.2, session_max_len=20, epochs=2,
                  batch_size=128, lr=1e-3, loss="softmax", item_net_block_types=(IdEmbeddingsItemNet,),
                  deterministic=True, recommend_torch_device="cpu", dataloader_num_workers=0)
    if kind == "sasrec":
        model = SASRecModel(**common)
    else:
        model = BERT4RecModel(**common, mask_prob=0.2)
    train, _ = loo(df)
    model.fit(Dataset.construct(train))
    model.save(OUT / f"{kind}.rectools")
    # the test split resdom's importer makes: interactions with items the model does not know dropped (as
    # RecTools' recommend does), then each user's last interaction held out
    known = set(model.data_preparator.get_known_item_ids().tolist())
    history, test = loo(df[df["item_id"].isin(known)])
    dataset = Dataset.construct(history)

    users = dataset.user_id_map.external_ids[:N_USERS]
    sub = Dataset.construct(history[history["user_id"].isin(users)])
    # RecTools' own recommend batch and its torch model's logits on it
    prepared = model.data_preparator.transform_dataset_u2i(sub, users)
    loader = model.data_preparator.get_dataloader_recommend(prepared, batch_size=len(users))
    batch = next(iter(loader))
    torch_model = model.lightning_model.torch_model.eval()
    with torch.no_grad():
        logits = torch_model(batch).numpy()
    if logits.ndim == 3:
        logits = logits[:, -1]
    item_ids = model.data_preparator.item_id_map.get_external_sorted_by_internal()
    rec_users = prepared.user_id_map.get_external_sorted_by_internal()  # the loader's row order
    x = batch["x"].numpy()
    n_extra = model.data_preparator.n_item_extra_tokens
    ext = np.array([-1 if i < n_extra else int(item_ids[i]) for i in range(len(item_ids))])
    inputs = np.where(x > 0, ext[x], -1)
    reco = model.recommend(users=rec_users, dataset=dataset, k=10, filter_viewed=False)
    reco = reco.sort_values(["user_id", "rank"])
    by_user = {u: g for u, g in reco.groupby("user_id")}
    reco_items = np.stack([by_user[u]["item_id"].to_numpy(np.int64) for u in rec_users])
    reco_scores = np.stack([by_user[u]["score"].to_numpy(np.float32) for u in rec_users])
    np.savez_compressed(OUT / f"{kind}_scores.npz", users=np.asarray(rec_users, dtype=np.int64), logits=logits,
                        item_ids=np.array([str(i) for i in item_ids]), inputs=inputs, reco_items=reco_items,
                        reco_scores=reco_scores)

    # RecTools' own test HR@10 / NDCG@10 (seen items filtered) on every user's held-out item
    full = model.recommend(users=dataset.user_id_map.external_ids, dataset=dataset, k=10, filter_viewed=True)
    target = dict(zip(test["user_id"], test["item_id"]))
    hits = full[full["item_id"] == full["user_id"].map(target)]
    n = len(target)
    result = {"users": n, "HR@10": float(len(hits) / n),
              "NDCG@10": float((1.0 / np.log2(hits["rank"].to_numpy() + 1)).sum() / n),
              "model": kind, "rectools": __import__("rectools").__version__, "torch": torch.__version__,
              "settings": {k: (v if not isinstance(v, tuple) else [t.__name__ for t in v]) for k, v in common.items()}}
    (OUT / f"{kind}_eval.json").write_text(json.dumps(result, indent=1) + "\n")
    print(kind, {k: result[k] for k in ("users", "HR@10", "NDCG@10")})


def main() -> None:
    torch.set_num_threads(1)
    inter = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_INTER
    OUT.mkdir(parents=True, exist_ok=True)
    df = read_interactions(inter)
    for kind in ("sasrec", "bert4rec"):
        make(kind, df)


if __name__ == "__main__":
    main()
