"""study.summary: the "At a glance" lines counted from hand-written blocks in the report's own formats."""

from __future__ import annotations

from resdom.study.summary import (
    claims_line,
    comparisons_line,
    coverage_line,
    dynamics_line,
    echo_line,
    fidelity_line,
    mark_of,
    probe_line,
    published_line,
    remedies_line,
    spread_line,
    summary_markdown,
    table_rows,
    tally,
)

CLAIMS = """| Data set | Model | Seeds | Attn 0.72-0.96 | HRLI@1 0.8-0.9 |
|---|---|---|---|---|
| a | sasrec | 3 | 0.804 ✓ | 0.830 / 0.002 ✓ |
| a | duorec | 1 seed | 0.700 ✗ | 0.821 / 0.002 ✓ |
| b | sasrec | 3 | 0.700 ✗ | – |
| c | sasrec | 1 seed | 0.800 ✓ | 0.500 / 0.010 ✗ |
"""

FIDELITY = """caption line

| data set (paper's) | seeds | Attn | HRLI@1 |
|---|---|---|---|
| a (A) | 3 | 0.804 [0.801, 0.808] vs 0.776 (+0.028) ✗ | 0.830 [0.825, 0.836] vs ~0.780 (+0.050) ✗ |
| b (B) | 3 | 0.793 [0.787, 0.799] vs 0.795 (-0.002) ✓ | 0.566 [0.559, 0.572] (paper: —) |
| m (M): not comparable (a part) | 3 | 0.884 [0.870, 0.898] vs 0.856 (+0.028) ✗ | 0.430 vs ~0.500 (-0.070) ✗ |
| Z: not held here | — | paper 0.941 | — |

Published values outside resdom's 95% interval: ...
"""

COMPARISONS = """| Data set | Comparison | Metric | Model: store mean | sasrec: store mean | Difference [95% CI] \
| Verdict |
|---|---|---|---|---|---|---|
| a | x vs sasrec | NDCG@10 | 1 | 2 | no per-user evidence (retrain or re-diagnose: ...): a/x/seed1 | undecided |
| a | x vs sasrec | HRLI@1 | 1 | 2 | -0.1 [-0.2, -0.05] (Holm p 0.01) | lower |
| b | y vs sasrec | NDCG@10 | 1 | 2 | +0.1 [+0.05, +0.2] (Holm p 0.01) | higher |
| b | y vs sasrec | HRLI@1 | 1 | 2 | +0.0 [-0.01, +0.01] (Holm p 1.0) | equivalent |
| b | z vs sasrec | HRLI@1 | 1 | 2 | +0.0 [-0.1, +0.1] (Holm p 1.0) | undecided |
| b | w vs sasrec | HRLI@1 | 1 | 2 | +0.0 [-0.1, +0.1] (Holm p 1.0; seeds 1 / 3) | undecided |
| b | v vs sasrec | HRLI@1 | 1 | 2 | +0.0 [-0.1, +0.1] (Holm p 1.0; seeds 3 / 1) | undecided |
| b | u vs sasrec | HRLI@1 | 1 | 2 | -0.5 [-0.6, -0.4] (Holm p 0.01; seeds 1 / 3) | lower |
| b | t vs sasrec | HRLI@1 | 1 | 2 | +0.0 [-0.1, +0.1] (Holm p 1.0; seeds 11 / 3) | undecided |

Difference: ...
"""

REMEDIES = """| Data set | Variant | Test NDCG@10: store mean | HRLI@1: store mean \
| NDCG@10: verdict, difference [95% CI] | HRLI@1: verdict, difference [95% CI] | Higher NDCG@10 at lower HRLI@1? |
|---|---|---|---|---|---|---|
| a | v1 | m | m | undecided: no per-user evidence (...): a/v1/seed1 | undecided | undecided |
| a | v2 | m | m | higher, +0.001 [...] | lower, -0.6 [...] | yes |
| b | v1 | m | m | equivalent, +0.0 [...] | undecided, +0.0 [...] | no |
"""

PROBE = """| Data set | Comparison | Metric | Probe: store mean | Base: store mean | Difference [95% CI] | Verdict |
|---|---|---|---|---|---|---|
| a | q vs sasrec | NDCG@10 | – | 1 | not trained yet (no cells of q on a) | undecided |
| a | q vs sasrec | HRLI@1 | – | 1 | not trained yet (no cells of q on a) | undecided |
| b | q vs sasrec | NDCG@10 | 1 | 1 | no per-user evidence (...): b/sasrec/seed1 | undecided |
| b | q vs sasrec | HRLI@1 | 1 | 1 | -0.8 [-0.9, -0.7] (Holm p ≤0.004) | lower |

note

| Data set | Probe / base | +Res (all): probe / base |
|---|---|---|
| b | q / sasrec | 0.3 / 0.1 |

Answer, generated from the verdicts: ...
"""

ECHO = """Per-user evidence exists today for 3 of the 4 stored model cells; ...

| data set | model | seeds | users: echo / others | verdict |
|---|---|---|---|---|
| a | sasrec | 3 | 1 / 2 | lower |
| a | duorec | 1 seed | 1 / 2 | undecided (no stratum holds both groups in a seed) |
| b | sasrec | 3 | 1 / 2 | equivalent |
"""

DYNAMICS = """Question 4 ...

| cells | scope | lag | verdict |
|---|---|---|---|
| 3 | a / sasrec | +1.0 | too few cells (3 < 5) |
| 36 | all data sets / base models | -3.1 | undecided |
| 88 | all data sets / all models | -1.4 | keeps rising (> 0.01) |

Answer, generated from the table: ...
"""

SPREAD = """caption

| scope | seeds | widening |
|---|---|---|
| a / sasrec | 3 | +0.1 |

| scope | groups | widening [95% CI] | verdict |
|---|---|---|---|
| all data sets / base models | 20 | +0.066 [+0.018, +0.140] | the selected epoch widens the spread |
| all data sets / all models | 45 | +0.038 [-0.011, +0.105] | undecided |
"""


def test_table_rows_reads_every_table_and_skips_the_rules() -> None:
    rows = table_rows(PROBE)
    assert len(rows) == 5 and rows[0]["Difference [95% CI]"].startswith("not trained yet")
    assert rows[-1] == {"Data set": "b", "Probe / base": "q / sasrec", "+Res (all): probe / base": "0.3 / 0.1"}
    assert table_rows("no table here\n") == []


def test_tally_orders_the_verdicts_and_counts_the_others() -> None:
    assert tally(["undecided", "lower", "lower", "odd"]) == "2 lower, 1 undecided, 1 odd"
    assert tally([]) == "none"


def test_claims_line_counts_the_marks_of_one_model() -> None:
    assert claims_line(CLAIMS) == ("The paper's claims on resdom's `sasrec` (`claims` block; data sets where the claim "
                                   "holds): Attn 0.72-0.96: 2 of 3 (not on b); HRLI@1 0.8-0.9: 1 of 2 (not on c).")
    assert "no `bsarec` cell stored" in claims_line(CLAIMS, "bsarec")
    # a claim resting on fewer seeds than its row says (n=k) after its mark (claims_markdown): still marked, still
    # counted (it was left out of the count, "1 of 1" here)
    fewer = CLAIMS.replace("| 0.500 / 0.010 ✗ |", "| 0.500 / 0.010 ✗ (n=1) |")
    fewer = fewer.replace("| 0.804 ✓ |", "| 0.804 ✓ (n=2) |")
    assert claims_line(fewer) == claims_line(CLAIMS)
    assert mark_of("0.804 ✓ (n=2)") == "✓" and mark_of("0.500 ✗") == "✗" and mark_of("0.185 (paper: —) (n=1)") is None


def test_fidelity_line_counts_comparable_values_only() -> None:
    assert fidelity_line(FIDELITY).startswith("Beside the paper's published numbers (`fidelity` block): 2 of 3 "
                                              "distinct published values on comparable data sets lie outside "
                                              "resdom's 95% interval under every same-day ordering held (the "
                                              "sentences")
    early = FIDELITY + "\nThe same for `sasrec-v1024`:\n\n" + "\n".join(FIDELITY.splitlines()[2:6]) + "\n"
    assert "ordering held; with the paper's early stopping, 2 of 3 (the sentences" in fidelity_line(early)
    one_more = ("\nOf the {} distinct published values of comparable data sets with two seeds or more, {} outside "
                "even the 95% prediction interval of one more resdom run under every same-day ordering held (how): "
                "x.\n")
    both = (FIDELITY + one_more.format(3, "1 lies") + "\nThe same for `sasrec-v1024`:\n\n"
            + "\n".join(FIDELITY.splitlines()[2:6]) + "\n" + one_more.format(2, "0 lie"))
    assert ("ordering held, 1 of 3 outside even one more resdom run's 95% prediction interval; with the paper's "
            "early stopping, 2 of 3 and 0 of 2 (the sentences") in fidelity_line(both)
    second_only = early + one_more.format(2, "1 lies")  # the first table has no sentence on one more run
    assert "ordering held; with the paper's early stopping, 2 of 3 and 1 of 2 (the" in fidelity_line(second_only)


def test_fidelity_line_counts_a_cell_over_fewer_seeds() -> None:
    """A fidelity cell over fewer seeds than its row ends "✗ (n=2)" (study.fidelity): its mark counts."""
    marked = [line for line in FIDELITY.splitlines() if line.endswith("✗ |")][0]
    fewer = FIDELITY.replace(marked, marked[:-2] + " (n=2) |")
    assert fidelity_line(fewer) == fidelity_line(FIDELITY)


def test_fidelity_line_counts_a_value_held_under_two_orderings_once() -> None:
    """a and a-ties both cut the paper's A: its Attn is one published value, outside only where it is outside under
    both orderings; its HRLI@1, outside under one only, is not counted outside."""
    ties = ("| a-ties (A) | 3 | 0.800 [0.790, 0.810] vs 0.776 (+0.024) ✗ | 0.800 [0.770, 0.830] vs ~0.780 (+0.020) ✓ "
            "|\n| b (B) | 3 |")
    two = FIDELITY.replace("| b (B) | 3 |", ties)
    assert fidelity_line(two).startswith("Beside the paper's published numbers (`fidelity` block): 1 of 3 distinct "
                                         "published values")


def test_published_line_counts_the_marked_values() -> None:
    md = ("| data set | model | seeds | HR@10 | NDCG@10 |\n|---|---|---|---|---|\n"
          "| a | m | 3 | 0.04 [0.03, 0.05] vs 0.04 (+0.00) ✓ | 0.02 [0.019, 0.021] vs 0.03 (-0.01) ✗ |\n"
          "| b | m | 1 seed | 0.04 vs 0.04 (+0.00) | 0.02 vs 0.03 (-0.01) |\n\ncaption ✓\n")
    assert published_line(md).endswith("block): 1 of 2 published values with an interval to compare lie outside "
                                       "resdom's 95% interval.")


def test_comparisons_line_separates_tested_rows_from_rows_without_evidence() -> None:
    assert comparisons_line(COMPARISONS, "comparisons", "Models") == (
        "Models (`comparisons` block): 8 of 9 comparisons tested on per-user evidence: 2 lower, 1 higher, "
        "1 equivalent, 4 undecided (2 of the undecided with a single seed on a side); 1 wait for evidence.")


def test_remedies_line_counts_the_answers_of_the_tested_variants() -> None:
    assert remedies_line(REMEDIES).endswith("2 of 3 variants tested on per-user evidence: 1 yes, 1 no; "
                                            "1 wait for evidence.")


def test_probe_line_says_untrained_unevidenced_and_tested_apart() -> None:
    assert probe_line(PROBE, "probe_readout", "Q1") == (
        "Q1 (`probe_readout` block): a `q vs sasrec`: NDCG@10 not trained yet, HRLI@1 not trained yet; "
        "b `q vs sasrec`: NDCG@10 no evidence yet, HRLI@1 lower.")


def test_echo_and_dynamics_lines() -> None:
    assert echo_line(ECHO).endswith("3 cells with per-user evidence: 1 lower, 1 equivalent, 1 undecided.")
    assert dynamics_line(DYNAMICS).endswith(
        "block): all data sets / base models: undecided; all data sets / all models: keeps rising.")
    assert dynamics_line("").endswith("block): no monitored curve stored.")
    assert spread_line(SPREAD) == ("Why seeds disagree on HRLI@1 (`seed_spread` block): all data sets / base models: "
                                   "the selected epoch widens the spread; all data sets / all models: undecided.")
    assert spread_line("").endswith("block): no group of seeds stored.")


def test_coverage_line_quotes_the_sentence_over_the_store() -> None:
    md = "| a |\n|---|\n| 1 |\n\nPer-user evidence (users.npz) in 3 of 4 stored cells; more. The queue: `x`.\n"
    assert coverage_line(md) == ("What the verdicts rest on (`coverage` block): Per-user evidence (users.npz) in 3 of "
                                 "4 stored cells; more.")


def test_summary_markdown_is_one_bullet_per_block() -> None:
    blocks = {"coverage": "Per-user evidence (users.npz) in 1 of 2 stored cells.\n", "claims": CLAIMS,
              "fidelity": FIDELITY, "published_accuracy": "", "comparisons": COMPARISONS, "remedy_verdicts": REMEDIES,
              "probe_readout": PROBE, "probe_embeddings": PROBE, "echo": ECHO, "reliance_dynamics": DYNAMICS,
              "seed_spread": SPREAD}
    lines = summary_markdown(blocks).splitlines()
    assert len(lines) == 11 and all(line.startswith("- ") for line in lines)
    assert lines[4] == "- " + comparisons_line(COMPARISONS, "comparisons", "Models against `sasrec`")
