"""How much sequential signal the order of same-day interactions carries (docs/results.md, beauty-ts, sports-ts).

    python scripts/tie_order_check.py [--dataset beauty|sports] [--data-dir ../shared/data/raw]

For ``<dataset>-ts`` (TiCoSeRec's files, same-day items in the order those files give), the review file's order (the
S3-Rec ``bsarec/`` file of the same reviews) and ``<dataset>-ts-itemties`` (same-day items by increasing item
id): how the items of equal-time neighbour pairs are ordered, how many GTS test targets differ, and a last-item
bigram predictor's test HR@10 / NDCG@10 (scores = how often each item followed the last input item in the training
sequences; full ranking, the input's items filtered, ties counted against the target as resdom's evaluation does).
No training; seconds on one core."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from resdom.data.prepare import load_prepared, prepare_split
from resdom.data.sequences import SplitData
from resdom.evaluation.ranking import metrics_from_ranks


def tie_pairs(name: str, data_dir: str) -> tuple[int, int]:
    """(smaller item id first, larger first) over neighbouring equal-time pairs of every user's whole sequence."""
    prepared, _ = load_prepared(name, data_dir)
    seqs = prepared.sequences
    user = np.repeat(np.arange(len(seqs)), seqs.lengths)
    tied = (user[1:] == user[:-1]) & (seqs.times[1:] == seqs.times[:-1])
    step = np.diff(seqs.items)
    return int((tied & (step > 0)).sum()), int((tied & (step < 0)).sum())


# data set -> (S3-Rec review-order file, timestamped item file, its time file), under the data directory
FILES = {
    "beauty": ("bsarec/Beauty.txt", "amazon-beauty-ts/Beauty_item_org_rank.txt",
               "amazon-beauty-ts/Beauty_time_org_rank.txt"),
    "sports": ("bsarec/Sports_and_Outdoors.txt", "amazon-sports-ts/Sports_item_org_rank.txt",
               "amazon-sports-ts/Sports_time_org_rank.txt"),
}


def review_file_order(data_dir: str, name: str) -> tuple[int, int, int]:
    """(pairs, smaller timestamped-file id first, larger first) over the equal-time neighbour pairs, in the order
    of the S3-Rec file of the same reviews (its own ids; users on the same lines, items in the same order up to
    same-day ties). Its ids are mapped to the timestamped file's through the positions without a tie."""
    root = Path(data_dir)
    s3, tico, days = ([line.split()[1:] for line in (root / f).read_text().splitlines()] for f in FILES[name])
    to_tico: dict[str, str] = {}
    for a, b, t in zip(s3, tico, days):
        for i in range(len(t)):
            if (i == 0 or t[i] != t[i - 1]) and (i == len(t) - 1 or t[i] != t[i + 1]):  # no tie: same position
                if to_tico.setdefault(a[i], b[i]) != b[i]:
                    raise SystemExit(f"the two {name} files disagree on item {a[i]}: not the same reviews")
    pairs = up = down = 0
    for a, t in zip(s3, days):
        for i in range(1, len(t)):
            if t[i] == t[i - 1] and a[i] in to_tico and a[i - 1] in to_tico:
                pairs += 1
                x, y = int(to_tico[a[i - 1]]), int(to_tico[a[i]])
                up, down = up + (y > x), down + (y < x)
    return pairs, up, down


def bigram_metrics(split: SplitData, chunk: int = 512) -> dict[str, float]:
    """Test HR@10 / NDCG@10 of scores[next] = #(last input item -> next) in the training sequences."""
    n = split.n_items + 1
    counts = np.zeros((n, n), dtype=np.float32)
    train = split.train
    for u in range(len(train)):
        s = train.sequence(u)
        np.add.at(counts, (s[:-1], s[1:]), 1.0)
    ranks = []
    test = split.test
    for start in range(0, len(test), chunk):
        idx = np.arange(start, min(start + chunk, len(test)))
        last = np.array([test.inputs.sequence(u)[-1] for u in idx])
        scores = torch.from_numpy(counts[last].copy())
        scores[:, 0] = -np.inf
        for row, u in enumerate(idx):
            scores[row, torch.from_numpy(test.inputs.sequence(u))] = -np.inf
        target = torch.from_numpy(test.targets[idx].astype(np.int64))
        t = scores.gather(1, target[:, None])
        ranks.append(((scores >= t).sum(1) - 1).clamp_min(0))  # pessimistic: ties count against the target
    m = metrics_from_ranks(torch.cat(ranks), (1, 10))
    return {k: m[k] for k in ("HR@1", "HR@10", "NDCG@10")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="../shared/data/raw")
    p.add_argument("--dataset", choices=sorted(FILES), default="beauty")
    a = p.parse_args()
    names = (f"{a.dataset}-ts", f"{a.dataset}-ts-itemties")
    splits = {name: prepare_split(name, "gts", data_dir=a.data_dir) for name in names}
    base, ordered = splits[names[0]], splits[names[1]]
    print(f"test users {len(base.test):,}; test targets that differ between the two orders: "
          f"{int((base.test.targets != ordered.test.targets).sum()):,}")
    pairs, up, down = review_file_order(a.data_dir, a.dataset)
    print(f"review file order ({FILES[a.dataset][0]}, ids mapped): {pairs:,} equal-time neighbour pairs with both ids "
          f"mapped, smaller timestamped-file id first {up:,}, larger first {down:,}")
    for name, split in splits.items():
        up, down = tie_pairs(name, a.data_dir)
        print(f"{name}: equal-time neighbour pairs, smaller item id first {up:,}, larger first {down:,}")
        m = bigram_metrics(split)
        print(f"{name}: last-item bigram predictor, test " + ", ".join(f"{k} {v:.4f}" for k, v in m.items()))


if __name__ == "__main__":
    main()
