"""A package that stands alone: LICENSE, CITATION.cff, py.typed and the files the docs use ship with
it, and a wheel installed in a fresh virtualenv runs ``config show`` (whose output ``--config`` trains), the demo and
the example notebook from empty directories."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from resdom.resources import CONFIGS_DIR, PACKAGE_DIR, recbole_example, reference_configs

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["resdom/py.typed", *(f"resdom/configs/{p.name}" for p in sorted(CONFIGS_DIR.glob("*.yaml"))),
           "resdom/sample_data/recbole/sasrec_tiny.pth", "resdom/sample_data/recbole/tiny.inter"]


def test_license_is_mit_as_the_metadata_says() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 resdom developers" in text
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()


def test_citation_names_the_paper_and_the_toolkit() -> None:
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and "resdom" in cff["title"]
    assert cff["license"] == "MIT"
    paper = cff["preferred-citation"]
    assert paper["title"].strip() == ("Residual Dominance as a Structural Account of Last-Item Reliance in Causal "
                                      "Self-Attention Recommenders")
    assert [a["family-names"] for a in paper["authors"]] == ["Kozaki", "Sakurai", "Togo", "Ogawa", "Haseyama"]
    assert paper["year"] == 2026 and "RecSys 2026" in paper["conference"]["name"]
    assert "2608.14021" in paper["url"] and any("2608.14021" in i["value"] for i in paper["identifiers"])


def test_package_data_is_declared_and_present() -> None:
    tomllib = pytest.importorskip("tomllib")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["resdom"]
    for name in SHIPPED:
        rel = name.removeprefix("resdom/")
        assert (PACKAGE_DIR / rel).is_file(), name
        assert any(Path(rel).match(pattern) for pattern in declared), f"{name} is not declared as package data"
    assert set(reference_configs()) == {"bsarec_beauty", "duorec_loo", "sasrec_gts_reference", "sasrec_loo", "smoke"}
    assert not (ROOT / "configs").exists(), "the reference configs live in src/resdom/configs/ only"


def test_shipped_recbole_example_is_the_tests_fixture() -> None:
    fixture = ROOT / "tests" / "fixtures" / "recbole"
    checkpoint, inter = recbole_example()
    assert checkpoint.read_bytes() == (fixture / "sasrec_tiny.pth").read_bytes()
    assert inter.read_bytes() == (fixture / "tiny.inter").read_bytes()


def test_example_notebook_needs_no_file_of_the_repository() -> None:
    from test_examples import SCRIPT, script_cells

    code = "\n".join(source for kind, source in script_cells(SCRIPT) if kind == "code")
    assert "recbole_example()" in code
    assert not re.search(r"tests|fixtures|\.\.|examples", code), "the example's code reads repository files"


def test_docs_name_only_configs_that_ship() -> None:
    """Every ``configs/NAME.yaml`` and ``--config NAME`` in README.md and docs/ exists in the package."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for name in re.findall(r"configs/([A-Za-z0-9_]+)\.yaml", text):
            assert (CONFIGS_DIR / f"{name}.yaml").is_file(), f"{doc.name}: configs/{name}.yaml"
        for name in re.findall(r"--config ([A-Za-z0-9_]+)(?![.\w/])", text):  # a name, not a file
            assert name in reference_configs(), f"{doc.name}: --config {name}"


# ------------------------------------------------------------------------------------------- the installed wheel


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _wheel(tmp: Path, env: dict[str, str]) -> Path:
    """A wheel of this checkout built from a copy (building writes nothing into the checkout), its files checked."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", str(src), "-w",
          str(tmp / "dist"), "-q"], tmp, env)
    wheel = next((tmp / "dist").glob("resdom-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in SHIPPED if n not in names] == [], "package data missing from the wheel"
    assert any(n.endswith("licenses/LICENSE") or n.endswith("/LICENSE") for n in names)
    return wheel


def _fresh_venv(tmp: Path, wheel: Path, env: dict[str, str]) -> Path:
    """A new virtualenv (``python -m venv``, its own pip) with the wheel installed by that pip (``--no-index``: no
    download). Its dependencies (torch, pandas, ...) are this environment's, seen through a ``.pth`` line: a path
    line, so this environment's own ``.pth`` files (an editable install of the checkout) are not run. -> its bin."""
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp, env)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site.stdout.strip()) / "resdom_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel), "-q"], tmp, env)
    return bin_dir


def _empty(tmp: Path, name: str) -> Path:
    folder = tmp / name
    folder.mkdir()
    return folder


# One interpreter runs the commands of the wheel's CLI one after another (each a fresh ``resdom ARGS``, as
# tests/cli_helpers.py does in-process): every extra ``python -m resdom`` would pay the torch import again.
COMMANDS_SCRIPT = """
import contextlib, io, json, sys
import resdom
from resdom.cli.main import app
out = {"file": resdom.__file__, "runs": []}
for args in json.loads(sys.argv[1]):
    sys.argv, text = ["resdom", *args], io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            app()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    if args[0] == "config" and args[1] == "show" and code == 0:
        open(args[2] + "_" + args[4] + ".yaml", "w").write(text.getvalue())  # what train --config reads next
    out["runs"].append({"args": args, "code": code, "stdout": text.getvalue()})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_wheel_in_a_fresh_virtualenv_runs_config_show_the_demo_and_the_notebook_from_empty_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wheel installed in a fresh virtualenv runs ``config show`` (whose output ``--config``
    trains), the demo and the example notebook, each from an empty directory, importing nothing of the checkout."""
    pytest.importorskip("nbclient")
    from nbclient import NotebookClient
    from nbformat import v4
    from test_examples import CELL_TIMEOUT_S, build_notebook

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RESDOM_DATA_DIR", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1", RESDOM_CACHE_DIR=str(tmp_path / "cache"))
    bin_dir = _fresh_venv(tmp_path, _wheel(tmp_path, env), env)
    python, resdom = str(bin_dir / "python"), str(bin_dir / "resdom")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    venv = bin_dir.parent

    # the wheel's CLI in an empty directory: config show (a full config, data settings included, that --config
    # trains with), config list, train from that file and from a shipped configuration's name, version
    cwd = _empty(tmp_path, "config")
    tiny = ["--epochs", "1", "--set", "model.hidden=16", "--set", "model.layers=1", "--set", "model.max_len=10",
            "--device", "cpu", "--no-progress"]
    source = "synthetic:n_users=60,n_items=30,min_len=5,max_len=12"
    commands = [["config", "show", "sasrec", "--protocol", "gts"], ["config", "list"],
                ["train", source, "--config", "sasrec_gts.yaml", "--out", "run", *tiny],
                ["train", source, "--config", "smoke", "--out", "run2", *tiny], ["version"]]
    done = json.loads(_run([python, "-c", COMMANDS_SCRIPT, json.dumps(commands)], cwd, env).stdout)
    assert Path(done["file"]).is_relative_to(venv), f"resdom imported from {done['file']}, not from the wheel"
    assert [r["code"] for r in done["runs"]] == [0] * 5, done["runs"]
    shown, listed, _, _, version = done["runs"]
    assert "resdom 0.1.0" in version["stdout"]
    values = yaml.safe_load(shown["stdout"])
    assert values["data"]["protocol"] == "gts" and values["model"]["max_len"] == 200
    assert yaml.safe_load((cwd / "sasrec_gts.yaml").read_text()) == values
    assert all(name in listed["stdout"] for name in reference_configs())
    for run in ("run", "run2"):
        assert (cwd / run / "metrics.json").is_file() and (cwd / run / "model.safetensors").is_file()
    assert json.loads((cwd / "run" / "config.json").read_text())["model"]["max_len"] == 10

    # the demo
    cwd = _empty(tmp_path, "demo")
    out = _run([resdom, "demo", "--epochs", "1", "--device", "cpu", "--no-progress", "--out", "demo"], cwd, env,
               timeout=600).stdout
    assert "findings:" in out and (cwd / "demo" / "report.html").is_file()

    # the example notebook, on a kernel of the venv's python
    cwd = _empty(tmp_path, "notebook")
    spec = venv / "share" / "jupyter" / "kernels" / "resdom-venv"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [python, "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"],
                                                  "display_name": "resdom venv", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(venv / "share" / "jupyter"))
    nb = build_notebook()
    nb.cells.insert(0, v4.new_code_cell("import resdom, sys\nprint(sys.executable)\nprint(resdom.__file__)"))
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="resdom-venv",
                   resources={"metadata": {"path": str(cwd)}}).execute(env=env)
    shown = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in shown if o.output_type == "error"]
    kernel_python, imported = nb.cells[0].outputs[0]["text"].split()
    assert Path(kernel_python).parent == bin_dir and Path(imported).is_relative_to(venv)
    assert sum("image/png" in o.get("data", {}) for o in shown) >= 4


# ------------------------------------------------------------------------------------------------------ the sdist

SDIST_NEEDS = ["LICENSE", "CITATION.cff", "README.md", "pyproject.toml", "tests/conftest.py", "tests/cli_helpers.py",
               "tests/gloo_helpers.py", "tests/fixtures/recbole/sasrec_tiny.pth",
               "tests/fixtures/diagnostics/toyA_sasrec_seed1/config.json", "examples/quickstart.ipynb",
               "examples/quickstart.py", "src/resdom/configs/smoke.yaml"]


@pytest.mark.slow
def test_the_sdist_holds_what_its_tests_need_and_a_test_runs_from_it(tmp_path: Path) -> None:
    """The sdist ships the tests' shared helpers and fixtures, the examples, LICENSE and CITATION.cff
    (MANIFEST.in), so a test runs from the unpacked sdist against the sdist's own code."""
    import tarfile

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RESDOM_DATA_DIR")}
    env.update(OMP_NUM_THREADS="1", RESDOM_CACHE_DIR=str(tmp_path / "cache"))
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "CITATION.cff", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    for folder in ("src", "tests", "examples"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-c", "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))",
                  str(dist)], src, env).stdout.strip().splitlines()[-1]
    with tarfile.open(dist / built) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        assert [n for n in SDIST_NEEDS if n not in names] == []
        assert not [n for n in names if "__pycache__" in n]
        tar.extractall(tmp_path / "unpacked", filter="data")
    root = tmp_path / "unpacked" / built.removesuffix(".tar.gz")
    env["PYTHONPATH"] = str(root / "src")
    where = _run([sys.executable, "-c", "import resdom; print(resdom.__file__)"], root, env).stdout.strip()
    assert Path(where).is_relative_to(root), where  # the sdist's code, not the checkout's
    done = _run([sys.executable, "-m", "pytest", "tests/test_recommend.py", "-q", "-p", "no:cacheprovider",
                 "-k", "top_k or cli_sessions or similar_items"], root, env, timeout=600)
    passed = re.search(r"^(\d+) passed\b", done.stdout, re.M)  # every selected test passed (3 or more)
    assert passed and int(passed.group(1)) >= 3, done.stdout[-2000:]


# ------------------------------------------------------------------------------- the practitioner's loop, installed

LOOP_CSV = "customer,product,ts\n" + "".join(
    f"c{u:02d},sku-{(u * 7 + t * 3) % 23:02d},{1_700_000_000 + 3600 * t + u}\n" for u in range(40) for t in range(6))


@pytest.mark.slow
def test_the_wheel_runs_the_practitioners_loop_from_an_empty_directory(tmp_path: Path) -> None:
    """From the installed wheel in an empty folder, protocol none trains on everything,
    recommend scores users and a sessions file (one of its items unknown) with a whitelist, similar lists
    neighbours, and evaluate --beyond prints the beyond-accuracy metrics, each in RecTools' columns where a table."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RESDOM_DATA_DIR", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1", RESDOM_CACHE_DIR=str(tmp_path / "cache"))
    bin_dir = _fresh_venv(tmp_path, _wheel(tmp_path, env), env)
    cwd = _empty(tmp_path, "loop")
    (cwd / "shop.csv").write_text(LOOP_CSV)
    (cwd / "sessions.csv").write_text("session_id,item_id\ns1,sku-01\ns1,sku-04\ns2,sku-09\ns2,nope\n")
    (cwd / "whitelist.txt").write_text("".join(f"sku-{i:02d}\n" for i in range(0, 23, 2)))
    cols = ["--user-col", "customer", "--item-col", "product", "--time-col", "ts"]
    tiny = ["--epochs", "1", "--set", "model.hidden=8", "--set", "model.layers=1", "--device", "cpu", "--no-progress"]
    commands = [["train", "shop.csv", *cols, "--protocol", "none", "--out", "prod", *tiny],
                ["recommend", "prod", "--users", "c00,c01", "-k", "3", "--device", "cpu"],
                ["recommend", "prod", "--sequences", "sessions.csv", "--items", "whitelist.txt", "-k", "2",
                 "--device", "cpu"],
                ["similar", "prod", "--items", "sku-01", "-k", "2", "--device", "cpu"],
                ["train", "shop.csv", *cols, "--protocol", "loo", "--out", "loo", *tiny],
                ["evaluate", "loo", "--beyond", "--cutoffs", "5", "--json", "--device", "cpu"]]
    done = json.loads(_run([str(bin_dir / "python"), "-c", COMMANDS_SCRIPT, json.dumps(commands)], cwd, env).stdout)
    assert Path(done["file"]).is_relative_to(bin_dir.parent), done["file"]
    assert [r["code"] for r in done["runs"]] == [0] * len(commands), done["runs"]
    _, users, sessions, similar, _, evaluated = (r["stdout"].splitlines() for r in done["runs"])
    assert users[0] == "user_id,item_id,score,rank" and len(users) == 1 + 2 * 3
    assert sessions[0] == "user_id,item_id,score,rank" and {x.split(",")[0] for x in sessions[1:]} == {"s1", "s2"}
    assert all(int(x.split(",")[1].removeprefix("sku-")) % 2 == 0 for x in sessions[1:])  # the whitelist
    assert similar[0] == "target_item_id,item_id,score,rank" and len(similar) == 3
    metrics = json.loads("\n".join(evaluated))["metrics"]
    assert {"HR@5", "Coverage@5", "AvgPop@5", "Novelty@5", "Echo@5", "EchoNN@5"} <= set(metrics)
