"""Metamorphic invariances across the pipeline: change what must not matter (the file format, the column order,
the row order where ties are broken by item, a relabelling of the ids, the batch size, the users' order, a subset of
the users, one request against many) and check that what comes out is the same, bit for bit where the code is
exact (spec §1, §3; docs/spec.md "Recommendations")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resdom
from resdom.data.prepare import prepare_split
from resdom.data.sequences import EvalSet, SplitData
from resdom.errors import ResdomError
from resdom.models import build_model
from resdom.models.config import make_model_config
from resdom.recommend import recommend

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def interactions(draw) -> pd.DataFrame:
    """A few users with 3..9 interactions each, item ids 1..30, times from a small range (many equal times)."""
    n_users = draw(st.integers(5, 12))
    rows = []
    for u in range(n_users):
        length = draw(st.integers(3, 9))
        items = draw(st.lists(st.integers(1, 30), min_size=length, max_size=length))
        times = draw(st.lists(st.integers(0, 15), min_size=length, max_size=length))
        rows += [(10 + 3 * u, i, t) for i, t in zip(items, times)]
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"])


def canonical(split: SplitData, user=str, item=str) -> dict[str, dict]:
    """Every part in external ids (mapped by ``user`` / ``item``): train {user: items}, valid and test {user:
    (input items, target)}."""
    ul, il = split.user_labels, split.item_labels
    out: dict[str, dict] = {"train": {user(ul[u]): [item(il[i]) for i in split.train.sequence(r)]
                                      for r, u in enumerate(split.train.users)}}
    for part in ("valid", "test"):
        ev = getattr(split, part)
        out[part] = {user(ul[u]): ([item(il[i]) for i in ev.inputs.sequence(r)], item(il[ev.targets[r]]))
                     for r, u in enumerate(ev.inputs.users)}
    return out


def split_or_none(source, protocol: str, **options) -> SplitData | None:
    """The split, or None where it leaves a part empty (a few users' times can put nothing after T_test): then every
    form of the same rows must leave it empty too."""
    try:
        return prepare_split(source, protocol, **options)
    except ResdomError as e:
        assert "leaves no" in str(e), e
        return None


def arrays(split: SplitData) -> list[np.ndarray]:
    return [split.train.offsets, split.train.items, split.train.users,
            *[a for p in (split.valid, split.test) for a in (p.inputs.offsets, p.inputs.items, p.inputs.users,
                                                              p.targets)]]


@pytest.mark.parametrize("protocol", ["gts", "loo"])
@SETTINGS
@given(df=interactions())
def test_every_file_form_of_the_same_rows_gives_the_same_arrays(tmp_path: Path, protocol: str,
                                                                df: pd.DataFrame) -> None:
    """CSV, TSV, Parquet, gzip'd CSV, columns reordered with an extra one, and the DataFrame itself: one split."""
    ref = split_or_none(df, protocol)
    forms = {"a.csv": lambda p: df.to_csv(p, index=False),
             "a.tsv": lambda p: df.to_csv(p, index=False, sep="\t"),
             "a.parquet": lambda p: df.to_parquet(p, index=False),
             "a.csv.gz": lambda p: df.to_csv(p, index=False, compression="gzip"),
             "b.csv": lambda p: df.assign(note="x")[["timestamp", "note", "item_id", "user_id"]].to_csv(p, index=False)}
    for name, write in forms.items():
        path = tmp_path / name
        write(path)
        got = split_or_none(str(path), protocol)
        if ref is None or got is None:
            assert ref is got, name
            continue
        assert all(np.array_equal(a, b) for a, b in zip(arrays(got), arrays(ref))), name
        assert got.manifest["counts"] == ref.manifest["counts"], name
        assert got.user_labels.tolist() == ref.user_labels.tolist(), name
        assert got.item_labels.tolist() == ref.item_labels.tolist(), name


@pytest.mark.parametrize("protocol", ["gts", "loo"])
@SETTINGS
@given(df=interactions(), seed=st.integers(0, 2**32 - 1))
def test_row_order_and_id_spelling_do_not_change_the_split(protocol: str, df: pd.DataFrame, seed: int) -> None:
    """With equal times ordered by item (ties='item'), the rows in any order give the same split; ids relabelled by a
    permutation give it up to the relabelling (file order kept: equal times keep it); zero-padded ids of one width
    (text order = number order) give it up to the spelling."""
    rng = np.random.default_rng(seed)
    first = split_or_none(df, protocol, ties="item")
    if first is None:  # too few users for this protocol: so for every form (the other test checks that)
        return
    ref = canonical(first)
    shuffled = df.iloc[rng.permutation(len(df))]
    assert canonical(prepare_split(shuffled, protocol, ties="item")) == ref
    padded = df.assign(user_id=df.user_id.map("{:06d}".format), item_id=df.item_id.map("{:06d}".format))
    assert canonical(prepare_split(padded, protocol, ties="item"), lambda u: str(int(u)), lambda i: str(int(i))) == ref
    users, items = np.unique(df.user_id), np.unique(df.item_id)
    new_user = dict(zip(users.tolist(), (rng.permutation(len(users)) + 500).tolist()))
    new_item = dict(zip(items.tolist(), (rng.permutation(len(items)) + 900).tolist()))
    back_user, back_item = {str(v): str(k) for k, v in new_user.items()}, {str(v): str(k) for k, v in new_item.items()}
    relabelled = df.assign(user_id=df.user_id.map(new_user), item_id=df.item_id.map(new_item))
    plain = canonical(prepare_split(df, protocol))  # equal times in file order, as the relabelled rows keep it
    assert canonical(prepare_split(relabelled, protocol), lambda u: back_user[str(u)],
                     lambda i: back_item[str(i)]) == plain


# ----------------------------------------------------------------------------- evaluation and recommendations

@pytest.fixture(scope="module")
def fitted() -> resdom.Fitted:
    rng = np.random.default_rng(3)
    rows = [(f"u{u:02d}", f"i{int(rng.integers(40))}", t) for u in range(60) for t in range(int(rng.integers(3, 12)))]
    split = prepare_split(pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]), "loo")
    torch.manual_seed(0)
    cfg = make_model_config(name="sasrec", n_items=split.n_items, hidden=16, layers=2, max_len=6, dropout=0.0,
                            heads=2, attn_dropout=0.0)
    return resdom.Fitted(build_model(cfg).eval(), split, cfg, None)


def test_evaluation_ignores_batch_size_user_order_and_subsets(fitted: resdom.Fitted) -> None:
    """Per-user rows and beyond-accuracy values equal at batch sizes 1, 7 and 512; the users reversed give the same
    rows reversed; a subset's metrics are the per-user table restricted to it, averaged."""
    split = fitted.split
    full = resdom.evaluate(fitted, beyond=True, batch_size=512, device="cpu")
    for batch in (1, 7):
        got = resdom.evaluate(fitted, beyond=True, batch_size=batch, device="cpu")
        pd.testing.assert_frame_equal(got.users, full.users)
        assert got.metrics == full.metrics
    index = np.arange(len(split.test))[::-1].copy()
    reversed_set = EvalSet(split.test.inputs.take(index), split.test.targets[index])
    got = resdom.evaluate(fitted.model, reversed_set, batch_size=7, device="cpu")  # a bare EvalSet: internal ids
    assert got.users["user_id"].tolist() == split.test.inputs.users[index].tolist()
    same = [c for c in got.users.columns if c not in ("user_id", "item_id")]
    pd.testing.assert_frame_equal(got.users[same].iloc[::-1].reset_index(drop=True), full.users[same])
    subset = split.test.subset(17, seed=4)
    part = resdom.evaluate(fitted.model, SplitData(split.train, split.valid, subset, split.n_items, split.manifest,
                                                   split.user_labels, split.item_labels), beyond=True, device="cpu")
    rows = full.users[full.users.user_id.isin(part.users.user_id)]
    for name, value in part.metrics.items():
        if not name.startswith("Coverage"):  # a set's share of the catalogue, not a mean over users
            assert value == pytest.approx(rows["RR" if name == "MRR" else name].mean(), abs=1e-12), name


def test_recommendations_ignore_who_else_is_asked_for(fitted: resdom.Fitted) -> None:
    """A user's list alone, among a reversed subset, at batch sizes 1 and 7, and as a session of the same history:
    the same items in the same ranks (scores to float tolerance: BLAS sums another batch in another order)."""
    split = fitted.split
    every = fitted.recommend(k=5, batch_size=512)
    users = [str(u) for u in split.user_labels[split.history().users[:12]]]
    history = split.history()
    sessions = {str(split.user_labels[u]): [split.item_labels[i] for i in history.sequence(r)]
                for r, u in enumerate(history.users[:12])}
    mine = every[every.user_id.isin(users)].reset_index(drop=True)
    asked = [pd.concat([fitted.recommend(users=[u], k=5) for u in users]).reset_index(drop=True),
             fitted.recommend(users=users[::-1], k=5).set_index("user_id").loc[users].reset_index(),
             recommend(fitted.model, split, users, k=5, batch_size=1),
             recommend(fitted.model, split, users, k=5, batch_size=7),
             fitted.recommend(sequences=sessions, k=5)]
    for got in asked:
        assert got[["user_id", "item_id", "rank"]].astype(str).values.tolist() == \
            mine[["user_id", "item_id", "rank"]].astype(str).values.tolist()
        assert np.allclose(got["score"], mine["score"], rtol=1e-5, atol=1e-6)
    similar = fitted.similar_items(k=split.n_items)
    pairs = similar.set_index(["target_item_id", "item_id"])["score"]
    swapped = pairs.copy()
    swapped.index = swapped.index.swaplevel()
    assert np.array_equal(pairs.sort_index().to_numpy(), swapped.sort_index().to_numpy())  # cosine is symmetric
