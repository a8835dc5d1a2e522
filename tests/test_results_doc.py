"""docs/results.md, docs/remedies.md and docs/results/tables/ are exactly what the committed results store
regenerates."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from resdom.pipeline.store import block_names, fill_blocks, store_cells
from resdom.report import read_runs
from resdom.study import document_blocks

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """scripts/NAME.py loaded as a module, scripts/ on the path (a script imports its siblings, e.g.
    rediagnose_cells)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    spec.loader.exec_module(script)
    return script


DOCUMENTS = ("results.md", "remedies.md")


def missing_blocks(docs: dict[str, str], tables: dict[str, str]) -> list[str]:
    """Problems with the documents' table blocks: every table the report makes is in exactly one document, once,
    and no block names a table the report does not make."""
    found = [(name, block) for name, text in docs.items() for block in block_names(text)]
    where: dict[str, list[str]] = {}
    for name, block in found:
        where.setdefault(block, []).append(name)
    problems = [f"no document holds the {t!r} block" for t in tables if t not in where]
    problems += [f"{block!r} is in {', '.join(names)}" for block, names in where.items() if len(names) > 1]
    return problems + [f"{name}: unknown block {block!r}" for name, block in found if block not in tables]


@pytest.mark.slow  # regenerates every table from the store (the comparisons' bootstraps): about 80 s on one core
def test_committed_tables_equal_what_the_store_regenerates() -> None:
    cells = store_cells(ROOT / "results")
    assert cells, "results/ holds no cell"
    tables = document_blocks(read_runs(cells))
    docs = {name: (ROOT / "docs" / name).read_text() for name in DOCUMENTS}
    assert missing_blocks(docs, tables) == []
    for name, doc in docs.items():
        assert fill_blocks(doc, tables) == doc, f"docs/{name} is stale: rerun the command docs/results.md names"
    for name, text in tables.items():
        committed = ROOT / "docs" / "results" / "tables" / f"{name}.md"
        assert committed.read_text() == text, f"{committed} is stale: rerun the command in docs/results.md"


def test_every_cell_names_one_checkpoint_and_early_stopping_or_its_cap() -> None:
    import json

    for cell in store_cells(ROOT / "results"):
        meta = json.loads((cell / "cell.json").read_text())
        assert meta["stopped"] in ("early_stopping", "max_epochs") and meta["best_epoch"] >= 1, cell
        for path in (cell / "diagnostics").glob("*.json"):
            assert json.loads(path.read_text())["checkpoint"] == meta["checkpoint"], path
        assert json.loads((cell / "metrics.json").read_text())["checkpoint"] == meta["checkpoint"], cell
        assert sum(p.stat().st_size for p in cell.rglob("*") if p.is_file()) < 200_000, cell


def test_deleting_any_table_block_is_caught() -> None:
    """Each whole block deleted from either document (or doubled) is reported."""
    tables = {"accuracy": "", "hrli": "", "remedies": ""}
    block = "<!-- resdom:table {} -->\nx\n<!-- /resdom:table -->\n"
    docs = {"results.md": "# R\n" + block.format("accuracy") + block.format("hrli"),
            "remedies.md": block.format("remedies")}
    assert missing_blocks(docs, tables) == []
    for name, text in docs.items():
        for table in block_names(text):
            cut = re.sub(re.escape(block.format(table)), "", text)
            assert missing_blocks({**docs, name: cut}, tables) == [f"no document holds the {table!r} block"]
    assert missing_blocks({**docs, "remedies.md": docs["remedies.md"] + block.format("hrli")}, tables) == [
        "'hrli' is in results.md, remedies.md"]


def test_the_report_always_makes_the_fidelity_and_question_4_blocks_and_their_deletion_is_caught() -> None:
    """The fidelity and reliance_dynamics blocks are made from any runs (here none of a paper data set and none with
    a monitored curve), so the test above fails when either is deleted from docs/results.md."""
    from resdom.report.collect import find_run_dirs

    tables = document_blocks(read_runs(find_run_dirs(ROOT / "tests" / "fixtures" / "diagnostics")))
    assert {"fidelity", "reliance_dynamics"} <= set(tables)
    docs = {name: (ROOT / "docs" / name).read_text() for name in DOCUMENTS}
    for block in ("fidelity", "reliance_dynamics"):
        assert block_names(docs["results.md"]).count(block) == 1
        cut = re.sub(rf"<!-- resdom:table {block} -->\n.*?<!-- /resdom:table -->\n", "", docs["results.md"],
                     flags=re.S)
        assert block not in block_names(cut)
        assert f"no document holds the {block!r} block" in missing_blocks({**docs, "results.md": cut}, tables)


def test_the_probe_blocks_are_made_from_any_runs_and_their_deletion_is_caught() -> None:
    """``probe_readout`` and ``probe_embeddings`` are made from any runs (here none of a probe
    or of a probe data set: every probe "not trained yet"), stand once each in docs/results.md under "Beyond the
    paper", and deleting either block fails the drift check."""
    from resdom.report.collect import find_run_dirs
    from resdom.study.probe_blocks import PROBE_BLOCKS

    tables = document_blocks(read_runs(find_run_dirs(ROOT / "tests" / "fixtures" / "diagnostics")))
    assert set(PROBE_BLOCKS) == {"probe_readout", "probe_embeddings"} and set(PROBE_BLOCKS) <= set(tables)
    docs = {name: (ROOT / "docs" / name).read_text() for name in DOCUMENTS}
    beyond = docs["results.md"].split("## Beyond the paper", 1)[1]
    for block in PROBE_BLOCKS:
        assert "not trained yet" in tables[block]
        assert block_names(docs["results.md"]).count(block) == 1 and f"resdom:table {block} -->" in beyond
        cut = re.sub(rf"<!-- resdom:table {block} -->\n.*?<!-- /resdom:table -->\n", "", docs["results.md"],
                     flags=re.S)
        assert block not in block_names(cut)
        assert f"no document holds the {block!r} block" in missing_blocks({**docs, "results.md": cut}, tables)


def test_spec_section_5_quotes_no_measured_number_and_points_at_blocks_that_exist() -> None:
    """docs/spec.md §5: the paper's numbers (its first paragraph) only; what resdom measured is a pointer to blocks of
    docs/results.md (regenerated and checked above), not numbers that go stale."""
    spec = (ROOT / "docs" / "spec.md").read_text()
    section = spec.split("## 5. ", 1)[1].split("\n## ", 1)[0]
    ours = section.split("\n\n", 2)[2]  # after the heading line and the paper's paragraph
    assert re.findall(r"\d+\.\d+|\d+%", ours) == [], "docs/spec.md §5 quotes a measured number"
    named = re.findall(r"`(\w+)` block", ours)
    assert set(named) >= {"claims", "fidelity"}
    assert set(named) <= set(block_names((ROOT / "docs" / "results.md").read_text()))


def test_the_statistics_blocks_are_made_and_placed() -> None:
    """The comparison, proportion, claim-sentence and question-3 blocks are made by the report and stand in
    the documents (deleting one from a document, or from the report, fails here and in the test above)."""
    from resdom.study.evidence_blocks import EVIDENCE_BLOCKS

    wanted = {"coverage": "results.md", "comparisons": "results.md", "proportions": "results.md",
              "cold_items": "results.md", "five_models": "results.md", "echo": "results.md",
              "remedy_verdicts": "remedies.md", "remedy_spread": "remedies.md"}
    assert set(wanted) <= set(EVIDENCE_BLOCKS)
    for block, doc in wanted.items():
        assert block in block_names((ROOT / "docs" / doc).read_text()), f"docs/{doc} lacks the {block!r} block"


# the paper's ranges and thresholds and the declared settings the prose may name (no measured number)
SETTINGS = {"0.005", "0.02", "0.05", "0.1", "0.2", "0.3", "0.40", "0.5", "0.8", "0.9", "5%", "10%", "75%", "80%", "95%"}


@pytest.mark.parametrize(("doc", "section"), [("results.md", "## Comparisons with intervals"),
                                              ("remedies.md", "## Real data")])
def test_results_prose_after_the_tables_copies_no_measured_number(doc: str, section: str) -> None:
    """docs/results.md from "Comparisons with intervals" on and docs/remedies.md's real-data section: outside the
    generated blocks, a decimal or a percentage is one of the declared settings or the paper's ranges
    (``SETTINGS``); a measured number belongs in a block (a retrained cell would leave it stale)."""
    text = (ROOT / "docs" / doc).read_text()
    text = text[text.index(section):]
    prose = re.sub(r"<!-- resdom:table \w+ -->\n.*?<!-- /resdom:table -->\n", "", text, flags=re.S)
    found = set(re.findall(r"(?<![\w.])\d+\.\d+%?|(?<![\w.])\d+%", prose))
    assert found <= SETTINGS, f"hand-written numbers in docs/{doc}: {sorted(found - SETTINGS)}"
    assert "0.830" not in prose and re.findall(r"(?<![\w.])\d+\.\d+", "HRLI@1 0.830 here") == ["0.830"]


def test_the_population_measurement_in_the_fidelity_prose_matches_its_data_and_the_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/results.md, "The paper side by side": the table of Attn over validation and test users is what
    scripts/mixing_population_check.py --table makes of docs/results/measurements/mixing_population.json, each cell
    of that file is of the stored cell's checkpoint with its stored test-user ratios, and the sentences after the
    table hold on it: validation below test on every Amazon set, sports-ts brought to the paper's value, beauty-ts and
    toys-ts most of the way, video-ts moved from agreement to well below."""
    import json
    import statistics

    from resdom.study.fidelity import PAPER_MIXING

    path = ROOT / "docs" / "results" / "measurements" / "mixing_population.json"
    measured = json.loads(path.read_text())
    for name, m in measured["cells"].items():
        cell = ROOT / name
        assert m["checkpoint"] == json.loads((cell / "cell.json").read_text())["checkpoint"], name
        stored = json.loads((cell / "diagnostics" / "mixing.json").read_text())["pooled"]["all"]
        assert m["test"]["pooled_all"] == pytest.approx({s: stored[s] for s in ("Attn", "+Res", "+LN")}, abs=1e-9)

    script = _script("mixing_population_check", monkeypatch)
    text = (ROOT / "docs" / "results.md").read_text()
    assert script.population_table(measured) in text

    def attn(dataset: str, split: str) -> float:
        return statistics.mean(m[split]["pooled_all"]["Attn"] for m in measured["cells"].values()
                               if m["dataset"] == dataset)

    paper = {ds: PAPER_MIXING[name][0] for ds, name in (("beauty-ts", "Beauty"), ("sports-ts", "Sports"),
                                                         ("toys-ts", "Toys"), ("video-ts", "Video"))}
    assert all(attn(ds, "valid") < attn(ds, "test") for ds in paper)
    assert abs(attn("sports-ts", "valid") - paper["sports-ts"]) < 0.005 < attn("sports-ts", "test") - paper["sports-ts"]
    for ds in ("beauty-ts", "toys-ts"):  # "most of the way"
        assert abs(attn(ds, "valid") - paper[ds]) < 0.5 * (attn(ds, "test") - paper[ds]), ds
    assert abs(attn("video-ts", "test") - paper["video-ts"]) < 0.01  # agree: inside the fidelity interval
    assert paper["video-ts"] - attn("video-ts", "valid") > 0.02  # well below
    prose = " ".join(text.split())
    assert ("The validation users bring sports-ts to the paper's value and beauty-ts and toys-ts most of the way to "
            "it, but take video-ts, where the test users agree with the paper, well below it: no one population "
            "matches the paper on all four sets") in prose


def test_the_analysis_folder_emulation_matches_its_data_and_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/results.md, "The paper's analysis folder, emulated": the table is what scripts/mixing_population_check.py
    --pass-orders makes of the population file and the store's alpha sweeps of the same checkpoints, and the reading
    after it holds on it: one last pass only (alpha = 0) has every Attn inside, none has every Attn and +Res, and the
    leftover of an earlier pass is at most 12% of the folder."""
    import json

    script = _script("mixing_population_check", monkeypatch)
    measured = json.loads((ROOT / "docs" / "results" / "measurements" / "mixing_population.json").read_text())
    table = script.pass_order_table(measured, ROOT / "results")
    text = (ROOT / "docs" / "results.md").read_text()
    assert table in text
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert [r[0].lstrip("| ") for r in rows if r[-2] == "yes"] == ["test users, alpha = 0"]
    assert all(r[-1] == "no |" for r in rows)
    assert script.leftover_share(measured) <= 0.12
    prose = " ".join(text.split())
    assert "at most 12% of the folder on these sets" in prose
    assert "**No pass order reproduces the paper's table.** Only one last pass brings the Attn" in prose


def test_the_filter_measurement_quoted_in_the_fidelity_prose_matches_its_data_and_the_store() -> None:
    """docs/results.md, "The paper side by side": the toys-ts and ml-1m-part recoveries with and without the filter come
    from docs/results/measurements/recovery_unfiltered.json, measured on the stored cells' own checkpoints (the
    filtered curve equal to the stored one), each to the digits shown."""
    import json

    measured = json.loads((ROOT / "docs" / "results" / "measurements" / "recovery_unfiltered.json").read_text())
    text = (ROOT / "docs" / "results.md").read_text().replace("\n", " ")

    def three(cells: list[dict], name: str, key: str, fmt: str) -> str:
        return " / ".join(format(m[name][key], fmt) for m in cells)

    for dataset in ("toys-ts", "ml-1m-part"):
        cells = [measured["cells"][f"results/{dataset}/sasrec/seed{k}"] for k in (1, 2, 3)]
        for k, m in enumerate(cells, 1):
            cell = ROOT / "results" / dataset / "sasrec" / f"seed{k}"
            assert m["checkpoint"] == json.loads((cell / "cell.json").read_text())["checkpoint"]
            stored = json.loads((cell / "diagnostics" / "recovery.json").read_text())["test"]
            assert max(x["recovery"] for x in stored["curve"]) == pytest.approx(m["filtered"]["largest_recovery"])
            assert stored["recoverable"] == m["filtered"]["recoverable"]

        unfiltered = three(cells, "unfiltered", "largest_recovery", ".3f")
        filtered = three(cells, "filtered", "largest_recovery", ".3f")
        if dataset == "toys-ts":
            assert f"without any filter is {unfiltered} (seeds 1-3) against {filtered} with the cell's filter" in text
            assert (f"({three(cells, 'unfiltered', 'recoverable', 'd')} users against "
                    f"{three(cells, 'filtered', 'recoverable', 'd')})") in text
        else:
            assert f"it is {unfiltered} without the filter against {filtered} with it: lower" in text
            assert all(m["unfiltered"]["largest_recovery"] < m["filtered"]["largest_recovery"] for m in cells)


def test_the_training_length_measurement_in_the_fidelity_prose_matches_its_data_and_the_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/results.md, "The paper side by side", the fifth candidate: the table is what scripts/
    epoch_trajectory_check.py --table makes of docs/results/measurements/epoch_trajectory.json; each retrain is the
    stored cell (its kept epoch, and there the stored test mixing ratios and HRLI@1); and the paragraph after the
    table holds on it: Attn at or below the paper's only while HRLI@1 is more than 0.3 below the paper's, Attn within
    0.02 of the paper's HRLI@1 at least three quarters as far above the paper's as at the kept epoch, and no epoch
    within 0.01 of the paper's Attn and 0.05 of its HRLI@1 at once."""
    import json

    from resdom.study.fidelity import DATASETS, PAPER_HRLI1, PAPER_MIXING

    measured = json.loads((ROOT / "docs" / "results" / "measurements" / "epoch_trajectory.json").read_text())
    script = _script("epoch_trajectory_check", monkeypatch)
    text = (ROOT / "docs" / "results.md").read_text()
    assert script.trajectory_table(measured) in text
    assert {m["dataset"] for m in measured["cells"].values()} == {"beauty-ts", "toys-ts"}
    for name, m in measured["cells"].items():
        cell = ROOT / name
        assert m["kept_epoch"] == json.loads((cell / "cell.json").read_text())["best_epoch"], name
        kept = next(e for e in m["epochs"] if e["epoch"] == m["kept_epoch"])
        stored = json.loads((cell / "diagnostics" / "mixing.json").read_text())["pooled"]["all"]
        assert {s: kept[s] for s in ("Attn", "+Res", "+LN")} == pytest.approx(stored, abs=1e-6), name
        hrli = json.loads((cell / "diagnostics" / "hrli.json").read_text())["values"]["HRLI@1"]
        assert kept["HRLI@1"] == pytest.approx(hrli, abs=1e-6), name
        paper = DATASETS[m["dataset"]][0]
        attn, rate = PAPER_MIXING[paper][0], PAPER_HRLI1[paper]
        assert all(e["HRLI@1"] < rate - 0.3 for e in m["epochs"] if e["Attn"] <= attn), name
        near = [e for e in m["epochs"] if abs(e["HRLI@1"] - rate) < 0.02]
        assert near and all(e["Attn"] - attn >= 0.75 * (kept["Attn"] - attn) for e in near), name
        assert not any(abs(e["Attn"] - attn) < 0.01 and abs(e["HRLI@1"] - rate) < 0.05 for e in m["epochs"]), name
    prose = " ".join(text.split())
    assert ("On both sets the test Attn ratio is as low as the paper's only in the first epochs, where HRLI@1 is still "
            "far below the paper's; at the epochs where HRLI@1 is about the paper's, Attn is nearly as far above the "
            "paper's as at the kept epoch. No epoch of the run matches the paper's Attn and HRLI@1 at once") in prose


def test_the_hand_written_readings_of_reliance_in_training_hold_on_the_store() -> None:
    """docs/results.md, "What the store shows" (qualitative sentences, no numbers): for the `sasrec` cells with a
    training monitor, HRLI@1 starts low at the first monitored epoch and climbs on every data set but ml-100k, where it
    is highest at the first monitored epoch and falls back; HRL2I@1 stays near 0 and +Res is low from the first
    monitored epoch on. Time-to-split's SASRec's HRLI@1 is close to `sasrec`'s on beauty-ts and lower on sports-ts."""
    import json
    import statistics

    text = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert "HRLI@1 starts near 0 and climbs with validation accuracy (on every data set but ml-100k, above)" in text
    assert "On the small ml-100k the monitor's HRLI@1 is highest at the first monitored epoch" in text
    assert "close to `sasrec`'s on beauty-ts and lower on sports-ts" in text
    checked = set()
    for curve in sorted((ROOT / "results").glob("*/sasrec/seed*/curve.jsonl")):
        rows = [json.loads(line) for line in curve.read_text().splitlines() if line.strip()]
        monitor = [r["monitor"] for r in rows if r.get("monitor")]
        if not monitor:
            continue
        hrli = [m["HRLI@1"] for m in monitor]
        dataset = curve.parts[-4]
        checked.add(dataset)
        assert max(m["HRL2I@1"] for m in monitor) < 0.05 and monitor[0]["mixing_all"]["+Res"] < 0.2, curve
        if dataset == "ml-100k":
            assert hrli[0] == max(hrli) and hrli[-1] < hrli[0] - 0.3, curve
        else:
            assert hrli[0] < 0.2 and max(hrli) > hrli[0] + 0.3, curve
    assert {"ml-100k", "toys-ts", "sports-ts"} <= checked

    def hrli_mean(dataset: str, label: str) -> float:
        cells = sorted((ROOT / "results" / dataset / label).glob("seed*/diagnostics/hrli.json"))
        assert cells, (dataset, label)
        return statistics.mean(json.loads(c.read_text())["values"]["HRLI@1"] for c in cells)

    assert abs(hrli_mean("beauty-ts", "sasrec-tts") - hrli_mean("beauty-ts", "sasrec")) < 0.02
    assert hrli_mean("sports-ts", "sasrec-tts") < hrli_mean("sports-ts", "sasrec") - 0.02

    # "on yelp-ts the reliance rose further after validation accuracy had levelled off in every SASRec cell (also
    # with patience 30) and every DuoRec cell whose monitor went on past that point, while BSARec's cells disagree,
    # rising in one and falling back in another (... question 4's block, where one data set's few cells do not
    # settle it)": each such SASRec / DuoRec cell's HRLI@1 change after the NDCG@10 plateau above the block's margin
    # (a cell whose last monitored epoch is its plateau has no change to show), a BSARec cell's above it and another's
    # below minus it, and none of the block's yelp-ts rows a verdict either way
    from resdom.study.reliance_dynamics import GAIN_MARGIN, store_dynamics
    from resdom.study.summary import table_rows

    assert ("on yelp-ts the reliance rose further after validation accuracy had levelled off in every SASRec cell "
            "(also with patience 30) and every DuoRec cell whose monitor went on past that point, while BSARec's "
            "cells disagree, rising in one and falling back in another") in text
    yelp = [c for c in store_dynamics(ROOT / "results")[0]
            if c.dataset == "yelp-ts" and c.dynamics.epochs[-1] > c.dynamics.ndcg_plateau]
    rising = [c for c in yelp if c.label in ("sasrec", "sasrec-p30", "duorec")]
    assert {c.label for c in rising} == {"sasrec", "sasrec-p30", "duorec"}
    assert all(c.dynamics.change_after > GAIN_MARGIN for c in rising)
    bsarec = [c.dynamics.change_after for c in yelp if c.label == "bsarec"]
    assert max(bsarec) > GAIN_MARGIN and min(bsarec) < -GAIN_MARGIN
    assert {c.label for c in yelp} == {"sasrec", "sasrec-p30", "duorec", "bsarec"}  # no other model to speak of
    block = (ROOT / "docs" / "results.md").read_text().split("<!-- resdom:table reliance_dynamics -->", 1)[1]
    rows = {r["scope"]: r["verdict"] for r in table_rows(block.split("<!-- /resdom:table -->", 1)[0])}
    assert all(v == "undecided" or v.startswith("too few") for s, v in rows.items() if s.startswith("yelp-ts"))


def test_the_hand_written_readings_of_the_remedies_hold_on_the_store() -> None:
    """docs/remedies.md's qualitative paragraphs after the tables (no numbers), each checked on the store's means over
    seeds, on every data set with remedy cells: the fixed scale, the gates and pre-LN sit on the base model's spot
    (within the declared margins: 5% of NDCG@10, 0.02 in HRLI@1), the gates grow from 1 (the per-channel one barely),
    pre-LN's +Res is lower; the readouts cut HRLI@1 several times over, mean3 raising HRL2I@1 and pool's staying
    under mean3's, pool barely caring about order, both at least as residual-dominated as the base and above and to
    the left of the base's alpha sweep."""
    import functools
    import json
    import statistics

    from resdom.report.values import run_values

    text = " ".join((ROOT / "docs" / "remedies.md").read_text().split())
    for sentence in ("The learned gates, initialised at 1, grow rather than shrink",
                     "The per-channel gate, a real change of the block, barely moves from 1",
                     "Pre-LN blocks change the reliance not at all; their +Res mixing is lower",
                     "lowers HRLI@1 several times over while HRL2I@1 rises",
                     "lowers HRLI@1 as much with HRL2I@1 lower than `mean3`'s, and barely cares about order",
                     "at least as residual-dominated as the base's",
                     "Both readouts land above and to the left of that curve on both data sets",
                     "The four block changes land on the base model's spot"):
        assert sentence in text, sentence

    runs = read_runs(store_cells(ROOT / "results"))
    values: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        values.setdefault((r.dataset, r.model), []).append(run_values(r))
    datasets = sorted({ds for ds, label in values if label.startswith("sasrec-") and label.endswith("mean3")})
    assert {"beauty-ts", "toys-ts"} <= set(datasets)

    def mean_of(ds: str, label: str, key: str) -> float:
        return statistics.mean(v[key] for v in values[(ds, f"sasrec{label}")])

    for ds in datasets:
        mean = functools.partial(mean_of, ds)
        base_ndcg, base_hrli = mean("", "NDCG@10"), mean("", "HRLI@1")
        for block in ("-res0.5", "-gate", "-gate-channel", "-preln"):
            assert abs(mean(block, "NDCG@10") - base_ndcg) < 0.05 * base_ndcg, (ds, block)
            assert abs(mean(block, "HRLI@1") - base_hrli) < 0.02, (ds, block)
        for block in ("-res0.5", "-gate", "-gate-channel"):
            assert abs(mean(block, "mix_all_+Res") - mean("", "mix_all_+Res")) < 0.02, (ds, block)
        assert mean("-gate", "trained_scale") > 1 and 1 < mean("-gate-channel", "trained_scale") < 1.1, ds
        assert mean("-preln", "mix_all_+Res") < mean("", "mix_all_+Res"), ds

        assert mean("-mean3", "HRLI@1") < base_hrli / 3 and mean("-pool", "HRLI@1") < base_hrli / 3, ds
        assert mean("-mean3", "HRL2I@1") > mean("", "HRL2I@1") + 0.1, ds
        assert mean("-pool", "HRL2I@1") < mean("-mean3", "HRL2I@1"), ds
        assert abs(mean("-pool", "shuf_full_rel_NDCG@10")) < 0.1 < abs(mean("", "shuf_full_rel_NDCG@10")), ds

        sweep: dict[float, list[tuple[float, float]]] = {}  # the base's alpha sweep, mean over seeds at each alpha
        for cell in sorted((ROOT / "results" / ds / "sasrec").glob("seed*/diagnostics/alpha.json")):
            for row in json.loads(cell.read_text())["rows"]:
                sweep.setdefault(row["alpha"], []).append((row["HRLI@1"], row["NDCG@10"]))
        curve = sorted((statistics.mean(h for h, _ in v), statistics.mean(n for _, n in v)) for v in sweep.values())
        for readout in ("-mean3", "-pool"):
            x, y = mean(readout, "HRLI@1"), mean(readout, "NDCG@10")
            assert mean(readout, "mix_all_+Res") <= mean("", "mix_all_+Res"), (ds, readout)
            (x0, y0), (x1, y1) = next((a, b) for a, b in zip(curve, curve[1:]) if a[0] <= x <= b[0])
            assert y > y0 + (y1 - y0) * (x - x0) / (x1 - x0), (ds, readout)  # above the curve at its own HRLI@1


def test_the_hand_written_readings_of_the_claims_marks_hold_on_the_store() -> None:
    """docs/results.md, "What the store shows" (qualitative sentences, no numbers), each checked on the store's means
    over seeds: the shuffles of the Amazon sets, ml-1m-part and yelp-ts; video-ts's low HRLI@1 and the higher rate
    over seen last items; BSARec's a = 0.9 cells against a = 0.3; the MovieLens and Yelp readings; BERT4Rec's +Res
    inside the paper's range."""
    import statistics

    from resdom.report.values import run_values

    text = " ".join((ROOT / "docs" / "results.md").read_text().split())
    for sentence in ("resdom's models lose about a third of NDCG@10 or less when the whole input is permuted, while "
                     "`keep_last` stays within a few percent",
                     "On ml-1m-part the loss goes beyond the range (more order dependence, not less); on yelp-ts it is "
                     "the smallest of any data set",
                     "*HRLI@1 under 0.8 on video-ts", "With a = 0.9 (BSARec's defaults, used on video-ts and ml-100k",
                     "with a = 0.3 (sports-ts) the attention residual carries the reliance",
                     "HRLI@1 is well under the Amazon sets' and near the paper's \"about 0.5\", with HRL2I@1 near 0 "
                     "and almost no cold last items",
                     "HRLI@1 varies with the seed more than anywhere else",
                     "**BERT4Rec's residual dominates its states about as much as the causal models' do**"):
        assert sentence in text, sentence

    values: dict[tuple[str, str], list[dict]] = {}
    for r in read_runs(store_cells(ROOT / "results")):
        values.setdefault((r.dataset, r.model), []).append(run_values(r))

    def mean(dataset: str, label: str, key: str) -> float:
        return statistics.mean(v[key] for v in values[(dataset, label)])

    amazon = ("beauty-ts", "sports-ts", "toys-ts", "video-ts")
    causal = ("sasrec", "sasrec-tts", "duorec", "bsarec")
    for key in [k for k in values if k[0] in amazon and k[1] in causal]:
        assert abs(mean(*key, "shuf_keep_last_rel_NDCG@10")) < 0.05 and -0.4 < mean(*key, "shuf_full_rel_NDCG@10"), key
    sasrec_sets = sorted(ds for ds, label in values if label == "sasrec")
    full = {ds: mean(ds, "sasrec", "shuf_full_rel_NDCG@10") for ds in sasrec_sets}
    assert full["ml-1m-part"] < -0.75 and max(full, key=full.get) == "yelp-ts"

    assert mean("video-ts", "sasrec", "HRLI@1") < 0.8 < mean("video-ts", "sasrec", "HRLI@1_seen")
    assert "*HRLI@1 above 0.9 on sports-ts and sports-ts-itemties*" in text
    for dataset in ("sports-ts", "sports-ts-itemties"):
        assert 0.9 < mean(dataset, "sasrec", "HRLI@1") < mean(dataset, "sasrec", "HRLI@1_seen"), dataset
    for dataset in ("video-ts", "ml-100k"):
        assert mean(dataset, "bsarec", "mix_all_+Res") > 0.4 and mean(dataset, "bsarec", "rec_at_0.2") < 0.1
    assert mean("sports-ts", "bsarec", "mix_all_+Res") < 0.4 and mean("sports-ts", "bsarec", "rec_at_0.2") > 0.1

    ml = {key: mean("ml-1m-part", "sasrec", key) for key in ("HRLI@1", "HRL2I@1", "unseen_share")}
    assert ml["HRLI@1"] < min(mean(ds, "sasrec", "HRLI@1") for ds in amazon) - 0.1 and abs(ml["HRLI@1"] - 0.5) < 0.1
    assert ml["HRL2I@1"] < 0.02 and ml["unseen_share"] < 0.01

    spread = {ds: statistics.stdev(v["HRLI@1"] for v in values[(ds, "sasrec")]) for ds in sasrec_sets
              if len(values[(ds, "sasrec")]) > 1}
    assert max(spread, key=spread.get) == "yelp-ts"
    assert all(0.12 <= mean(ds, "bert4rec", "mix_all_+Res") <= 0.40 for ds, label in values if label == "bert4rec")


def test_the_reading_of_the_echo_block_holds_on_the_store() -> None:
    """docs/results.md, question 3's "Reading the block" (no numbers): toys-ts `sasrec`'s crude and stratified
    differences have opposite signs in the echo block; in its cells (each seed) the users whose last item never
    occurs in training are hit (filtered HR@10) less than both the echoing users and the other users with a seen last
    item (what the reading says of toys-ts `sasrec`; not of every cell: sports-ts `bsarec` seed 1 hits them more
    than its echoing users), the model echoes almost every user whose last item it knows (over 95%) and the few
    others are hit more often than the echoing ones."""
    import numpy as np

    from resdom.study.summary import table_rows

    text = (ROOT / "docs" / "results.md").read_text()
    assert "The crude and the stratified difference can point in opposite directions (toys-ts\n`sasrec`)" in text
    block = text.split("<!-- resdom:table echo -->", 1)[1].split("<!-- /resdom:table -->", 1)[0]
    row = next(r for r in table_rows(block) if (r["data set"], r["model"]) == ("toys-ts", "sasrec"))
    assert float(row["crude difference"]) > 0 > float(row["stratified difference [95% CI]"].split(" [")[0])

    checked = 0
    for path in sorted((ROOT / "results" / "toys-ts" / "sasrec").glob("seed*/users.npz")):
        z = np.load(path)
        echo, hit, known = z["last_rank"] == 1, z["target_rank"] <= 10, z["last_freq"] > 0
        checked += 1
        assert hit[~known].mean() < min(hit[echo].mean(), hit[~echo & known].mean()), path
        assert (echo & known).sum() > 0.95 * known.sum(), path
        assert hit[~echo & known].mean() > hit[echo & known].mean(), path
    assert checked >= 3


def test_the_reading_of_the_published_accuracy_holds_on_the_store() -> None:
    """docs/results.md, "Against the published numbers of the paper's code base" (no numbers), on the store's means
    against study.fidelity.PUBLISHED_ACCURACY: beauty-ts `sasrec-tts` within 5% of the published HR@10 but further
    under its NDCG@10; `beauty-ts-itemties` at or above both, with HRLI@1 within 0.02 of beauty-ts's; every contrast
    model at least 90% of both published values (close to them or above), except beauty-ts `gru4rec`, under both,
    with three seeds or more, the published HR@10 inside its interval and the published NDCG@10 outside (the
    published_accuracy block's marks)."""
    import json
    import statistics

    from resdom.study.fidelity import PUBLISHED_ACCURACY

    text = " ".join((ROOT / "docs" / "results.md").read_text().split())
    for sentence in ("resdom's `sasrec-tts` comes close to the published HR@10 but stays further under the published "
                     "NDCG@10", "its `sasrec-tts` cell reaches or exceeds the published accuracy (the same block) with "
                     "its last-item reliance unchanged", "The contrast models come close to the published accuracy of "
                     "the paper's code base or exceed it (the same block), except GRU4Rec on beauty-ts, under both "
                     "published values: over its three seeds the published HR@10 still lies inside resdom's interval, "
                     "the published NDCG@10 above it"):
        assert sentence in text, sentence

    def mean(dataset: str, label: str, metric: str) -> float:
        cells = sorted((ROOT / "results" / dataset / label).glob("seed*"))
        assert cells, (dataset, label)
        if metric == "HRLI@1":
            return statistics.mean(json.loads((c / "diagnostics" / "hrli.json").read_text())["values"]["HRLI@1"]
                                   for c in cells)
        return statistics.mean(json.loads((c / "metrics.json").read_text())["test"]["metrics"][metric] for c in cells)

    def ratio(dataset: str, label: str, metric: str) -> float:
        published = PUBLISHED_ACCURACY[(dataset, label)][("HR@10", "NDCG@10").index(metric)]
        return mean(dataset, label, metric) / published

    hr, ndcg = ratio("beauty-ts", "sasrec-tts", "HR@10"), ratio("beauty-ts", "sasrec-tts", "NDCG@10")
    assert abs(hr - 1) < 0.05 and ndcg < hr and ndcg < 0.95
    assert min(ratio("beauty-ts-itemties", "sasrec-tts", m) for m in ("HR@10", "NDCG@10")) >= 1
    assert abs(mean("beauty-ts-itemties", "sasrec-tts", "HRLI@1") - mean("beauty-ts", "sasrec-tts", "HRLI@1")) < 0.02
    contrast = [(ds, label) for ds, label in PUBLISHED_ACCURACY if label in ("bert4rec", "gru4rec")]
    assert len(contrast) == 4
    below = [("beauty-ts", "gru4rec")]
    assert len(list((ROOT / "results" / "beauty-ts" / "gru4rec").glob("seed*"))) >= 3
    block = text.split("<!-- resdom:table published_accuracy -->", 1)[1].split("<!-- /resdom:table -->", 1)[0]
    row = next(line for line in block.split("| beauty-ts | ")[1:] if line.startswith("gru4rec |"))
    hr_cell, ndcg_cell = row.split(" | ")[2:4]
    assert hr_cell.endswith("✓") and ndcg_cell.endswith("✗"), row
    assert all(ratio(ds, label, m) >= 0.9 for ds, label in contrast if (ds, label) not in below
               for m in ("HR@10", "NDCG@10"))
    assert all(ratio(ds, label, m) < 1 for ds, label in below for m in ("HR@10", "NDCG@10"))


def test_spec_section_8_copies_no_number_of_the_store() -> None:
    """docs/spec.md §8: the published values and the benchmarks' single runs only; the store's cells beside the
    published values are the `published_accuracy` block of docs/results.md (regenerated, checked above)."""
    spec = (ROOT / "docs" / "spec.md").read_text()
    section = spec.split("## 8. ", 1)[1].split("\n## ", 1)[0]
    assert "`results/`" not in section and "seeds 1-3" not in section
    assert "`published_accuracy` block" in section
    assert "published_accuracy" in block_names((ROOT / "docs" / "results.md").read_text())


def test_the_stopping_candidate_reading_holds_on_the_store() -> None:
    """docs/results.md, "The paper side by side", the third candidate (no numbers): beauty-ts `sasrec-v1024` (the
    paper's early stopping) differs from `sasrec` in HRLI@1, seeds paired, by an interval that excludes the gap
    between `sasrec`'s mean and the paper's figure, the verdict there is undecided, its best epochs differ from
    `sasrec`'s, and its own fidelity table still marks the paper's Attn and HRLI@1 outside; on toys-ts its mean
    HRLI@1 is the lower, the verdict undecided, the row giving both tests' Holm p."""
    import json

    from resdom.study.fidelity import PAPER_HRLI1
    from resdom.study.summary import table_rows, tables_of

    text = (ROOT / "docs" / "results.md").read_text()
    prose = " ".join(text.split())
    assert "was **the epoch early stopping keeps**, and on beauty-ts it is measured and **ruled out.**" in prose
    comparisons = text.split("<!-- resdom:table comparisons -->", 1)[1].split("<!-- /resdom:table -->", 1)[0]
    row = next(r for r in table_rows(comparisons)
               if (r["Data set"], r["Comparison"], r["Metric"]) == ("beauty-ts", "sasrec-v1024 vs sasrec", "HRLI@1"))
    lo, hi = (float(x) for x in re.search(r"\[([-+][\d.]+), ([-+][\d.]+)\]", row["Difference [95% CI]"]).groups())
    gap = PAPER_HRLI1["Beauty"] - float(row["sasrec: store mean"].split()[0])
    assert gap < -0.03 and gap < lo < hi < -gap and row["Verdict"].startswith("undecided (detects ±")
    assert "seeds 3 / 3, paired" in row["Difference [95% CI]"]
    assert "(5 seeds; " in row["sasrec: store mean"] and "over the 3 compared)" in row["sasrec: store mean"]

    fidelity = text.split("<!-- resdom:table fidelity -->", 1)[1].split("<!-- /resdom:table -->", 1)[0]
    early = tables_of(fidelity.split("The same for `sasrec-v1024`", 1)[1])[0]
    beauty = next(r for r in early if r["data set (paper's)"].startswith("beauty-ts"))
    assert beauty["Attn"].endswith("✗") and beauty["HRLI@1"].endswith("✗")
    toys_row = next(r for r in table_rows(comparisons)
                    if (r["Data set"], r["Comparison"], r["Metric"]) == ("toys-ts", "sasrec-v1024 vs sasrec", "HRLI@1"))
    variant_mean, base_mean = (float(toys_row[k].split()[0]) for k in ("Model: store mean", "sasrec: store mean"))
    assert toys_row["Verdict"].startswith("undecided (detects ±") and variant_mean < base_mean, toys_row
    assert re.search(r"Holm p [\d.]+ bootstrap, [\d.]+ seeds' t", toys_row["Difference [95% CI]"]), toys_row
    toys = next(r for r in early if r["data set (paper's)"].startswith("toys-ts"))
    assert toys["seeds"] == "3" and toys["HRLI@1"].endswith("✓")
    assert toys["Attn"].endswith("✗") and toys["+Res"].endswith("✗")

    def best(label: str) -> list[int]:
        return [json.loads((c / "metrics.json").read_text())["best_epoch"]
                for c in sorted((ROOT / "results" / "beauty-ts" / label).glob("seed*"))]

    assert len(best("sasrec-v1024")) == 3 and best("sasrec-v1024") != best("sasrec")


def test_the_same_day_order_candidate_reading_holds_on_the_store() -> None:
    """docs/results.md, "The paper side by side", the fourth candidate (no numbers): the -itemties `sasrec` rows of
    the fidelity block rest on 3 seeds each, their Attn is within 0.01 of beauty-ts's / sports-ts's, the paper's Attn
    lies outside their intervals and on Beauty its HRLI@1 too, while on Sports its HRLI@1 lies inside both orders'
    intervals; on Sports the paper's +Res lies inside sports-ts's interval and outside sports-ts-itemties'; on Beauty
    the itemties' largest recovery over α is lower than beauty-ts's."""
    from resdom.study.summary import tables_of

    text = (ROOT / "docs" / "results.md").read_text()
    prose = " ".join(text.split())
    assert "was **the order of same-day interactions**, and it is measured and **ruled out.**" in prose
    fidelity = text.split("<!-- resdom:table fidelity -->", 1)[1].split("<!-- /resdom:table -->", 1)[0]
    rows = {r["data set (paper's)"]: r for r in tables_of(fidelity)[0]}

    def value(cell: str) -> float:
        return float(re.match(r"([\d.]+)", cell).group(1))

    for name, paper in (("beauty-ts", "Beauty"), ("sports-ts", "Sports")):
        ties, base = rows[f"{name}-itemties ({paper})"], rows[f"{name} ({paper})"]
        assert ties["seeds"] == "3", name
        assert abs(value(ties["Attn"]) - value(base["Attn"])) < 0.01, name
        assert ties["Attn"].endswith("✗"), name
    assert rows["beauty-ts-itemties (Beauty)"]["HRLI@1"].endswith("✗")
    sports, sports_ties = rows["sports-ts (Sports)"], rows["sports-ts-itemties (Sports)"]
    assert sports["HRLI@1"].endswith("✓") and sports_ties["HRLI@1"].endswith("✓")
    assert sports["+Res"].endswith("✓") and sports_ties["+Res"].endswith("✗")
    beauty, beauty_ties = rows["beauty-ts (Beauty)"], rows["beauty-ts-itemties (Beauty)"]
    assert value(beauty_ties["largest recovery over α"]) < value(beauty["largest recovery over α"])


def test_the_block_names_known_up_front_are_those_the_blocks_get() -> None:
    """``document_block_names`` (what `resdom report --doc` checks a document against before writing anything) is
    exactly the set of names ``document_blocks`` fills, here from runs with no paper data set, probe or remedy."""
    from resdom.report.collect import find_run_dirs
    from resdom.study import document_block_names

    tables = document_blocks(read_runs(find_run_dirs(ROOT / "tests" / "fixtures" / "diagnostics")))
    assert sorted(document_block_names()) == sorted(tables)


@pytest.mark.parametrize("text, message", [
    ("a\n<!-- resdom:table hrli -->\nold\n", "doc.md:2: block 'hrli' is never closed"),
    ("<!-- resdom:table hrli -->\n<!-- resdom:table mixing -->\n<!-- /resdom:table -->\n",
     "doc.md:2: block 'mixing' opens inside block 'hrli' of line 1, which is not closed"),
    ("a\nb\n<!-- /resdom:table -->\n", "doc.md:3: a block end with no block open"),
    ("see <!-- resdom:table hrli -->\n<!-- /resdom:table -->\n", "doc.md:1: malformed block marker"),
    ("<!-- resdom:table  hrli -->\n<!-- /resdom:table -->\n", "doc.md:1: malformed block marker"),
    ("<!-- resdom:table nope -->\n<!-- /resdom:table -->\n", "doc.md:1: block names table 'nope'; known: hrli"),
])
def test_check_blocks_names_the_line_of_a_block_fill_blocks_would_skip_or_refuse(text: str, message: str) -> None:
    """Each of these documents is one ``fill_blocks`` skips without a word (an unclosed or malformed block) or
    refuses half-way (an unknown name); ``check_blocks`` refuses it with its line."""
    from resdom.errors import ResdomError
    from resdom.pipeline.store import check_blocks

    with pytest.raises(ResdomError, match=re.escape(message)):
        check_blocks(text, ["hrli", "mixing"], where="doc.md")
    good = "# t\n<!-- resdom:table hrli -->\nold\n<!-- /resdom:table -->\ntext\n<!-- resdom:table mixing -->\n" \
           "<!-- /resdom:table -->\n"
    check_blocks(good, ["hrli", "mixing"], where="doc.md")  # no error
    assert fill_blocks(good, {"hrli": "H\n", "mixing": "M\n"}) == good.replace("old\n", "H\n").replace(
        "mixing -->\n", "mixing -->\nM\n")


def test_the_recipe_2_preview_equals_the_staging_store() -> None:
    """docs/results.md's sentence on the recipe-2 seeds of beauty-ts `sasrec` (means over seeds of test Attn, +Res,
    HRLI@1 and NDCG@10, recipe 1's beside, and each store's range of Attn) equals both stores' cells; the sentence
    must go when the staged cells replace results/'s (then the staging store is empty and this fails)."""
    import json
    import statistics

    text = " ".join((ROOT / "docs" / "results.md").read_text().split())
    said = re.search(r"The five recipe-2 seeds of beauty-ts `sasrec` .*? test Attn ([\d.]+) \(recipe 1: ([\d.]+); "
                     r"each seed ([\d.]+) to ([\d.]+) against ([\d.]+) to ([\d.]+)\), \+Res ([\d.]+) \(([\d.]+)\), "
                     r"HRLI@1 ([\d.]+) \(([\d.]+)\) and NDCG@10 ([\d.]+) \(([\d.]+)\)", text)
    if said is None:
        pytest.skip("docs/results.md has no recipe-2 preview sentence")

    def values(store: str) -> list[tuple[float, float, float, float]]:
        out = []
        for seed in range(1, 6):
            summary = json.loads((ROOT / store / "beauty-ts" / "sasrec" / f"seed{seed}" / "diagnostics"
                                  / "summary.json").read_text())
            at_one = next(r for r in summary["alpha_sweep"] if r["alpha"] == 1.0)
            out.append((at_one["mixing_all"]["Attn"], at_one["mixing_all"]["+Res"], summary["HRLI@1"],
                        at_one["NDCG@10"]))
        return out

    new, old = values("results-sasrec2"), values("results")
    mean = [[statistics.mean(v[i] for v in cells) for i in range(4)] for cells in (new, old)]
    digits = (3, 3, 3, 4)
    expected = [round(mean[0][0], 3), round(mean[1][0], 3), round(min(v[0] for v in new), 3),
                round(max(v[0] for v in new), 3), round(min(v[0] for v in old), 3), round(max(v[0] for v in old), 3)]
    for i in range(1, 4):
        expected += [round(mean[0][i], digits[i]), round(mean[1][i], digits[i])]
    assert [float(x) for x in said.groups()] == expected


def test_the_recipe_2_emulation_preview_matches_its_data_and_the_staging_store(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/results.md, "Recipe 2, a preview": the table is what scripts/mixing_population_check.py --pass-orders
    makes of the recipe-2 population file and the staging store's alpha sweeps of the same checkpoints (every cell
    of that file in results-sasrec2/ and of recipe sasrec/2), and the reading after it holds: no last pass has every
    Attn inside. The preview must go when the staged cells replace results/'s (the file's cells are then gone)."""
    import json

    kept = ROOT / "docs" / "results" / "measurements" / "mixing_population_recipe2.json"
    text = (ROOT / "docs" / "results.md").read_text()
    if "**Recipe 2, a preview.**" not in text:
        assert not kept.exists(), f"{kept} is kept but docs/results.md no longer shows it"
        pytest.skip("docs/results.md has no recipe-2 emulation preview")
    script = _script("mixing_population_check", monkeypatch)
    measured = json.loads(kept.read_text())
    for name in measured["cells"]:
        assert name.startswith("results-sasrec2/"), name
        meta = json.loads((ROOT / name / "cell.json").read_text())
        assert meta["versions"]["recipe"] == "sasrec/2" and meta["checkpoint"] == measured["cells"][name]["checkpoint"]
    table = script.pass_order_table(measured, ROOT / "results-sasrec2")
    assert table in text
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert [r[0].lstrip("| ") for r in rows if r[-2] == "yes"] == []
    assert script.leftover_share(measured) <= 0.12
    values = script.last_pass_values(measured, ROOT / "results-sasrec2")

    def attn(dataset: str, last: str) -> str:
        return f"{sum(s[last]['Attn'] for s in values[dataset]['seeds']) / len(values[dataset]['seeds']):.3f}"

    valid, zero = "validation users", "test users, alpha = 0"
    prose = " ".join(text.split())
    assert (f"({attn('beauty-ts', valid)}, {attn('sports-ts', valid)} and {attn('toys-ts', valid)} against 0.776, "
            f"0.775 and 0.772), but leaves Video's below it ({attn('video-ts', valid)} against 0.798)") in prose
    assert f"α = 0's included (Toys {attn('toys-ts', zero)}, Video {attn('video-ts', zero)})" in prose


QUERY_RECOVERY_NOTE = "**The query probe's recovery columns are of the old reading.**"


def test_the_query_probes_old_recovery_reading_is_noted_while_a_stored_cell_has_it() -> None:
    """A stored cell of a query-token model (config model.readout "query") whose recovery.json lacks
    ``offsets_read`` read its offsets from raw item columns, one column late (resdom before the fix): while any
    does, docs/results.md says so under the recovery table; once every such cell is diagnosed again
    (`scripts/rediagnose_cells.py --what recovery,users`), the note must go."""
    import json

    old = []
    for config in sorted((ROOT / "results").glob("*/*/seed*/config.json")):
        if json.loads(config.read_text())["model"].get("readout") == "query":
            recovery = config.parent / "diagnostics" / "recovery.json"
            if recovery.is_file() and "offsets_read" not in json.loads(recovery.read_text()):
                old.append(str(config.parent.relative_to(ROOT)))
    text = (ROOT / "docs" / "results.md").read_text()
    assert (QUERY_RECOVERY_NOTE in text) == bool(old), old or "every query cell is diagnosed again: drop the note"
