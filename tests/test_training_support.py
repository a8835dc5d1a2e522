"""Tiny synthetic splits shared by the training tests (imported as ``test_training_support``)."""

from __future__ import annotations

import numpy as np

from resdom.data.sequences import EvalSet, Sequences, SplitData


def toy_split(n_users: int = 120, n_items: int = 40, seed: int = 0, min_len: int = 4, max_len: int = 16) -> SplitData:
    """LOO split of arithmetic sequences (next = item + 3 mod n): learnable, so metrics move with training."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n_users):
        length = int(rng.integers(min_len, max_len + 1))
        start = int(rng.integers(0, n_items))
        seqs.append([(start + 3 * i) % n_items + 1 for i in range(length)])
    train = Sequences.from_lists([s[:-2] for s in seqs])
    valid = EvalSet(Sequences.from_lists([s[:-2] for s in seqs]), [s[-2] for s in seqs])
    test = EvalSet(Sequences.from_lists([s[:-1] for s in seqs]), [s[-1] for s in seqs])
    return SplitData(train, valid, test, n_items, {"source": "toy", "seed": seed, "protocol": "loo"})


def test_toy_split_is_loo() -> None:
    split = toy_split(n_users=5, n_items=10)
    assert len(split.train) == len(split.valid) == len(split.test) == 5
    for u in range(5):
        assert split.test.inputs.sequence(u).tolist() == split.valid.inputs.sequence(u).tolist() + [
            int(split.valid.targets[u])
        ]
    assert split.train.items.min() >= 1 and split.train.items.max() <= 10
