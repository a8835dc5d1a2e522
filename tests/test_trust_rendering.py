"""Text a user did not choose (a vendor's ids, a colleague's run folder and labels) rendered as written.

Each test crafts its data here and fails on the code before the change: a CSV row split at an id holding a
carriage return, an escape sequence in an id or a label sent to the terminal raw, and matplotlib's warnings of a
glyph its font lacks printed once per figure."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from cli_helpers import run_cli

from resdom.adapters.common import ImportData, write_run
from resdom.data.prepare import prepare_split
from resdom.models import build_model, make_model_config

CR_USERS = ["u\r1", "=SUM(A1)", "plain"]
CR_ITEMS = ["a\rb", "c\r\nd", '"q"\r', "=1+1", "i5", "i6", "i7", "i8"]


@pytest.fixture(scope="module")
def cr_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Maker: a run (an untrained tiny SASRec, as `import-*` writes it) on a DataFrame whose user and item ids hold
    carriage returns, a line break, a quote and a leading ``=`` (a data file's id holding a line break is refused
    as a stray quote's work, ``readers.refuse_spanning_lines``; a DataFrame's is taken as it is)."""
    root = tmp_path_factory.mktemp("cr")
    rows = [(u, CR_ITEMS[(k + j) % len(CR_ITEMS)], 10 * j) for k, u in enumerate(CR_USERS) for j in range(6)]
    split = prepare_split(pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]), protocol="loo")
    torch.manual_seed(0)
    model = build_model(make_model_config(name="sasrec", n_items=split.n_items, max_len=8, hidden=8, layers=1,
                                          heads=1)).eval()
    data = ImportData(split, np.asarray(split.item_labels, dtype=object), split.manifest, split.user_labels)
    return write_run(root / "run", model, data, {"format": "test"})


def _read_back(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


@pytest.mark.parametrize("command, id_columns", [("recommend", ["user_id", "item_id"]),
                                                 ("similar", ["target_item_id", "item_id"]),
                                                 ("evaluate", ["user_id"])])
def test_an_id_holding_a_carriage_return_stays_in_its_csv_field(cr_run: Path, tmp_path: Path, command: str,
                                                                id_columns: list[str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """recommend, similar and evaluate --per-user wrote an id ``a\\rb`` bare (Python's CSV writers quote only the
    characters of their line terminator, ``\\n``): pandas, the csv module and a spreadsheet split the row there, so
    the file read back held rows of half ids and scores read as ids. Now such a field is quoted and every id reads
    back exactly; lines still end in ``\\n``."""
    out = tmp_path / "out.csv"
    args = ["--per-user", str(out)] if command == "evaluate" else ["--out", str(out), "-k", "3"]
    code, _, err = run_cli(capsys, command, str(cr_run), *args, "--device", "cpu")
    assert code == 0, err
    raw = out.read_bytes().decode()
    frame = _read_back(out)
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    assert len(rows) == len(frame) + 1 and all(len(r) == len(rows[0]) for r in rows)
    known = set(CR_USERS) | set(CR_ITEMS)
    for column in id_columns:
        assert set(frame[column]) <= known, sorted(set(frame[column]) - known)
    assert any("\r" in x for c in id_columns for x in frame[c])  # the test reaches an id with a carriage return


def test_a_table_csv_quotes_a_label_holding_a_carriage_return(tmp_path: Path) -> None:
    """The report's tables/*.csv wrote a data set ``shop\\r2`` bare, so the row split in two when read back."""
    from resdom.report import find_run_dirs, read_runs, summary_tables
    from resdom.report.tables import to_csv

    root = tmp_path / "runs"
    shutil.copytree(Path(__file__).parent / "fixtures" / "diagnostics", root, ignore=shutil.ignore_patterns("*.py"))
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"] = {**data["data"], "source": "shop\r2", "label": "m\rx"}
    config.write_text(json.dumps(data))
    for table in summary_tables(read_runs(find_run_dirs(root))):
        text = to_csv(table)
        back = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        assert len(back) == len(table.rows), table.name
        assert ("shop\r2" in set(back["dataset"])) == any(r["dataset"] == "shop\r2" for r in table.rows)
        assert "\r\n" not in text.replace('"', "")  # rows end in \n as before


def _fixture_runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    shutil.copytree(Path(__file__).parent / "fixtures" / "diagnostics", root, ignore=shutil.ignore_patterns("*.py"))
    return root


ESCAPES = "\x1b[2J\x1b]0;owned\x07\u202e\x9b"  # clear the screen, set the title, reverse the line, C1's CSI


def test_an_error_naming_a_path_shows_its_escape_sequences_never_sends_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An error line quoting a folder named with an escape sequence sent it to the terminal raw: a colleague's run
    folder ``run\\x1b[2J`` cleared the screen of whoever evaluated it. Now each such character is its code."""
    code, _, err = run_cli(capsys, "evaluate", str(tmp_path / f"run{ESCAPES}"))
    assert code == 2 and "Traceback" not in err
    assert not any(c in err for c in "\x1b\x07\u202e\x9b"), repr(err)
    assert "run\\x1b[2J\\x1b]0;owned\\x07\\u202e\\x9b" in err


def test_a_report_names_a_label_with_escape_sequences_as_text(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``report``'s "left out of LABEL" lines quote a label from a run's config.json as written: an escape
    sequence in it (an OSC one, which Click strips nowhere) reached the terminal raw."""
    root = _fixture_runs(tmp_path)
    run = root / "toyB_sasrec_seed1"
    data = json.loads((run / "config.json").read_text())
    data["data"] = {**data["data"], "label": f"m{ESCAPES}"}
    (run / "config.json").write_text(json.dumps(data))
    (run / "metrics.json").unlink()  # a "left out of" line naming the run
    code, _, err = run_cli(capsys, "report", str(root), "--out", str(tmp_path / "rep"), "--tables-only")
    assert code == 0, err
    assert "left out of " in err and "m\\x1b[2J" in err
    assert not any(c in err for c in "\x1b\x07\u202e\x9b"), repr(err)


@pytest.mark.slow  # every figure is built: about 5 s of CPU
def test_a_label_the_font_cannot_draw_or_the_page_cannot_hold_is_drawn_short(tmp_path: Path) -> None:
    """A label with an emoji or an escape character drew a box and printed matplotlib's "Glyph 27 (\\x1b) missing
    from font(s)" warning, once per figure and character, quoting the character raw and a line of resdom's code;
    a 10,000-character data set or model name (a long path) was drawn whole, pushing every panel off the figure
    ("constrained_layout not applied"). Now the figures print no warning, draw a control character as its code and
    a long name cut around a "…"."""
    import warnings

    from matplotlib.text import Text

    from resdom.report import find_run_dirs, read_runs
    from resdom.report.figures import NAME_CHARS, all_figures

    root = _fixture_runs(tmp_path)
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"] = {**data["data"], "source": "shop \U0001f389\x1b[2J" + "S" * 10_000,
                    "label": "m\u0007" + "L" * 10_000}
    config.write_text(json.dumps(data))
    figures = {f.key: f for f in all_figures(read_runs(find_run_dirs(root)))}
    drawn = [figures[k] for k in ("hrli_by_model", "hrli", "mixing_by_stage")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        drawn[0].files(tmp_path / "figures")  # PNG and PDF
        for fig in drawn[1:]:
            fig.png_bytes()
    assert not [str(w.message) for w in caught]
    for fig in drawn:
        texts = [t.get_text() for t in fig.figure.findobj(Text)]
        texts += [t.get_text() for ax in fig.figure.axes for t in ax.get_xticklabels()]
        assert not any(c in t for t in texts for c in "\x1b\x07"), fig.key
        assert max(len(line) for t in texts for line in t.splitlines()) <= NAME_CHARS + 40, fig.key
        assert any("shop 🎉\\x1b[2JSSS" in t and "…SSS" in t for t in texts), fig.key


def test_a_latex_table_holds_no_control_character_of_a_label(tmp_path: Path) -> None:
    """tables/*.tex wrote a label's NUL or escape character as it came, which LaTeX refuses ("Text line contains
    an invalid character"), so the table did not compile. Now such a character is written as its code."""
    from resdom.report import find_run_dirs, read_runs, summary_tables
    from resdom.report.tables import latex_escape, to_latex

    assert latex_escape("a\x00b\x1b[2J_c\nd") == r"a\textbackslash{}x00b\textbackslash{}x1b[2J\_c d"
    root = _fixture_runs(tmp_path)
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"] = {**data["data"], "source": "shop\x00\x1b[2J", "label": "m\x7f\u202e"}
    config.write_text(json.dumps(data))
    texts = [to_latex(t) for t in summary_tables(read_runs(find_run_dirs(root)))]
    assert any(r"shop\textbackslash{}x00\textbackslash{}x1b[2J" in t for t in texts)
    assert not any(c in t for t in texts for c in "\x00\x1b\x7f\u202e")


def test_a_file_named_with_an_escape_sequence_is_named_as_text(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """``data stats`` and ``data split`` of a vendor's file ``shop\\x1b]0;owned\\x07.csv`` (a shell glob finds it)
    printed its name raw: the terminal took the escape sequence (here: its window title set). Every line a command
    prints for the user now shows such a character as its code; the data a command writes to stdout is untouched."""
    source = tmp_path / "shop\x1b]0;owned\x07\u202e.csv"
    rows = [(u, i, 10 * j) for u in range(8) for j, i in enumerate((1, 2, 3, 4))]
    pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp"]).to_csv(source, index=False)
    split = ["data", "split", str(source), "--protocol", "loo", "--out", str(tmp_path / "split")]
    for args in (["data", "stats", str(source)], split):
        code, out, err = run_cli(capsys, *args)
        assert code == 0, err
        assert "shop\\x1b]0;owned\\x07\\u202e.csv" in out, out
        assert not any(c in out + err for c in "\x1b\x07\u202e"), repr(out + err)


def test_diagnose_names_a_run_folder_with_an_escape_sequence_as_text(cr_run: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """diagnose's lines in a log (``diagnose [1/1] hrli: done in 0 s -> RUN/diagnostics/hrli.json``) named a
    colleague's run folder ``run\\x1b]0;owned\\x07`` raw."""
    run = tmp_path / "run\x1b]0;owned\x07"
    shutil.copytree(cr_run, run)
    code, out, err = run_cli(capsys, "diagnose", str(run), "--what", "hrli", "--device", "cpu")
    assert code == 0, err
    assert "run\\x1b]0;owned\\x07/diagnostics" in err + out, err
    assert not any(c in out + err for c in "\x1b\x07"), repr(out + err)


def test_report_html_and_md_show_a_labels_control_characters_as_codes(tmp_path: Path) -> None:
    """report.html, report.md and tables/*.md held a label's escape sequence and NUL as they came: ``cat
    report.md`` cleared the terminal, and a browser dropped the NUL (the label shown otherwise than written). Now
    each is its code, in the findings' code block too; the tag and the quote stay escaped as before."""
    from resdom.report import find_run_dirs, read_runs, summary_tables
    from resdom.report.html import render_html, render_markdown
    from resdom.report.tables import to_html, to_markdown

    root = _fixture_runs(tmp_path)
    config = root / "toyB_sasrec_seed1" / "config.json"
    data = json.loads(config.read_text())
    data["data"] = {**data["data"], "source": "shop\x1b[2J\x00<b>\"", "label": "m\u202e\x07"}
    config.write_text(json.dumps(data))
    runs = read_runs(find_run_dirs(root))
    tables = summary_tables(runs)
    page = render_html(runs, [], tables, "title\x1b[2J")
    md = render_markdown(runs, [], tables, "title\x1b[2J")
    parts = [page, md, *(to_html(t) for t in tables), *(to_markdown(t) for t in tables)]
    assert not any(c in text for text in parts for c in "\x1b\x00\x07\u202e")
    assert "shop\\x1b[2J\\x00&lt;b&gt;&quot;" in page and "<title>title\\x1b[2J</title>" in page
    assert "shop\\x1b[2J\\x00&lt;b>\"" in md and "# title\\x1b[2J" in md
    fence = md.split("```\n", 2)[1]
    assert "shop\\x1b[2J\\x00<b>\" / m\\u202e\\x07" in fence  # a code block shows the tag as written
