"""The records of the diagnostics (``resdom.records``, one record each) and the diagnose options
(``diagnostics.options``): every listing of diagnostics derives from the records, so a sixth diagnostic registered
here (in the test alone: its compute function, result class, table and figure) is computed, written, summarised,
tabled and drawn by the runner, the API, the CLI and the report with no other edit;
the summary each record makes reproduces every stored cell's summary.json; bad options name their field (the
CLI: its flag)."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from cli_helpers import invoke

import resdom
from resdom.diagnostics.options import Context, DiagnoseOptions, diagnose_options
from resdom.diagnostics.registry import compute_of
from resdom.diagnostics.runner import format_summary, parse_what, run_all, summarise
from resdom.errors import OptionError, ResdomError
from resdom.records import REGISTRY, Column, Diagnostic, FigureSpec, TableSpec, diagnostic_names, registered, resolve

ROOT = Path(__file__).resolve().parents[1]
FIVE = ["shuffle", "hrli", "mixing", "alpha", "recovery"]


# ------------------------------------------------------------------------------------------- a sixth one


@dataclass
class LengthResult:
    """The sixth diagnostic's result: the mean number of input items per user (and the share with at least k)."""

    mean_length: float
    at_least: dict[str, float]
    n_users: int
    split: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "n_users": self.n_users, "mean_length": self.mean_length,
                "at_least": self.at_least}

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame([(k, v) for k, v in self.at_least.items()], columns=["k", "share"])


def _length(model: Any, split: Any, ctx: Context) -> LengthResult:
    lengths = np.asarray(getattr(split, ctx.part).inputs.lengths)
    return LengthResult(float(lengths.mean()), {str(k): float((lengths >= k).mean()) for k in ctx.options.recency},
                        len(lengths))


def _length_values(d: Any) -> dict[str, float | None]:
    return {"mean_length": d.get("mean_length")}


def _length_figure(runs: list[Any], name: str) -> Any:
    """The sixth diagnostic's report figure: a bar of the mean input length per run."""
    from matplotlib.figure import Figure

    from resdom.report.figures import ReportFigure

    shown = [r for r in runs if r.diag(name)]
    if not shown:
        return None
    fig = Figure(figsize=(3, 2))
    fig.add_subplot().bar(range(len(shown)), [r.diag(name)["mean_length"] for r in shown])
    return ReportFigure(name, "Input lengths", "The mean number of input items per user.", fig)


SIXTH = Diagnostic("length", "input lengths", _length, LengthResult, options=("recency",),
                   headline=lambda d: {"mean_length": d["mean_length"]},
                   lines=lambda s: [f"mean input length {s['mean_length']:.2f}"] if "mean_length" in s else [],
                   values=_length_values,
                   table=TableSpec("Input lengths", "The mean number of input items per user.",
                                   (Column("mean_length", "Mean length", "num"),)),
                   figures=(FigureSpec("length", _length_figure),))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from resdom.data.prepare import prepare_split
    from resdom.models.config import make_model_config
    from resdom.training.config import TrainConfig
    from resdom.training.trainer import fit

    torch.set_num_threads(1)
    split = prepare_split("synthetic:n_users=60,n_items=20,min_len=4,max_len=10,seed=5", "loo")
    out = tmp_path_factory.mktemp("run")
    fit(split, make_model_config(max_len=8, hidden=8, layers=1, heads=1, dropout=0.1, attn_dropout=0.1),
        TrainConfig(epochs=1, device="cpu", batch_size=32), out, progress=False)
    return out


def test_the_five_diagnostics_in_canonical_order() -> None:
    assert list(diagnostic_names()) == FIVE == list(DiagnoseOptions().diagnostics) == parse_what("all")
    # what run_all writes besides: the per-user evidence, part of "all"
    assert list(DiagnoseOptions().what) == [*FIVE, "users"] == parse_what("all", with_users=True)
    assert DiagnoseOptions().users and not DiagnoseOptions(what="hrli").users
    assert [d for d in REGISTRY.values() if d.needs_attention] == [REGISTRY["mixing"], REGISTRY["alpha"]]
    with pytest.raises(ValueError, match="already registered"):
        with registered(Diagnostic("hrli", "again", _length, LengthResult)):
            pass
    assert list(diagnostic_names()) == FIVE


def test_every_reference_of_a_record_resolves() -> None:
    """The records name their compute function, result class and figure builders (torch and matplotlib are imported
    only when one is used): each name resolves, and the result class is the one the compute function returns."""
    import typing

    for d in REGISTRY.values():
        compute = compute_of(d)
        assert callable(compute) and isinstance(resolve(d.result), type)
        assert typing.get_type_hints(compute)["return"] is resolve(d.result)
        for build in [f.build for f in d.figures] + list(d.plots.values()):
            assert callable(resolve(build))


def test_every_option_a_diagnostic_reads_is_a_field_and_every_field_is_read() -> None:
    fields = set(DiagnoseOptions.model_fields)
    read = {o for d in REGISTRY.values() for o in d.options}
    assert read <= fields
    assert fields - read == {"what", "part", "batch_size"}  # the call's own options


def test_a_sixth_diagnostic_reaches_runner_api_cli_and_report(run_dir: Path, capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    from resdom.pipeline.common import missing_diagnostics
    from resdom.report import build_report
    from resdom.report.collect import read_run
    from resdom.report.figures import figure_keys

    with registered(SIXTH):
        assert list(DiagnoseOptions().diagnostics) == [*FIVE, "length"]
        assert parse_what("length,hrli") == ["hrli", "length"]
        # the API: computed and returned as diagnosis.length, in canonical order
        fitted = resdom.load_run(run_dir, device="cpu")
        diagnosis = resdom.diagnose(fitted, what="hrli,length", recency=(1, 3), device="cpu")
        assert list(diagnosis.results) == ["hrli", "length"] and diagnosis.length is diagnosis["length"]
        lengths = np.asarray(fitted.split.test.inputs.lengths)
        assert diagnosis.length.mean_length == pytest.approx(lengths.mean())
        assert diagnosis.length.at_least == pytest.approx({"1": (lengths >= 1).mean(), "3": (lengths >= 3).mean()})
        assert list(diagnosis.to_frame("length").columns) == ["k", "share"]
        with pytest.raises(ResdomError, match="no figure named 'length'"):
            diagnosis.plot("length")
        # the runner: its JSON and CSV (from to_frame), its headline in summary.json, its lines in the summary
        assert "length" in missing_diagnostics(run_dir)
        summary = run_all(run_dir, what="length", part="valid", progress=False)
        files = run_dir / "diagnostics"
        written = json.loads((files / "length.json").read_text())
        assert written["split"] == "valid" and written["checkpoint"] == fitted.checkpoint
        assert (files / "length.csv").read_text().splitlines()[0] == "k,share"
        valid_lengths = np.asarray(fitted.split.valid.inputs.lengths)
        assert summary["mean_length"] == pytest.approx(valid_lengths.mean()) and "length" in summary["seconds"]
        assert "mean input length" in format_summary(summary)
        assert "length" in missing_diagnostics(run_dir)  # a file of the valid split: the report reads test files
        # the CLI: --what takes it, the summary prints it
        code = invoke("diagnose", str(run_dir), "--what", "length", "--no-progress")
        out = capsys.readouterr()
        assert code == 0 and "mean input length" in out.out, out.err
        assert "length" not in missing_diagnostics(run_dir)
        # the report reads its file like any other: its table (after the built-in diagnostics' tables) with its
        # number, its figure in report.html and report.md
        assert read_run(run_dir).diag("length")["mean_length"] == pytest.approx(lengths.mean())  # the CLI: test
        paths = build_report([run_dir], tmp_path / "report")
        names = [t.name for t in paths.tables_data]
        assert "length" in names and names.index("length") < names.index("accuracy")  # after the built-in ones
        assert f"{lengths.mean():.2f}" in (tmp_path / "report" / "tables" / "length.md").read_text()
        assert "length" in figure_keys() and paths.figures["length"]["png"].is_file()
        assert "## Input lengths" in paths.markdown.read_text()
        assert 'id="fig-length"' in paths.html.read_text()
    assert "length" not in diagnostic_names() and "length" not in figure_keys()


def test_no_module_outside_the_records_lists_the_diagnostics() -> None:
    """No literal tuple, list, set or dict of three or more diagnostic names in src/resdom outside the records
    (``resdom.records``), the report included: its tables and figures come from the records."""
    found = []
    for path in sorted((ROOT / "src" / "resdom").rglob("*.py")):
        rel = path.relative_to(ROOT / "src" / "resdom").as_posix()
        if rel == "records.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            elts = (node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set))
                    else node.keys if isinstance(node, ast.Dict) else [])
            names = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in FIVE}
            if len(names) >= 3:
                found.append(f"{rel}:{node.lineno} {sorted(names)}")
    assert found == []


def test_a_diagnostic_is_named_in_its_module_and_its_record_only() -> None:
    """The name of a diagnostic, as a string literal, stands in its own module and in its record
    (``resdom.records``) only: every other module reads it from the record (``records.RECOVERY``, a figure's
    ``name``), so renaming or adding a diagnostic touches those two places."""
    found = []
    for path in sorted((ROOT / "src" / "resdom").rglob("*.py")):
        rel = path.relative_to(ROOT / "src" / "resdom").as_posix()
        if rel in ("records.py", "diagnostics/recovery.py"):
            continue
        if '"recovery"' in path.read_text():
            found.append(rel)
    assert found == []


def test_summaries_of_the_stored_cells_regenerate() -> None:
    """Each record's headline, over every results-store cell's diagnostics, gives its stored summary.json."""
    cells = sorted(p.parent.parent for p in (ROOT / "results").rglob("diagnostics/summary.json"))
    assert cells
    for cell in cells:
        stored = json.loads((cell / "diagnostics" / "summary.json").read_text())
        again = summarise(cell / "diagnostics", stored["split"], stored["checkpoint"])
        assert json.loads(json.dumps(again)) == {k: v for k, v in stored.items() if k != "seconds"}, cell


# ------------------------------------------------------------------------------------------------ options


@pytest.mark.parametrize("values, field, needle", [
    ({"what": "hrli,nope"}, "what", "unknown diagnostic 'nope' (choose all or from shuffle, hrli"),
    ({"part": "train"}, "part", "must be one of valid, test (got 'train')"),
    ({"recency": (0,)}, "recency", "every value must be an integer >= 1 (got 0)"),
    ({"cutoffs": 10}, "cutoffs", "expected a non-empty sequence of integers >= 1"),
    ({"definition": "mean"}, "definition", "must be one of norm_of_sums, sum_of_norms"),
    ({"seeds": ""}, "seeds", "give at least one seed"),
    ({"seeds": "0,x"}, "seeds", "expected comma-separated integers"),
    ({"seeds": "0,2,0"}, "seeds", "seed 0 is given twice (in 0,2,0)"),  # it would count one shuffle twice in the mean
    ({"alphas": "1,0.5,1.0"}, "alphas", "residual scale 1 is given twice (in 1,0.5,1)"),  # a sweep row twice
    ({"layers": "0,0"}, "layers", "block 0 is given twice (in 0,0)"),
    ({"cutoffs": (1, 10, 10)}, "cutoffs", "value 10 is given twice (in 1,10,10)"),
    ({"seeds": "99999999999999999999"}, "seeds", "every seed must lie in [-2^62, 2^62) (got 99999999999999999999)"),
    ({"seeds": (2**62,)}, "seeds", "every seed must lie in [-2^62, 2^62)"),  # seed + user index: an int64
    ({"alphas": "1,x"}, "alphas", "expected comma-separated numbers"),
    ({"alphas": (1.0, 2.0)}, "alphas", "residual scales must lie in [0, 1] (got 2)"),
    ({"alphas": (0.5, True)}, "alphas", "expected numbers in [0, 1] (got (0.5, True))"),  # True read as alpha 1
    ({"alphas": "nan"}, "alphas", "(got nan)"),
    ({"alphas": []}, "alphas", "give at least one residual scale"),
    ({"layers": "-1"}, "layers", "every value must be an integer >= 0 (got -1)"),
    ({"batch_size": 0}, "batch_size", "must be at least 1 (got 0)"),
    ({"batch_size": 2.5}, "batch_size", "expected an integer >= 1"),
    ({"bogus": 1}, "bogus", "unknown option"),
    ({"what": "users,nope"}, "what", "(choose all or from shuffle, hrli, mixing, alpha, recovery, users)"),
])
def test_bad_options_name_their_field(values: dict[str, Any], field: str, needle: str) -> None:
    with pytest.raises(OptionError) as e:
        diagnose_options(**values)
    assert e.value.problems[0][0] == field and needle in str(e.value) and str(e.value).startswith(f"{field}: ")
    assert str(e.value.renamed({field: "--flag"})).startswith("--flag: ")


def test_the_api_and_the_cli_default_to_the_options_defaults() -> None:
    """``resdom.diagnose``'s keywords and ``resdom diagnose``'s flags, left alone, give ``DiagnoseOptions()``: the
    defaults written again in their signatures have not drifted."""
    import inspect

    from resdom.api import diagnose
    from resdom.cli.diagnose_cmd import diagnose as command
    from resdom.cli.diagnose_cmd import options_from_flags

    api = {k: p.default for k, p in inspect.signature(diagnose).parameters.items()
           if k in DiagnoseOptions.model_fields}
    assert set(api) == set(DiagnoseOptions.model_fields)
    assert diagnose_options(**api) == DiagnoseOptions()
    flags = {k: p.default.default for k, p in inspect.signature(command).parameters.items()}
    cli = options_from_flags(what=flags["what"], part=flags["split"], definition=flags["definition"],
                             batch_size=flags["batch_size"], seeds=flags["seeds"], alphas=flags["alphas"],
                             layers=flags["layers"], per_head=flags["per_head"])
    assert cli == DiagnoseOptions()


@pytest.mark.parametrize("flags,needle", [
    (["--what", "hrli", "--seeds", "5"], "--seeds: only shuffle reads it, and --what hrli does not run it"),
    (["--what", "shuffle", "--per-head"], "--per-head: only mixing reads it"),
    (["--what", "hrli", "--definition", "sum_of_norms"], "--definition: only mixing or alpha read it"),
    (["--what", "mixing", "--alphas", "1,0.5"], "--alphas: only alpha, recovery or users read it"),
    (["--what", "shuffle", "--layers", "0"], "--layers: only alpha, recovery or users read it"),
])
def test_a_flag_no_chosen_diagnostic_reads_is_refused(tmp_path, capsys, flags, needle) -> None:
    """A flag of a diagnostic that --what leaves out is one error, not ignored without a word."""
    assert invoke("diagnose", str(tmp_path / "run"), *flags) == 2
    err = capsys.readouterr().err
    assert f"error: {needle}" in err and err.count("\n") == 1


def test_an_option_no_chosen_diagnostic_reads_is_refused_by_the_api(run_dir: Path) -> None:
    fitted = resdom.load_run(run_dir, device="cpu")
    for what, given, needle in (("hrli", {"seeds": (5,)}, "seeds: only shuffle reads it, and what=hrli does not"),
                                ("shuffle", {"recency": (2,)}, "recency: only hrli reads it"),
                                ("hrli", {"alphas": (1.0, 0.5)}, "alphas: only alpha, recovery or users read it"),
                                ("shuffle", {"per_head": True}, "per_head: only mixing reads it")):
        with pytest.raises(OptionError, match=needle):  # it was ignored without a word
            resdom.diagnose(fitted, what=what, device="cpu", **given)


def test_every_bad_field_is_named_at_once() -> None:
    with pytest.raises(OptionError) as e:
        diagnose_options(part="x", batch_size=0)
    assert [f for f, _ in e.value.problems] == ["part", "batch_size"]


def test_options_take_sequences_or_comma_separated_text() -> None:
    text = diagnose_options(what="recovery,hrli", seeds="3, 4", alphas="1,0.5", layers="0", recency="1,2")
    seq = diagnose_options(what=["hrli", "recovery"], seeds=(3, 4), alphas=np.array([1.0, 0.5]), layers=[0],
                           recency=(np.int64(1), 2))
    assert text == seq
    assert text.what == ("hrli", "recovery") and text.alphas == (1.0, 0.5) and text.layer_list() == [0]
    assert diagnose_options(layers="").layers is None and diagnose_options().alphas[0] == 1.0


@pytest.mark.parametrize("args, needle", [
    (["--what", "bogus"], "--what: unknown diagnostic 'bogus'"),
    (["--split", "train"], "--part: must be one of valid, test"),
    (["--seeds", "1,a"], "--seeds: expected comma-separated integers"),
    (["--layers", "0,7", "--what", "alpha"], "--layers: the model has 1 blocks (0..0); got [0, 7]"),
])
def test_the_cli_names_flags(run_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
                             ) -> None:
    code = invoke("diagnose", str(run_dir), *args)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_layers_on_a_model_without_attention_blocks_say_so() -> None:
    """--layers on GRU4Rec names that it has no attention blocks, not a block range "0..-1"."""
    from resdom.data.prepare import prepare_split
    from resdom.diagnostics.runner import plan
    from resdom.models import build_model
    from resdom.models.config import make_model_config

    split = prepare_split("synthetic:n_users=30,n_items=20,min_len=4,max_len=10,seed=5", "loo")
    gru = build_model(make_model_config(name="gru4rec", n_items=split.n_items, max_len=8, hidden=8))
    with pytest.raises(OptionError, match=r"layers: the model has no attention blocks \(no residual to scale\); "
                                          r"got \[0\]"):
        plan(gru, split, diagnose_options(what="recovery", layers="0"), note=False)
