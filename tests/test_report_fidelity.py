"""The paper side by side (report.fidelity): intervals by hand, a store written here, the table's marks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from resdom.report.fidelity import (
    PAPER_MIXING,
    fidelity_markdown,
    fidelity_rows,
    mean_t,
    pooled_proportion,
    recovery_summary,
)
from resdom.report.stats import wilson


def test_wilson_by_hand():
    lo, hi = wilson(5, 10)  # p = 0.5, z = 1.96: centre 0.5, half 1.96 * sqrt(0.025 + 0.0096) / 1.384
    z = 1.959963984540054
    half = z * math.sqrt(0.25 / 10 + z * z / 400) / (1 + z * z / 10)
    assert lo == pytest.approx(0.5 - half) and hi == pytest.approx(0.5 + half)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)  # the textbook value
    assert wilson(0, 20)[0] == 0.0 and wilson(20, 20)[1] == 1.0


def test_t_interval_by_hand_and_one_seed():
    est = mean_t([1.0, 2.0, 3.0])  # sd 1, t(0.975, 2) = 4.303
    assert est.value == 2.0 and est.hi - 2.0 == pytest.approx(4.303 / math.sqrt(3)) and est.seeds == 3
    one = mean_t([0.5])
    assert one.lo is None and one.covers(0.4) is None and one.text() == "0.500"


def test_pooled_proportion_pools_counts():
    est = pooled_proportion([(3, 10), (7, 10)])
    assert est.value == 0.5 and (est.lo, est.hi) == wilson(10, 20)


def write_cell(root: Path, dataset: str, seed: int, attn: float, hrli: float, n: int, rec: list[float],
               recoverable: int) -> None:
    d = root / dataset / "sasrec" / f"seed{seed}" / "diagnostics"
    d.mkdir(parents=True)
    pooled = {"Attn": attn, "+Res": attn / 6, "+LN": attn / 6}
    (d / "mixing.json").write_text(json.dumps({"pooled": {"all": pooled, "last": pooled}}))
    (d / "hrli.json").write_text(json.dumps({"n_users": n, "values": {"HRLI@1": hrli}}))
    curve = [{"alpha": 1.0 - i / 10, "recovery": r} for i, r in enumerate(rec)]
    (d / "recovery.json").write_text(json.dumps({"test": {"curve": curve, "recoverable": recoverable}}))


def test_rows_from_a_store_and_their_marks(tmp_path):
    write_cell(tmp_path, "beauty-ts", 1, 0.80, 0.80, 100, [0.0, 0.1, 0.25], 40)
    write_cell(tmp_path, "beauty-ts", 2, 0.78, 0.76, 100, [0.0, 0.2, 0.15], 40)
    write_cell(tmp_path, "ml-1m-part", 1, 0.85, 0.5, 50, [0.0, 0.3], 10)
    (tmp_path / "yelp-ts" / "sasrec" / "seed1").mkdir(parents=True)  # not a paper data set: no row
    rows = fidelity_rows(tmp_path)
    assert [r["dataset"] for r in rows] == ["beauty-ts", "ml-1m-part"]
    beauty = rows[0]
    attn, paper = beauty["Attn"]
    assert attn.value == pytest.approx(0.79) and paper == PAPER_MIXING["Beauty"][0] and attn.seeds == 2
    hrli, _ = beauty["HRLI@1"]
    assert hrli.value == pytest.approx(0.78)  # (80 + 76) / 200
    rec, paper_rec = beauty["recovery_max"]
    assert rec.value == pytest.approx((10 + 8) / 80) and paper_rec is None  # the largest of each seed: 0.25, 0.2
    text = fidelity_markdown(rows)
    assert "not comparable" in text and "(1 seed)" in text
    assert "0.790 [" in text and "vs 0.776 (+0.014) ✓" in text  # 0.776 lies inside [0.663, 0.917]
    assert "ml-1m-part" in recovery_summary(rows)  # 0.3 of 10 users is the largest
