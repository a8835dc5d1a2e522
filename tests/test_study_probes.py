"""study.probes (questions 1 and 2): the comparison list, its labels known to training, and compare_table on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from resdom.report.compare import compare_table, comparison_markdown
from resdom.report.stats import Margin
from resdom.study.probes import PROBE_MODELS, PROBE_VARIANTS, probe_comparisons, question_comparisons


def test_the_comparison_list() -> None:
    cs = probe_comparisons()
    assert len(cs) == 2 * 2 * 3 * 2
    assert (cs[0].dataset, cs[0].baseline, cs[0].other, cs[0].metric) == ("beauty-ts", "sasrec", "sasrec-query",
                                                                           "NDCG@10")
    assert cs[0].margin == Margin(0.05, relative=True) and cs[1].metric == "HRLI@1"
    assert cs[1].margin == Margin(0.02, relative=False)
    assert {c.other.split("-")[0] for c in cs} == {c.baseline for c in cs} == {"sasrec", "duorec"}
    assert all(c.other.split("-", 1)[0] == c.baseline for c in cs)
    assert {c.dataset for c in cs} == {"beauty-ts", "toys-ts"}
    assert [c.other for c in question_comparisons(1, datasets=["toys-ts"], models=["sasrec"])] == ["sasrec-query"] * 2
    assert {c.other for c in question_comparisons(2)} == {f"{m}-{v}" for m in PROBE_MODELS
                                                           for v in ("untied", "projected")}
    with pytest.raises(ValueError):
        question_comparisons(3)


def test_labels_are_trainable_variants() -> None:
    from resdom.experiments import MODEL_VARIANTS, PROBES

    assert set(PROBE_VARIANTS) == set(PROBES)
    for c in probe_comparisons():
        assert MODEL_VARIANTS[c.other][0] == c.baseline


def test_compare_table_runs_on_the_list(tmp_path: Path) -> None:
    from tests.test_report_compare import write_users

    rng = np.random.default_rng(0)
    store = tmp_path / "results"
    for label, hrli in [("sasrec", 0.8), ("sasrec-query", 0.05)]:
        for s in (1, 2, 3):
            last = np.where(rng.random(300) < hrli, 1, 5)
            write_users(store / "beauty-ts" / label / f"seed{s}" / "users.npz", rng.integers(1, 40, 300), last)
    cs = question_comparisons(1, datasets=["beauty-ts"], models=["sasrec"])
    table = compare_table(store, cs, n_boot=300)
    hrli = table.rows[1]
    assert hrli.comparison.metric == "HRLI@1" and hrli.verdict == "lower"
    assert hrli.diff.estimate == pytest.approx(hrli.other_mean - hrli.baseline_mean)
    assert "sasrec-query vs sasrec" in comparison_markdown(table)
