"""Figures and the HTML / Markdown report from the fixture runs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex

from resdom.report import build_report, find_run_dirs, read_runs
from resdom.report.figures import MODEL_COLORS, all_figures, figure_keys, model_color

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "diagnostics"


@pytest.fixture(scope="module")
def figures() -> dict:
    return {f.key: f for f in all_figures(read_runs(find_run_dirs(FIXTURES)))}


def test_every_figure_built_with_labels_and_legend(figures: dict) -> None:
    assert list(figures) == list(figure_keys())
    for key, f in figures.items():
        assert f.caption.endswith(".") and f.title
        assert f.figure.legends, f"{key}: no legend"
        for ax in f.figure.axes:
            assert ax.get_xlabel() or key == "shuffle", f"{key}: unlabelled x axis"
            assert ax.get_ylabel(), f"{key}: unlabelled y axis"


def test_model_colours_fixed(figures: dict) -> None:
    assert model_color("sasrec") == MODEL_COLORS["sasrec"] and model_color("other") == model_color("other")
    ax = figures["hrli"].figure.axes[0]  # toyA: SASRec and BSARec bars
    colours = {to_hex(p.get_facecolor()) for p in ax.patches}
    assert colours == {MODEL_COLORS["sasrec"].lower(), MODEL_COLORS["bsarec"].lower()}
    lines = figures["alpha_hrli"].figure.axes[0].get_lines()
    assert {to_hex(line.get_color()) for line in lines} <= {c.lower() for c in MODEL_COLORS.values()}
    notes = [[t.get_text() for t in ax.texts] for ax in figures["mixing_per_position"].figure.axes]
    assert notes == [["one seed: BSARec"], ["one seed: SASRec"]]  # toyA: BSARec; toyB: SASRec (lines, no markers)
    faces = {to_hex(line.get_color()): line.get_markerfacecolor() for line in lines}  # toyA: BSARec has one seed
    assert faces[MODEL_COLORS["bsarec"].lower()] == "white" and faces[MODEL_COLORS["sasrec"].lower()] != "white"
    assert [t.get_text() for t in figures["alpha_hrli"].figure.legends[0].get_texts()][-2:] == \
        ["band: ±1 SD over seeds", "hollow: one seed, no spread"]
    legend = [t.get_text() for t in figures["hrli"].figure.legends[0].get_texts()]
    assert legend == ["SASRec (n=1–2)", "BSARec (n=1)", "error bar: ±1 SD over seeds",  # toyA: 2 seeds, toyB: 1
                      "hollow: one seed, no spread"]
    # toyA's BSARec rests on one seed: each of its bars carries the hollow mark at its top, SASRec's (2 seeds) none
    marks = [line for line in ax.get_lines() if line.get_marker() == "o" and line.get_markerfacecolor() == "white"]
    bsarec = [p for p in ax.patches if to_hex(p.get_facecolor()) == MODEL_COLORS["bsarec"].lower()]
    assert len(marks) == 1 and list(marks[0].get_ydata()) == pytest.approx([p.get_height() for p in bsarec])
    assert list(marks[0].get_xdata()) == pytest.approx([p.get_x() + p.get_width() / 2 for p in bsarec])


def test_every_figure_names_its_seeds_and_its_error_bars(figures: dict) -> None:
    """Each model's entry says how many seeds its means average; where error bars or bands are drawn, the legend
    says what they show."""
    for key, f in figures.items():
        texts = [t.get_text() for t in f.figure.legends[0].get_texts()]
        assert any(t.startswith("SASRec (n=") for t in texts), key
        drawn = any(c.__class__.__name__ == "ErrorbarContainer" for ax in f.figure.axes for c in ax.containers)
        bands = any(c.__class__.__name__ == "FillBetweenPolyCollection" or c.__class__.__name__ == "PolyCollection"
                    for ax in f.figure.axes for c in ax.collections)
        if drawn:
            assert "error bar: ±1 SD over seeds" in texts, key
        if bands and key.startswith(("alpha", "recovery")):
            assert "band: ±1 SD over seeds" in texts, key


def test_figures_fit_the_page_and_are_small_palette_pngs(figures: dict) -> None:
    import io

    from PIL import Image

    from resdom.report.figures import PAGE_WIDTH, PNG_DPI

    for key, f in figures.items():
        assert f.figure.get_figwidth() <= PAGE_WIDTH + 1e-9, key
    for key in ("hrli", "alpha_hrli"):  # two renderings stand for all (each takes a while)
        f = figures[key]
        image = Image.open(io.BytesIO(f.png_bytes()))
        assert image.mode == "P" and image.info["dpi"] == pytest.approx((PNG_DPI, PNG_DPI), abs=0.5), key
        assert image.size[0] <= PAGE_WIDTH * PNG_DPI + 1, key


def test_bar_heights_are_seed_means(figures: dict) -> None:
    ax = figures["hrli"].figure.axes[0]
    sasrec_bars = [p for p in ax.patches if to_hex(p.get_facecolor()) == MODEL_COLORS["sasrec"].lower()]
    assert sasrec_bars[0].get_height() == pytest.approx(0.85)  # HRLI@1, seeds 0.80 / 0.90
    assert sasrec_bars[1].get_height() == pytest.approx(0.03)  # HRL2I@1, seeds 0.02 / 0.04


@pytest.mark.slow
def test_report_files(tmp_path: Path) -> None:
    paths = build_report(find_run_dirs(FIXTURES), tmp_path, title="t")
    for key in figure_keys():
        assert paths.figures[key]["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert paths.figures[key]["pdf"].read_bytes()[:5] == b"%PDF-"
    html = paths.html.read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html  # self-contained
    images = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == len(figure_keys())
    for key in figure_keys():
        section = re.search(rf'<section id="fig-{key}".*?</section>', html, re.S).group(0)
        assert '<p class="caption">' in section and "data:image/png" in section
    md = paths.markdown.read_text()
    for key in figure_keys():
        assert f"(figures/{key}.png)" in md
    assert "| toyA | sasrec | 2 | 0.850 ± 0.071 |" in md
    assert "Mixing ratio drops from 0.850 at Attn to 0.250 at +Res" in "\n".join(paths.findings)


def test_report_without_diagnostics(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "toyB_sasrec_seed1", run)
    shutil.rmtree(run / "diagnostics")
    paths = build_report([run], tmp_path / "out")
    html = paths.html.read_text()
    # one's own run: no figure drawn, no figure section (the study's page keeps one for each, saying it is missing)
    assert paths.figures == {} and 'class="missing"' not in html and "figure-section" not in html
    assert "toyB" in html and "0.200" in html  # the run and its test HR@10 from metrics.json


def test_figures_say_how_many_users(figures: dict) -> None:
    for key, f in figures.items():
        note = {"recovery": "200 test users",  # toyB has no recovery, and no training monitor:
                "reliance_curve": "50 validation users",
                "mixing_curve": "50 validation users"}.get(key, "200 test users in each data set")
        assert f.caption.endswith(f" {note}."), key
        assert any(t.get_text().endswith(note) for t in f.figure.texts), key
    # one data set with its own count
    only_b = {f.key: f for f in all_figures(read_runs([FIXTURES / "toyB_sasrec_seed1"]))}
    assert only_b["hrli"].caption.endswith("Shares of 200 test users.")


def test_small_bars_carry_their_value(tmp_path: Path) -> None:
    """On a linear axis a bar under SMALL_BAR of its height carries its value (a zero bar reads 0.000)."""
    import json

    from resdom.report.figures import fig_mixing_stages

    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "toyB_sasrec_seed1", run)
    path = run / "diagnostics" / "mixing.json"
    mixing = json.loads(path.read_text())
    mixing["pooled"]["all"] = {"Attn": 0.8, "+Res": 0.0}
    path.write_text(json.dumps(mixing))
    ax = fig_mixing_stages(read_runs([run]), "mixing").figure.axes[0]
    assert [t.get_text() for t in ax.texts if t.get_text()] == ["0.000"]  # 0.8 carries none


def test_hrl2i_bars_show_on_a_log_axis(figures: dict) -> None:
    """HRL2I@1 (0.03) beside HRLI@1 (0.85) would vanish on a 0-1 axis: the hit-rate figures use a log axis from
    LOG_FLOOR, where a rate below the floor (0 included) sits on it and carries its value."""
    from resdom.report.figures import LOG_FLOOR, fig_reliance_by_model

    ax = figures["hrli"].figure.axes[0]
    assert ax.get_yscale() == "log" and ax.get_ylim()[0] == pytest.approx(LOG_FLOOR)
    fig = fig_reliance_by_model(_five_model_runs(), "hrli").figure
    ax = fig.axes[0]
    hrl2i = [c for c in ax.containers if hasattr(c, "patches")][1]
    assert [p.get_height() for p in hrl2i.patches] == pytest.approx([LOG_FLOOR, 0.02, 0.04, 0.06, 0.08])
    assert hrl2i.resdom_values == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08])
    assert [t.get_text() for t in ax.texts if t.get_text()] == ["0.000"]  # SASRec's zero, on the floor


def _coinciding_runs(tmp_path: Path) -> list:
    """toyA BSARec and an identical copy labelled SASRec (every curve coincides), with +LN equal to +Res."""
    import json

    dirs = []
    for model in ("sasrec", "bsarec"):
        run = tmp_path / model
        shutil.copytree(FIXTURES / "toyA_bsarec_seed1", run)
        config = json.loads((run / "config.json").read_text())
        config["model"]["name"] = model
        (run / "config.json").write_text(json.dumps(config))
        mixing = json.loads((run / "diagnostics" / "mixing.json").read_text())
        for entry in mixing["per_position"]:
            entry["+LN"] = list(entry["+Res"])
        (run / "diagnostics" / "mixing.json").write_text(json.dumps(mixing))
        dirs.append(run)
    return read_runs(dirs)


def test_coinciding_lines_stay_visible(tmp_path: Path) -> None:
    """Where two lines lie on each other, the one drawn later is narrower or marked differently, so the earlier
    one still shows."""
    import numpy as np

    figs = {f.key: f for f in all_figures(_coinciding_runs(tmp_path))}
    pairs = 0
    for key in ("alpha_mixing", "alpha_hrli", "alpha_accuracy", "recovery", "mixing_per_position"):
        for ax in figs[key].figure.axes:
            lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1]
            for i, a in enumerate(lines):
                for b in lines[i + 1:]:
                    if len(a.get_ydata()) != len(b.get_ydata()) or not np.allclose(a.get_ydata(), b.get_ydata()):
                        continue
                    pairs += 1
                    first, second = sorted((a, b), key=lambda ln: ln.get_zorder())
                    assert second.get_zorder() > first.get_zorder(), key
                    assert second.get_linewidth() < first.get_linewidth() or \
                        second.get_marker() != first.get_marker(), key
    # alpha: 3 figures of one panel; recovery: 1; per position: each stage of the two models, +Res/+LN within and
    # across
    assert pairs >= 3 + 1 + 3 + 4


def test_findings_say_how_many_users(tmp_path: Path) -> None:
    import json

    from resdom.report import finding_lines

    text = "\n".join(finding_lines(read_runs(find_run_dirs(FIXTURES))))
    assert "at +LN (all positions of 200 test users): the residual swamps" in text
    assert "(HRLI@10 = 0.960 vs HRL2I@10 = 0.035; shares of 200 test users)" in text
    assert "with the residual scaled to α = 0 HRLI@1 is 0.000" in text  # the sweep's lowest alpha
    assert "= 8.0% of 200 test users (16 users); of these 16, lowering α recovers 46.4% at α=0.1" in text
    # seeds resting on different numbers of users give the range
    runs = []
    for name, n in (("toyA_sasrec_seed1", 200), ("toyA_sasrec_seed2", 190)):
        shutil.copytree(FIXTURES / name, tmp_path / name)
        hrli = tmp_path / name / "diagnostics" / "hrli.json"
        hrli.write_text(json.dumps({**json.loads(hrli.read_text()), "n_users": n}))
        runs.append(tmp_path / name)
    text = "\n".join(finding_lines(read_runs(runs)))
    assert "shares of 190–200 test users" in text


def test_findings_of_a_model_without_a_residual_name_no_alpha(tmp_path: Path) -> None:
    """GRU4Rec has no residual to scale: its recovery sweep holds alpha = 1 only, so the finding says so rather
    than "recovers n/a at α=0.1 ...; α* = 1.0 recovers 0.0%"."""
    import json

    from resdom.report import finding_lines

    run = tmp_path / "toyA_gru4rec_seed1"
    shutil.copytree(FIXTURES / "toyA_sasrec_seed1", run)
    path = run / "diagnostics" / "recovery.json"
    rec = json.loads(path.read_text())
    for split in ("valid", "test"):
        rec[split]["curve"] = [row for row in rec[split]["curve"] if row["alpha"] == 1.0]
    rec["alpha_star"] = 1.0
    path.write_text(json.dumps(rec))
    text = "\n".join(finding_lines(read_runs([run])))
    assert "= 8.0% of 200 test users (16 users); no α below 1 was swept (the model has no residual to scale)." in text
    assert "n/a at α" not in text and "α* =" not in text


def _five_model_runs() -> list:
    from resdom.names import MODELS
    from resdom.report.collect import RunRecord

    runs = []
    for d, dataset in enumerate(("beauty-ts", "sports-ts")):
        for m, model in enumerate(MODELS):
            for seed in (1, 2):
                hrli = {"n_users": 100, "values": {"HRLI@1": 0.1 * m + 0.01 * seed + 0.2 * d, "HRL2I@1": 0.02 * m}}
                shuffle = {"n_users": 100, "original": {"HR@10": 0.1, "NDCG@10": 0.05},
                           "perturbations": {p: {"metrics": {"HR@10": 0.08, "NDCG@10": 0.04}} for p in
                                             ("keep_last", "full")}}
                runs.append(RunRecord(Path(f"/x/{dataset}/{model}/seed{seed}"), dataset, model, seed, "gts",
                                      diagnostics={"hrli": hrli, "shuffle": shuffle}))
    return runs


def test_reliance_by_model_figure_has_all_five_models() -> None:
    """The paper's Figure 2: per data set, HRLI@1 and HRL2I@1 bars for every model, in the paper's order."""
    from resdom.names import MODELS
    from resdom.report.figures import fig_reliance_by_model, fig_shuffle

    fig = fig_reliance_by_model(_five_model_runs(), "hrli")
    assert fig is not None and fig.key == "hrli_by_model"
    for d, ax in enumerate(fig.figure.axes):
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == ["SASRec", "DuoRec", "BSARec", "BERT4Rec", "GRU4Rec"]
        hrli, hrl2i = (c.patches for c in ax.containers if hasattr(c, "patches"))
        for m, model in enumerate(MODELS):
            assert hrli[m].get_height() == pytest.approx(0.1 * m + 0.015 + 0.2 * d)  # mean of the two seeds
            assert hrl2i[m].get_height() == pytest.approx(max(0.02 * m, 0.001))  # 0 sits on the log axis' floor
            assert to_hex(hrli[m].get_facecolor()) == MODEL_COLORS[model].lower()
    shuffle = fig_shuffle(_five_model_runs(), "shuffle")
    colours = {to_hex(p.get_facecolor()) for p in shuffle.figure.axes[0].patches}
    assert colours == {MODEL_COLORS[m].lower() for m in MODELS}


def test_reliance_by_model_panels_hold_their_own_models_and_no_remedy_variants() -> None:
    """Each panel names the models run on its data set; in the report's figures the remedy variants are left to
    the remedies figure (the standard figures show the models)."""
    import dataclasses

    from resdom.report.figures import fig_reliance_by_model

    runs = [r for r in _five_model_runs() if r.dataset == "beauty-ts" or r.model in ("sasrec", "gru4rec")]
    fig = fig_reliance_by_model(runs, "hrli")
    ticks = [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.figure.axes]
    assert ticks == [["SASRec", "DuoRec", "BSARec", "BERT4Rec", "GRU4Rec"], ["SASRec", "GRU4Rec"]]
    gru = next(c for c in fig.figure.axes[1].containers if hasattr(c, "patches")).patches[1]
    assert gru.get_height() == pytest.approx(0.1 * 4 + 0.015 + 0.2) and \
        to_hex(gru.get_facecolor()) == MODEL_COLORS["gru4rec"].lower()
    def relabel(label: str) -> list:
        return [dataclasses.replace(r, model=label, path=Path(str(r.path).replace("sasrec", label + "-")))
                for r in runs if r.model == "sasrec"]

    variant = relabel("sasrec-res0.5")
    studied = variant + relabel("sasrec-query") + relabel("sasrec-untied") + relabel("sasrec-celast")
    figs = {f.key: f for f in all_figures(runs + studied)}  # remedies, probes and training variants left out
    assert [[t.get_text() for t in ax.get_xticklabels()] for ax in figs["hrli_by_model"].figure.axes] == ticks
    figs = {f.key: f for f in all_figures(runs + studied + relabel("sasrec-tts"))}  # a named variant: a model
    assert [t.get_text() for t in figs["hrli_by_model"].figure.axes[1].get_xticklabels()] == \
        ["SASRec", "sasrec-tts", "GRU4Rec"]
    alone = {f.key: f for f in all_figures(variant)}  # nothing but variants: the standard figures show them
    assert "sasrec-res0.5" in [t.get_text().lower() for t in alone["hrli_by_model"].figure.axes[0].get_xticklabels()]


def test_reliance_curve_is_the_seed_mean_of_the_training_monitor() -> None:
    from resdom.report import find_run_dirs, read_runs
    from resdom.report.figures import fig_reliance_curve

    runs = read_runs(find_run_dirs(Path(__file__).resolve().parent / "fixtures" / "diagnostics"))
    fig = fig_reliance_curve(runs)
    assert fig is not None and fig.key == "reliance_curve" and fig.caption.endswith("on 50 validation users.")
    hrli_ax = fig.figure.axes[0]  # toyA only (toyB has no monitor)
    lines = [line for line in hrli_ax.get_lines() if line.get_linestyle() == "-"]  # HRLI@1 (HRL2I@1: dashed)
    # fixture monitors at epochs 2 and 4: sasrec seeds (0.2, 0.6) and (0.4, 0.8) -> means 0.3, 0.7; bsarec 0.05, 0.1
    assert sorted(list(line.get_ydata()) for line in lines) == [pytest.approx([0.05, 0.1]), pytest.approx([0.3, 0.7])]
    assert all(list(line.get_xdata()) == [2, 4] for line in lines)


def test_hrli_by_frequency_lines_are_seed_means_per_band(figures: dict) -> None:
    fig = figures["hrli_by_frequency"].figure
    ax = fig.axes[0]  # toyA's lines; its twin holds the share bars
    share = next(a for a in fig.axes[1:] if a.get_shared_x_axes().joined(a, ax))
    sasrec = next(line for line in ax.get_lines() if to_hex(line.get_color()) == MODEL_COLORS["sasrec"].lower())
    # fixture bands: HRLI@1 0.4x, 1x, 1.1x, 1.3x (capped at 1) of seeds 0.80 and 0.90
    want = [sum(min(1.0, round(h * c, 4)) for h in (0.8, 0.9)) / 2 for c in (0.4, 1.0, 1.1, 1.3)]
    assert list(sasrec.get_ydata()) == pytest.approx(want)
    assert [p.get_height() for p in share.patches] == pytest.approx([0.2, 0.2, 0.3, 0.3])  # 40, 40, 60, 60 users


def test_reliance_curve_draws_hrli_over_seen_last_items_dotted_where_recorded(tmp_path: Path) -> None:
    import json
    import shutil

    from resdom.report import find_run_dirs, read_runs
    from resdom.report.figures import fig_reliance_curve

    shutil.copytree(FIXTURES, tmp_path / "runs")
    for seed, values in ((1, (0.3, 0.9)), (2, (0.5, 0.7))):  # HRLI@1_seen at epochs 2, 4 -> means 0.4, 0.8
        log = tmp_path / "runs" / f"toyA_sasrec_seed{seed}" / "metrics.jsonl"
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        marked = iter(values)
        for r in rows:
            if "monitor" in r:
                r["monitor"]["HRLI@1_seen"] = next(marked)
        log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fig = fig_reliance_curve(read_runs(find_run_dirs(tmp_path / "runs")))
    lines = fig.figure.axes[0].get_lines()
    dotted = [line for line in lines if line.get_linestyle() == ":"]
    assert len(dotted) == 1 and to_hex(dotted[0].get_color()) == MODEL_COLORS["sasrec"].lower()
    assert list(dotted[0].get_ydata()) == pytest.approx([0.4, 0.8]) and len(lines) == 5  # + HRLI, HRL2I x 2 models
    legend = [t.get_text() for t in fig.figure.legends[0].get_texts()]
    assert legend[-2:] == ["HRLI@1 over last items seen in training", "hollow: one seed, no spread"]  # bsarec
    # toyA's BSARec (one seed) is drawn with hollow markers, SASRec (two seeds) with filled ones
    faces = {to_hex(line.get_color()): line.get_markerfacecolor() for line in lines if line.get_linestyle() == "-"}
    assert faces[MODEL_COLORS["bsarec"].lower()] == "white"
    assert to_hex(faces[MODEL_COLORS["sasrec"].lower()]) == MODEL_COLORS["sasrec"].lower()
    plain = fig_reliance_curve(read_runs(find_run_dirs(FIXTURES)))
    assert "HRLI@1 over last items seen in training" not in [t.get_text() for t in plain.figure.legends[0].get_texts()]


def test_many_data_sets_wrap_onto_lines_of_panels() -> None:
    """Six data sets: three panels on the first line, three on the second, no empty axes left in the grid, and the
    figure no wider than the page."""
    from resdom.report.collect import RunRecord
    from resdom.report.figures import MAX_COLUMNS, PAGE_WIDTH, fig_reliance_by_model, fig_shuffle

    datasets = [f"set{i}" for i in range(6)]
    shuffle = {"n_users": 10, "original": {"HR@10": 0.1, "NDCG@10": 0.05},
               "perturbations": {p: {"metrics": {"HR@10": 0.08, "NDCG@10": 0.04}} for p in ("keep_last", "full")}}
    runs = [RunRecord(Path(f"/x/{d}/sasrec/seed1"), d, "sasrec", 1, "gts",
                      diagnostics={"hrli": {"n_users": 10, "values": {"HRLI@1": 0.5 + 0.05 * i, "HRL2I@1": 0.0}},
                                   "shuffle": shuffle})
            for i, d in enumerate(datasets)]
    assert MAX_COLUMNS == 3
    for fig in (fig_reliance_by_model(runs, "hrli").figure, fig_shuffle(runs, "shuffle").figure):
        assert [ax.get_title() for ax in fig.axes] == datasets and fig.get_figwidth() <= PAGE_WIDTH
        grid = [ax.get_subplotspec() for ax in fig.axes]
        assert [(g.rowspan.start, g.colspan.start) for g in grid] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    bars = next(c for c in fig_reliance_by_model(runs, "hrli").figure.axes[5].containers if hasattr(c, "patches"))
    assert bars.patches[0].get_height() == pytest.approx(0.75)  # set5's HRLI@1
    assert {ax.get_ylabel() for ax in fig_shuffle(runs, "shuffle").figure.axes} == {"test NDCG@10"}  # one statistic


def test_remedy_points_close_together_get_an_inset() -> None:
    from matplotlib.figure import Figure

    from resdom.report.figures import _zoom_on_points

    def panel(points: list[tuple[float, float]]):
        ax = Figure().add_subplot()
        ax.plot([0.0, 0.9], [0.008, 0.020])  # an alpha sweep's span
        drawn = [{"x": x, "y": y, "xerr": 0.005, "yerr": 0.0002} for x, y in points]
        for p in drawn:
            ax.errorbar(**p)
        return ax, _zoom_on_points(ax, drawn, (np.array([0.0, 0.9]), np.array([0.008, 0.020])))

    ax, inset = panel([(0.83, 0.0194), (0.82, 0.0195)])  # the variants on the base's spot
    assert inset is not None and len(ax.child_axes) == 1
    lo, hi = inset.get_xlim()
    assert lo < 0.815 and hi > 0.835 and hi - lo < 0.1  # the points and their error bars, enlarged
    assert panel([(0.83, 0.0194), (0.30, 0.0150)])[1] is None  # spread over the axes: nothing to enlarge
    # a readout variant far from the base: the inset still enlarges the two near the base, and only them
    ax, inset = panel([(0.83, 0.0194), (0.19, 0.0205), (0.82, 0.0195)])
    assert inset is not None and inset.get_xlim()[0] > 0.7 and len(inset.containers) == 2
    assert panel([(0.83, 0.0194)])[1] is None  # one point


def test_alpha_figures_give_each_data_set_a_panel_and_one_statistic() -> None:
    """One figure per question (mixing, HRLI@1, HR@10 against alpha), each with a panel per data set holding that
    data set's lines only, however many data sets (the figure stays within the page); the API's figure of one
    result shows the three statistics side by side."""
    from resdom.report.collect import RunRecord
    from resdom.report.figures import PAGE_WIDTH, fig_alpha_accuracy, fig_alpha_hrli, fig_alpha_mixing, fig_alpha_sweep

    def runs(n: int) -> list[RunRecord]:
        rows = [{"alpha": a, "HRLI@1": 0.1 * i + a / 2, "HR@10": 0.1, "NDCG@10": 0.05, "mixing_all": {"+Res": 0.2}}
                for i, a in enumerate((0.0, 0.5, 1.0))]
        return [RunRecord(Path(f"/x/set{i}/sasrec/seed1"), f"set{i}", "sasrec", 1, "gts", diagnostics={
                    "alpha": {"n_users": 10, "rows": [{**r, "HRLI@1": r["HRLI@1"] + i} for r in rows]}})
                for i in range(n)]

    for n in (1, 5, 9):
        fig = fig_alpha_hrli(runs(n), "alpha")
        assert fig.key == "alpha_hrli" and "HRLI@1" in fig.title and fig.figure.get_figwidth() <= PAGE_WIDTH
        assert [ax.get_title() for ax in fig.figure.axes] == [f"set{i}" for i in range(n)]
        for i, ax in enumerate(fig.figure.axes):
            (line,) = ax.get_lines()  # set i's line alone
            assert list(line.get_ydata()) == pytest.approx([i + 0.0, i + 0.35, i + 0.7])
            assert ax.get_ylabel() == "HRLI@1"
    assert fig_alpha_mixing(runs(2), "alpha").figure.axes[0].get_ylabel() == "mixing ratio at +Res"
    assert fig_alpha_accuracy(runs(2), "alpha").figure.axes[0].get_ylabel() == "test HR@10"
    api = fig_alpha_sweep(runs(1), "alpha").figure
    assert [ax.get_title() for ax in api.axes] == ["mixing ratio at +Res", "HRLI@1", "test HR@10"]


def test_a_band_of_shares_stays_inside_0_and_1(tmp_path: Path) -> None:
    """Two seeds whose Recovery(α) is 0 and 1 at every α: mean 0.5, one SD 0.707; the band is drawn from 0 to 1, not
    from -0.21 to 1.21 (a share cannot leave [0, 1]), and the line keeps the mean."""
    import json

    from resdom.report.figures import fig_recovery

    dirs = []
    for seed, value in ((1, 0.0), (2, 1.0)):
        run = tmp_path / f"seed{seed}"
        shutil.copytree(FIXTURES / f"toyA_sasrec_seed{seed}", run)
        path = run / "diagnostics" / "recovery.json"
        recovery = json.loads(path.read_text())
        for row in recovery["test"]["curve"]:
            row["recovery"] = value
        path.write_text(json.dumps(recovery))
        dirs.append(run)
    runs = read_runs(dirs)
    assert len({r.seed for r in runs}) == 2
    fig = fig_recovery(runs, "recovery")
    assert fig is not None
    ax = fig.figure.axes[0]
    band = [c for c in ax.collections if len(c.get_paths()) and c.get_paths()[0].vertices.shape[0] > 4][0]
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(0.0) and ys.max() == pytest.approx(1.0)
    line = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1][0]
    assert np.allclose(line.get_ydata(), 0.5)


def test_the_remedies_figure_labels_alpha_1_and_0_and_keeps_its_labels_apart() -> None:
    """On the store's remedy cells: each panel labels the trained model (α=1) and α=0 on the base's sweep, and no
    two α labels sit within 15% of the curve's span on both axes (the sweep's points near α=1 bunch together)."""
    from resdom.report.figures import fig_remedies
    from resdom.report.tables import remedy_runs

    store = Path(__file__).resolve().parents[1] / "results"
    fig = fig_remedies(remedy_runs(read_runs(find_run_dirs(store))))
    assert fig is not None
    panels = [ax for ax in fig.figure.axes if ax.get_title()]
    assert panels
    for ax in panels:
        labels = {t.get_text(): t.xy for t in ax.texts if t.get_text().startswith("α=")}
        assert {"α=1", "α=0"} <= set(labels), ax.get_title()
        sweep = next(line for line in ax.get_lines() if len(line.get_xdata()) > 3)
        span_x, span_y = np.ptp(sweep.get_xdata()), np.ptp(sweep.get_ydata())
        points = list(labels.values())
        for i, (x0, y0) in enumerate(points):
            for x1, y1 in points[i + 1:]:
                assert abs(x0 - x1) > 0.15 * span_x or abs(y0 - y1) > 0.15 * span_y, ax.get_title()


@pytest.mark.slow
def test_a_dollar_in_a_name_is_drawn_as_written(tmp_path: Path) -> None:
    """A data set or model named ``a$\\\\frac$`` made matplotlib parse mathtext and raise (a ParseException
    traceback from `resdom report`); ``$5 and $10`` came out in italics. Maker: the fixture runs, one renamed."""
    import json

    from resdom.report.figures import plain_text

    root = tmp_path / "runs"
    shutil.copytree(FIXTURES, root, ignore=shutil.ignore_patterns("*.py"))
    name = "a$\\\\frac{1}{0}$ $5"
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"]["source"] = name
    config.write_text(json.dumps(data))
    figures = all_figures(read_runs(find_run_dirs(root)))
    texts = [t for f in figures for t in f.figure.findobj(lambda a: hasattr(a, "get_text") and name in a.get_text())]
    assert texts and not any(t.get_parse_math() for t in texts)
    for f in figures:
        f.png_bytes()  # renders: no mathtext parse

    @plain_text
    def made() -> bool:
        from matplotlib.text import Text

        return Text(text=name).get_parse_math()

    assert made() is False


def test_each_finding_averages_the_seeds_that_hold_its_diagnostic(tmp_path: Path) -> None:
    """Seed 2 of toyA / sasrec holds hrli.json only: the heading said "mean of 2 seeds" over findings that rest on
    seed 1 alone, and finding 3 set seed 1's test HR@10 at α* (0.297) against the mean of both seeds' at α = 1
    (0.320, seed 2's 0.34 included) rather than seed 1's own (0.300)."""
    from resdom.report import finding_lines

    for name in ("toyA_sasrec_seed1", "toyA_sasrec_seed2"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    for part in ("mixing", "recovery", "alpha", "shuffle"):
        (tmp_path / "toyA_sasrec_seed2" / "diagnostics" / f"{part}.json").unlink()
    lines = finding_lines(read_runs([tmp_path / "toyA_sasrec_seed1", tmp_path / "toyA_sasrec_seed2"]))
    assert lines[0] == "toyA / SASRec (mean of 2 seeds):"
    assert lines[1].endswith("the residual swamps the context attention gathered (mean of 1 of the 2 seeds: the "
                             "others lack it).")
    assert "HRLI@1 = 0.850 vs HRL2I@1" in lines[2] and "seeds: the others lack it" not in lines[2]  # both seeds
    assert lines[3].endswith("with test HR@10 0.297 vs 0.300 at α=1 (mean of 1 of the 2 seeds: the others lack it).")


def test_a_recovery_rate_of_fewer_seeds_says_so(tmp_path: Path) -> None:
    """Seed 2 of toyA / sasrec swept another grid, without α = 0.1: finding 3's "recovers x at α=0.1" was seed 1's
    alone, unmarked among rates of both seeds; now it says (n=1), as the table's cell does."""
    import json

    from resdom.report import finding_lines

    for name in ("toyA_sasrec_seed1", "toyA_sasrec_seed2"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    path = tmp_path / "toyA_sasrec_seed2" / "diagnostics" / "recovery.json"
    rec = json.loads(path.read_text())
    rec["test"]["curve"] = [row for row in rec["test"]["curve"] if abs(row["alpha"] - 0.1) > 1e-9]
    path.write_text(json.dumps(rec))
    text = "\n".join(finding_lines(read_runs([tmp_path / "toyA_sasrec_seed1", tmp_path / "toyA_sasrec_seed2"])))
    one = [row["recovery"] for row in json.loads((FIXTURES / "toyA_sasrec_seed1" / "diagnostics" /
                                                  "recovery.json").read_text())["test"]["curve"] if row["alpha"] == 0.1]
    assert f"lowering α recovers {100 * one[0]:.1f}% at α=0.1 (n=1), " in text
    assert "at α=0.2 (n=" not in text and "at α=0.3 (n=" not in text


def test_report_html_numbers_each_finding_as_report_md_does(tmp_path: Path) -> None:
    """A run with hrli.json only has finding 2 alone: report.md says "2. HRLI@1 = ...", report.html's list numbered
    it 1."""
    from resdom.report.html import render_html

    run = tmp_path / "toyA_bert4rec_seed1"
    shutil.copytree(FIXTURES / "toyA_sasrec_seed1", run)
    for part in ("mixing", "recovery", "alpha", "shuffle"):
        (run / "diagnostics" / f"{part}.json").unlink()
    page = render_html(read_runs([run]), [], [], "t")
    assert '<ol><li value="2">HRLI@1 = 0.800 vs HRL2I@1' in page and "<li>HRLI@1" not in page


def test_a_figure_drawn_again_gives_the_same_bytes() -> None:
    """Regenerating a report churns no file in git: the PDF held the time of drawing (its CreationDate), so two
    reports of the same runs differed in every PDF."""
    from resdom.report.figures import fig_hrli

    def files() -> dict:
        fig = fig_hrli(_five_model_runs(), "hrli")
        assert fig is not None
        return {p.name: b for p, b in fig.files("figs").items()}

    first, second = files(), files()
    assert set(first) == {"hrli.png", "hrli.pdf"}
    assert b"CreationDate" not in first["hrli.pdf"]
    assert first == second


def test_a_value_only_one_seed_holds_gets_no_error_bar_but_the_one_seed_mark() -> None:
    """Of two seeds only one holds HRL2I@1 (the tables print no SD there): its bar had an error bar of zero width,
    caps and all, claiming seeds that agree exactly, and no one-seed mark; a remedy point of one seed had zero-width
    caps too. Now no error bar, the hollow mark and its legend entry; two seeds that agree keep their bar of 0."""
    from resdom.report.collect import RunRecord
    from resdom.report.figures import fig_hrli, fig_reliance_by_model, fig_remedies

    runs = [RunRecord(Path(f"/x/d/sasrec/seed{seed}"), "d", "sasrec", seed, "gts", diagnostics={"hrli": {
        "n_users": 100, "values": {"HRLI@1": 0.3 + 0.1 * seed, "HRLI@10": 0.6, **({"HRL2I@1": 0.05} if seed == 1
                                                                                    else {})}}})
            for seed in (1, 2)]

    def error_bars(ax) -> list:  # per bar container: the error bar segments' y ends ([] where none is drawn)
        return [[tuple(np.round(s[:, 1], 4)) if len(s) else () for s in c.errorbar.lines[2][0].get_segments()]
                for c in ax.containers if hasattr(c, "patches") and c.errorbar is not None]

    def hollow(ax) -> list:
        return [(float(x), float(y)) for line in ax.get_lines() if line.get_markerfacecolor() == "white"
                for x, y in zip(line.get_xdata(), line.get_ydata())]

    ax = fig_hrli(runs, "hrli").figure.axes[0]  # bars: HRLI@1, HRL2I@1, HRLI@10, HRL2I@10
    sd = float(np.std([0.4, 0.5], ddof=1))
    assert error_bars(ax) == [[(round(0.45 - sd, 4), round(0.45 + sd, 4)), (), (0.6, 0.6), ()]]
    assert hollow(ax) == [(1.0, 0.05)]
    figure = fig_reliance_by_model(runs, "hrli")
    assert [error_bars(a) for a in figure.figure.axes] == [[[(round(0.45 - sd, 4), round(0.45 + sd, 4))], [()]]]
    assert hollow(figure.figure.axes[0]) == [(0.2, 0.05)]
    assert "hollow: one seed, no spread" in [t.get_text() for t in figure.figure.legends[0].get_texts()]
    assert "hollow: one seed, no spread" in [t.get_text() for t in fig_hrli(runs, "hrli").figure.legends[0].get_texts()]

    variants = [RunRecord(Path(f"/x/d/{label}/seed{seed}"), "d", label, seed, "gts",
                          diagnostics={"hrli": {"n_users": 100, "values": {"HRLI@1": 0.3 + 0.01 * seed}}},
                          metrics={"test": {"NDCG@10": 0.05 + 0.001 * seed}})
                for label, seeds in (("sasrec", (1, 2)), ("sasrec-res0.5", (1,))) for seed in seeds]
    points = {c.get_label(): c for c in fig_remedies(variants).figure.axes[0].containers}
    def drawn(point) -> list:  # the lengths of its error bars (x, then y): 0 where none is drawn
        return [len(s) for lines in point.lines[2] for s in lines.get_segments()]

    assert drawn(points["sasrec (n=2)"]) == [2, 2] and drawn(points["sasrec-res0.5 (n=1)"]) == [0, 0]


def test_an_alpha_curve_only_one_seed_holds_is_drawn_as_one_seed() -> None:
    """Of two seeds only one holds HR@10 in its alpha sweep: the accuracy curve rests on that seed, so it takes the
    hollow one-seed markers (with their legend entry) and no band, as a group of one seed does; it had filled
    markers and a band of zero width, as if two seeds agreed exactly. The curve both seeds hold keeps its band."""
    from resdom.report.collect import RunRecord
    from resdom.report.figures import fig_alpha_accuracy, fig_alpha_hrli

    def rows(seed: int) -> list:
        return [{"alpha": a, "HRLI@1": 0.1 * seed + a / 2, **({"HR@10": 0.1 + a / 10} if seed == 1 else {})}
                for a in (0.0, 0.5, 1.0)]

    runs = [RunRecord(Path(f"/x/d/sasrec/seed{seed}"), "d", "sasrec", seed, "gts",
                      diagnostics={"alpha": {"n_users": 10, "rows": rows(seed)}}) for seed in (1, 2)]
    accuracy = fig_alpha_accuracy(runs, "alpha").figure
    (line,) = accuracy.axes[0].get_lines()
    assert list(line.get_ydata()) == pytest.approx([0.1, 0.15, 0.2]) and line.get_markerfacecolor() == "white"
    assert not accuracy.axes[0].collections  # no band
    legend = [t.get_text() for t in accuracy.legends[0].get_texts()]
    assert "hollow: one seed, no spread" in legend and "SASRec (n=2)" in legend
    hrli = fig_alpha_hrli(runs, "alpha").figure
    assert hrli.axes[0].get_lines()[0].get_markerfacecolor() != "white" and len(hrli.axes[0].collections) == 1


def test_a_seed_whose_diagnostic_holds_no_number_is_not_counted_in_n() -> None:
    """A seed's hrli / shuffle / mixing file without a number (``"values": {}``) counted in the legend's n, n=3
    beside bars that average 2 seeds, and a result without any drew empty panels; the seeds counted are now those
    with a number the figure draws, and nothing to draw is no figure (``Diagnosis.plot``: "holds nothing to plot")."""
    from resdom.errors import ResdomError
    from resdom.report.collect import RunRecord
    from resdom.report.figures import fig_hrli, fig_mixing_stages, fig_reliance_by_model, fig_shuffle, result_figure

    def run(seed: int, full: bool) -> RunRecord:
        return RunRecord(Path(f"/x/d/sasrec/seed{seed}"), "d", "sasrec", seed, "gts", diagnostics={
            "hrli": {"n_users": 100, "values": {"HRLI@1": 0.4, "HRL2I@1": 0.01} if full else {}},
            "shuffle": {"n_users": 100, "original": {"NDCG@10": 0.05} if full else {}},
            "mixing": {"n_users": 100, "pooled": {"all": {"Attn": 0.5, "+Res": 0.1}} if full else {}}})

    runs = [run(1, True), run(2, True), run(3, False)]
    for build, name in ((fig_hrli, "hrli"), (fig_reliance_by_model, "hrli"), (fig_shuffle, "shuffle"),
                        (fig_mixing_stages, "mixing")):
        legend = [t.get_text() for t in build(runs, name).figure.legends[0].get_texts()]
        assert "SASRec (n=2)" in legend, (name, legend)
        assert build(runs[2:], name) is None
    for name in ("hrli", "shuffle", "mixing"):
        with pytest.raises(ResdomError, match="holds nothing to plot"):
            result_figure(name, runs[2].diagnostics[name])


def test_a_monitor_curve_only_one_seed_holds_says_what_its_hollow_markers_mean() -> None:
    """Of two seeds only one's training monitor recorded HRL2I@1: its curve rests on that seed and is drawn with
    hollow markers, which the legend did not explain (it explained them only for a model of one seed)."""
    from resdom.report.collect import RunRecord
    from resdom.report.figures import fig_reliance_curve

    def run(seed: int) -> RunRecord:
        monitor = {"n_users": 50, "HRLI@1": 0.2, **({"HRL2I@1": 0.01} if seed == 1 else {})}
        return RunRecord(Path(f"/x/d/sasrec/seed{seed}"), "d", "sasrec", seed, "gts",
                         curve=[{"epoch": e, "monitor": monitor} for e in (2, 4)])

    fig = fig_reliance_curve([run(1), run(2)]).figure
    faces = {line.get_linestyle(): line.get_markerfacecolor() for line in fig.axes[0].get_lines()}
    assert faces["--"] == "white" and faces["-"] != "white"  # HRL2I@1 (dashed) rests on one seed, HRLI@1 on two
    assert "hollow: one seed, no spread" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_thirty_models_in_one_panel_leave_the_panel_room() -> None:
    """A report of 30 models on one data set: the legend (a row per model or two) squeezed the panel to nothing
    (constrained layout gave up, with a warning, and the bars were drawn over the legend); the figure now grows
    with its legend's rows, and a figure of usual legend keeps its height."""
    import warnings

    from resdom.report.collect import RunRecord
    from resdom.report.figures import PANEL_HEIGHT, fig_hrli, fig_reliance_by_model, fig_shuffle

    runs = [RunRecord(Path(f"/x/d/m{i}/seed1"), "d", f"model-number-{i:02d}", 1, "gts", diagnostics={
        "hrli": {"n_users": 10, "values": {"HRLI@1": 0.1 + i / 100, "HRL2I@1": 0.01}},
        "shuffle": {"n_users": 10, "original": {"NDCG@10": 0.1}}}) for i in range(30)]
    for build, name in ((fig_hrli, "hrli"), (fig_reliance_by_model, "hrli"), (fig_shuffle, "shuffle")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "constrained_layout not applied because axes sizes collapsed to zero"
            fig = build(runs, name)
            fig.png_bytes()
        (ax,) = fig.figure.axes
        assert ax.get_position().height * fig.figure.get_figheight() > 1.0, name  # inches of panel
    assert fig_hrli(runs[:2], "hrli").figure.get_figheight() == pytest.approx(PANEL_HEIGHT + 0.5)
