"""The results store: cells exported from finished runs, read back by the report, and documents refilled from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import invoke

from resdom.diagnostics.evidence import UserEvidence
from resdom.diagnostics.runner import run_all
from resdom.errors import ResdomError
from resdom.pipeline.reproduce import GridSpec, reproduce
from resdom.pipeline.store import MAX_CELL_BYTES, export_cell, fill_blocks, store_cells
from resdom.report.collect import read_run
from resdom.report.tables import run_values
from resdom.runs import checkpoint_id

SOURCE = "synthetic:n_users=120,n_items=30,min_len=6,max_len=14,seed=3"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    from resdom.data.prepare import prepare_split
    from resdom.models.config import make_model_config
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("run")
    fit(prepare_split(SOURCE, protocol="gts"), make_model_config(max_len=12, hidden=16, layers=1, heads=2),
        TrainConfig(epochs=2, device="cpu", batch_size=32), out, progress=False,
        data_info={"source": SOURCE, "protocol": "gts"})
    run_all(out, alphas=(1.0, 0.5, 0.0), seeds=(0,), progress=False)
    return out


def test_export_writes_a_small_text_record_of_the_checkpoint(finished_run, tmp_path):
    cell = export_cell(finished_run, tmp_path / "results", "toy", "sasrec", 1, compute={"train_seconds": 12.0})
    assert cell == tmp_path / "results" / "toy" / "sasrec" / "seed1"
    names = sorted(str(p.relative_to(cell)) for p in cell.rglob("*") if p.is_file())
    assert names == ["cell.json", "config.json", "curve.jsonl", "diagnostics/alpha.json", "diagnostics/hrli.json",
                     "diagnostics/mixing.json", "diagnostics/recovery.json", "diagnostics/shuffle.json",
                     "diagnostics/summary.json", "metrics.json", "users.npz"]
    assert (cell / "users.npz").read_bytes() == (finished_run / "diagnostics" / "users.npz").read_bytes()
    assert sum(p.stat().st_size for p in cell.rglob("*") if p.is_file()) < MAX_CELL_BYTES
    ckpt = checkpoint_id(finished_run / "model.safetensors")
    meta = json.loads((cell / "cell.json").read_text())
    assert (meta["checkpoint"], meta["label"], meta["seed"], meta["epochs_run"]) == (ckpt, "sasrec", 1, 2)
    config = json.loads((cell / "config.json").read_text())
    assert config["label"] == "sasrec" and config["model"]["hidden"] == 16
    assert "thresholds" in config["data"]["manifest"] and "preprocessing" not in config["data"]["manifest"]
    assert len((cell / "curve.jsonl").read_text().splitlines()) == 2
    # the report reads the cell like a run directory, with the checkpoint check against metrics.json
    rec = read_run(cell)
    assert rec.stale == [] and rec.model == "sasrec" and rec.diag("hrli")["checkpoint"] == ckpt
    v = run_values(rec)
    assert v["NDCG@10"] == json.loads((finished_run / "metrics.json").read_text())["test"]["metrics"]["NDCG@10"]
    assert (v["epochs_run"], v["train_min"]) == (2.0, 0.2)
    assert store_cells(tmp_path / "results") == [cell]


@pytest.mark.parametrize("damage", ['{"epoch": 3, "lo', '{"epoch": 1, "loss": 0.5}'])
def test_a_run_whose_curve_is_damaged_is_not_stored(finished_run, tmp_path, damage):
    """A finished run's metrics.jsonl with a torn last line (or an epoch repeated) was copied into the store as it was,
    where the report then refused the cell's curve.jsonl, and the grid's compute record of the cell failed first with
    a JSONDecodeError naming no file. Both refuse it in one line naming the file and line; nothing is stored."""
    import shutil

    from resdom.pipeline.reproduce import cell_compute

    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    with (run / "metrics.jsonl").open("a") as f:
        f.write(damage)
    for call in (lambda: cell_compute(run), lambda: export_cell(run, tmp_path / "results", "toy", "sasrec", 1)):
        with pytest.raises(ResdomError, match=f"^{run / 'metrics.jsonl'}:3: .*train the run anew"):
            call()
    assert not (tmp_path / "results").exists()


def test_an_unfinished_or_stale_run_is_not_stored(finished_run, tmp_path):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    (run / "diagnostics" / "summary.json").unlink()
    with pytest.raises(ResdomError, match="not finished"):
        export_cell(run, tmp_path / "results", "toy", "sasrec", 1)
    assert not (tmp_path / "results").exists()


def test_evidence_of_another_checkpoint_is_refused_and_an_old_one_removed(finished_run, tmp_path):
    import shutil

    from resdom.diagnostics.evidence import read_users

    run = tmp_path / "copy"
    shutil.copytree(finished_run, run)
    users = run / "diagnostics" / "users.npz"
    header, arrays = read_users(users)
    header["checkpoint"] = "0000000000000000"
    users.write_bytes(UserEvidence(header, arrays).to_bytes())
    with pytest.raises(ResdomError, match=r"users.npz: computed on another checkpoint \(0000000000000000, not "):
        export_cell(run, tmp_path / "results", "toy", "sasrec", 1)
    # a cell re-exported from a run without evidence loses an earlier checkpoint's users.npz
    cell = tmp_path / "results" / "toy" / "sasrec" / "seed1"
    cell.mkdir(parents=True)
    (cell / "users.npz").write_bytes(users.read_bytes())
    users.unlink()
    export_cell(run, tmp_path / "results", "toy", "sasrec", 1)
    assert (cell / "cell.json").is_file() and not (cell / "users.npz").exists()


def test_rediagnosing_a_stored_cell_adds_its_evidence(finished_run, tmp_path, monkeypatch):
    """scripts/rediagnose_cells.py on a cell stored before users.npz existed: whatever --what says, the run
    directory with the cell's checkpoint gains users.npz and the cell is exported again with it."""
    import importlib
    import shutil
    import sys

    from resdom.pipeline.common import missing_diagnostics

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "scripts"))
    rediagnose = importlib.import_module("rediagnose_cells")
    run = tmp_path / "runs" / "toy" / "sasrec" / "seed1"
    shutil.copytree(finished_run, run)
    (run / "diagnostics" / "users.npz").unlink()
    assert missing_diagnostics(run) == ["users"]
    assert rediagnose.with_evidence(["hrli"], run) == ["hrli", "users"]
    cell = export_cell(run, tmp_path / "results", "toy", "sasrec", 1)
    assert not (cell / "users.npz").exists()
    hrli = (run / "diagnostics" / "hrli.json").read_bytes()
    monkeypatch.setattr(sys, "argv", ["rediagnose_cells.py", str(cell), "--store", str(tmp_path / "results"),
                                      "--runs", str(tmp_path / "runs"), "--what", "hrli"])
    assert rediagnose.main() == 0
    assert (cell / "users.npz").read_bytes() == (run / "diagnostics" / "users.npz").read_bytes()
    assert missing_diagnostics(run) == [] and rediagnose.with_evidence(["hrli"], run) == ["hrli"]
    assert json.loads(hrli)["checkpoint"] == json.loads((cell / "diagnostics" / "hrli.json").read_text())["checkpoint"]


def test_fill_blocks_replaces_only_named_blocks():
    doc = "intro\n<!-- resdom:table hrli -->\nold\n<!-- /resdom:table -->\nprose\n"
    assert fill_blocks(doc, {"hrli": "| new |\n"}) == "intro\n<!-- resdom:table hrli -->\n| new |\n" \
        "<!-- /resdom:table -->\nprose\n"
    with pytest.raises(ResdomError, match="'hrli'"):
        fill_blocks(doc, {"mixing": ""}, where="doc.md")


@pytest.mark.slow
def test_grid_stores_cells_under_their_label_and_report_refills_a_document(tmp_path, capsys):
    spec = GridSpec([SOURCE], ["sasrec-tts"], [1], tmp_path / "grid", protocol="gts", device="cpu", epochs=1,
                    store=tmp_path / "results",
                    model_values={"max_len": 12, "hidden": 16, "layers": 1}, train_values={"batch_size": 32})
    result = reproduce(spec, progress=False, echo=lambda _: None)
    assert [o.status for o in result.outcomes] == ["done"], result.outcomes
    cell = tmp_path / "results" / SOURCE / "sasrec-tts" / "seed1"
    config = json.loads((cell / "config.json").read_text())
    assert config["label"] == "sasrec-tts" and config["model"]["query_ln"] and config["model"]["final_ln"]
    assert read_run(cell).model == "sasrec-tts"
    doc = tmp_path / "doc.md"
    doc.write_text("# Results\n<!-- resdom:table accuracy -->\n<!-- /resdom:table -->\n")
    assert invoke("report", str(tmp_path / "results"), "--out", str(tmp_path / "rep"), "--doc", str(doc)) == 0
    text = doc.read_text()
    assert "| Data set | Model | Seeds | HR@10 |" in text and "sasrec-tts | 1 seed |" in text
    # a second pass over the grid stores the finished cell again without training it
    again = reproduce(spec, progress=False, echo=lambda _: None)
    assert [o.status for o in again.outcomes] == ["skipped"] and again.outcomes[0].stored == str(cell)
    # a finished run stored before the per-user evidence existed gains it on the next pass, without training
    run = tmp_path / "grid" / SOURCE / "sasrec-tts" / "seed1"
    assert (cell / "users.npz").read_bytes() == (run / "diagnostics" / "users.npz").read_bytes()
    (run / "diagnostics" / "users.npz").unlink()
    (cell / "users.npz").unlink()
    weights = (run / "model.safetensors").stat().st_mtime_ns
    again = reproduce(spec, progress=False, echo=lambda _: None)
    assert [o.status for o in again.outcomes] == ["skipped"] and (cell / "users.npz").is_file()
    assert (run / "model.safetensors").stat().st_mtime_ns == weights


@pytest.mark.slow
def own_checkpoint(cell: Path, checkpoint: str) -> None:
    """Maker: rename the checkpoint every file of a store cell names (its JSON files and users.npz's header)."""
    old = json.loads((cell / "cell.json").read_text())["checkpoint"]
    for path in [cell / "cell.json", cell / "metrics.json", *(cell / "diagnostics").glob("*.json")]:
        path.write_text(path.read_text().replace(old, checkpoint))
    if (cell / "users.npz").is_file():
        from resdom.diagnostics.evidence import read_users

        header, arrays = read_users(cell / "users.npz")
        (cell / "users.npz").write_bytes(UserEvidence({**header, "checkpoint": checkpoint}, arrays).to_bytes())


@pytest.mark.slow  # over 5 s of CPU: the fast subset stays under 2 minutes on 2 cores
def test_report_fills_the_remedies_block_of_a_second_document_from_the_variants_and_their_base(
        finished_run, tmp_path):
    """A store with a remedy variant: the remedies table holds the variant and its base on that data set only (not
    the other model, not the data set without variants), the figure is drawn, and a bad document writes nothing."""
    store = tmp_path / "results"
    cells = (("toy", "sasrec"), ("toy", "sasrec-gate"), ("toy", "duorec"), ("other", "sasrec"))
    for i, (dataset, label) in enumerate(cells):
        cell = export_cell(finished_run, store, dataset, label, 1)
        config = json.loads((cell / "config.json").read_text())
        config["data"]["source"] = dataset  # the report's data set name
        (cell / "config.json").write_text(json.dumps(config))
        if i < len(cells) - 1:  # one run stands for four models: each cell gets a checkpoint of its own (the store
            own_checkpoint(cell, f"{i:016x}")  # refuses a checkpoint named under two models or data sets)
    results_doc, remedies_doc = tmp_path / "results.md", tmp_path / "remedies.md"
    results_doc.write_text("<!-- resdom:table accuracy -->\n<!-- /resdom:table -->\n")
    remedies_doc.write_text("# Remedies\n<!-- resdom:table remedies -->\nold\n<!-- /resdom:table -->\nprose\n")
    bad = tmp_path / "bad.md"
    bad.write_text("<!-- resdom:table nope -->\n<!-- /resdom:table -->\n")
    rep = tmp_path / "rep"
    args = ["report", str(store), "--out", str(rep), "--doc", str(results_doc)]
    assert invoke(*args, "--doc", str(bad)) == 2
    assert results_doc.read_text() == "<!-- resdom:table accuracy -->\n<!-- /resdom:table -->\n"  # nothing written
    assert not rep.exists()  # the documents are checked before the report is written
    assert invoke(*args, "--doc", str(remedies_doc)) == 0
    text = remedies_doc.read_text()
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith(("| toy", "| other"))]
    assert [[c.strip() for c in r] for r in rows] == [["toy", "sasrec"], ["toy", "sasrec-gate"]]
    assert text.endswith("<!-- /resdom:table -->\nprose\n") and "old" not in text
    assert "| toy | duorec |" in results_doc.read_text() and "| other | sasrec |" in results_doc.read_text()
    assert (rep / "figures" / "remedies.png").is_file() and (rep / "tables" / "remedies.csv").is_file()


def test_a_resumed_cell_keeps_diagnostics_of_its_checkpoint_and_renames_old_metrics(finished_run, tmp_path):
    """A cell whose metrics.json predates checkpoint names (or lacks one diagnostic) is completed, not redone."""
    import shutil

    from resdom.data.sequences import SplitData
    from resdom.pipeline.common import missing_diagnostics, train_and_diagnose

    run = tmp_path / "old"
    shutil.copytree(finished_run, run)
    metrics = json.loads((run / "metrics.json").read_text())
    del metrics["checkpoint"]
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "diagnostics" / "alpha.json").unlink()
    kept = (run / "diagnostics" / "hrli.json").stat().st_mtime_ns
    assert missing_diagnostics(run) == ["alpha"]
    config = json.loads((run / "config.json").read_text())
    out = train_and_diagnose(SplitData.load(run / "data"), "sasrec", run, source=SOURCE, protocol="gts",
                             model_values={k: v for k, v in config["model"].items() if k not in ("name", "n_items")},
                             train_values={"epochs": 2, "batch_size": 32, "device": "cpu"}, device="cpu",
                             progress=False)
    assert out["metrics"]["checkpoint"] == checkpoint_id(run / "model.safetensors")
    assert (run / "diagnostics" / "hrli.json").stat().st_mtime_ns == kept  # not recomputed
    assert missing_diagnostics(run) == [] and export_cell(run, tmp_path / "results", "toy", "sasrec", 1).is_dir()


def test_cell_compute_records_the_threads_the_epochs_ran_with(finished_run):
    from resdom.pipeline.reproduce import cell_compute

    compute = cell_compute(finished_run)  # the fixture trained with torch.set_num_threads(1) and no train.threads
    assert (compute["epochs"], compute["threads"], compute["device"]) == (2, 1, "cpu")
    least, most = compute["load"]  # the machine's load as the two epochs ended
    assert 0 <= least <= most


def test_cell_compute_records_the_cpus_that_trained_the_cell(finished_run, tmp_path: Path) -> None:
    """A cell's compute said ``machine: x86_64`` only, which tells no CPU from another (floating point differs
    between kinds, and minutes are read against them); each epoch names its CPU now (Linux's /proc/cpuinfo, an ARM
    board's Hardware line, else platform.processor()) and the cell lists those of its epochs, never the CPU of the
    machine that exports or diagnoses it again."""
    from resdom.pipeline.reproduce import _cpu_models, cell_compute
    from resdom.training.trainer import cpu_model

    intel = tmp_path / "intel"
    intel.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 85\n"
                     "model name\t: Intel(R)  Xeon(R) Gold 6148 CPU @ 2.40GHz\n\nprocessor\t: 1\n"
                     "model name\t: Another\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 108.00\nCPU part\t: 0xd08\n\nHardware\t: BCM2835\n")
    assert cpu_model(str(intel)) == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"
    assert cpu_model(str(arm)) == "BCM2835"
    epochs = [json.loads(line) for line in (finished_run / "metrics.jsonl").read_text().splitlines()]
    assert all(r.get("cpu") == cpu_model() for r in epochs)
    assert cell_compute(finished_run).get("cpu_models", []) == ([cpu_model()] if cpu_model() else [])
    assert _cpu_models([{"cpu": "A"}, {"cpu": "B"}, {"cpu": "A"}]) == {"cpu_models": ["A", "B"]}  # resumed elsewhere
    assert _cpu_models([{"seconds": 1.0}]) == {}  # epochs of an older run: unknown, not this machine's


def test_cell_compute_gives_the_range_of_the_load_the_epochs_recorded() -> None:
    from resdom.pipeline.reproduce import _load

    assert _load([{"load": 1.5}, {"load": 0.25}, {"load": 3.0}]) == {"load": [0.25, 3.0]}
    assert _load([{"seconds": 1.0}, {"load": 2.0}]) == {"load": [2.0, 2.0]}  # an epoch of an older run: none
    assert _load([{"seconds": 1.0}]) == {}
