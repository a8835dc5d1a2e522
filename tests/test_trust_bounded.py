"""Every file a user hands resdom is read within ``resdom.limits`` (no allocation a tiny file
decides, archives bounded in size and ratio, YAML aliases and nesting bounded, special files refused, synthetic sizes
and model descriptions checked before anything is built), and every failure is one line whose quoted values are cut
to a readable length. Each crafted file is made here (no committed binaries); each test failed on the code before.

Where the old code would have blown up (allocated gigabytes, hung on a device), the test makes the blow-up cheap to
detect instead: a limit lowered by its environment variable, a size no machine can allocate (refused at once), or a
builder patched to fail if it is reached."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from cli_helpers import SMALL_SYNTHETIC, one_line_error, run_cli

from resdom.adapters.pmixer import pmixer_model, read_pmixer_state_dict
from resdom.adapters.recbole import read_recbole_checkpoint
from resdom.adapters.rectools import read_rectools_file
from resdom.adapters.safe_pickle import load_torch_file
from resdom.bounded import load_json, load_npz, load_yaml
from resdom.data.native import read_beeradvocate, read_movielens_zip, read_steam
from resdom.data.readers import read_interactions
from resdom.data.sequences import SplitData
from resdom.data.synthetic import parse_synthetic_source
from resdom.diagnostics.evidence import npz_bytes, read_header, read_users
from resdom.errors import ResdomError
from resdom.limits import MESSAGE_CHARS, Limit, cut_message, expansion_cap, model_params, short

MIB = 1 << 20
READABLE = 3000  # the longest error line a test accepts (a value is cut to 300 characters, a message to 2400)

# ------------------------------------------------------------------------------------------------ makers


def call(module: str, name: str, *args: object) -> bytes:
    """Protocol-2 pickle bytes that call ``module.name(*args)`` (GLOBAL, the arguments, TUPLE, REDUCE, STOP)."""
    body = b"".join(pickle.dumps(a, protocol=2)[2:-1] for a in args)
    tuple_op = {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(args)]
    return b"\x80\x02c" + f"{module}\n{name}\n".encode() + (b"" if not args else body) + tuple_op + b"R."


def torch_zip(pkl: bytes) -> bytes:
    """A ``torch.save``-style zip archive holding ``pkl`` as archive/data.pkl (and its byteorder record)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", b"little")
    return buf.getvalue()


def saved(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def patch_zip_headers(data: bytes, member: str, *, method: int | None = None, flags: int | None = None) -> bytes:
    """``data`` (a zip archive) with member ``member``'s compression method or flag bits rewritten in both its local
    and its central header (what a damaged or foreign archive holds)."""
    out = bytearray(data)
    name = member.encode()
    for sig, flag_at, method_at, name_len_at, name_at in ((b"PK\x03\x04", 6, 8, 26, 30),
                                                           (b"PK\x01\x02", 8, 10, 28, 46)):
        start = 0
        while (at := out.find(sig, start)) >= 0:
            start = at + 4
            n = struct.unpack_from("<H", out, at + name_len_at)[0]
            if bytes(out[at + name_at: at + name_at + n]) != name:
                continue
            if method is not None:
                struct.pack_into("<H", out, at + method_at, method)
            if flags is not None:
                struct.pack_into("<H", out, at + flag_at, flags)
    return bytes(out)


def zip_with_member(name: str, n_zeros: int, others: dict[str, bytes] | None = None) -> bytes:
    """A zip archive whose member ``name`` unpacks to ``n_zeros`` zero bytes, plus ``others`` (stored as given)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for other, data in (others or {}).items():
            z.writestr(other, data)
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            chunk = bytes(MIB)
            for _ in range(n_zeros // MIB):
                f.write(chunk)
    return buf.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, array, allow_pickle=False)
    return buf.getvalue()


def alias_bomb(levels: int = 6, width: int = 10) -> str:
    """A YAML "billion laughs": ``width ** levels`` values from a few hundred bytes of anchors and aliases."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def flow_alias_bomb(levels: int = 6, width: int = 10) -> str:
    """The same in one flow value (what ``--set model.name=...`` can hold)."""
    value = f"&l0 [{', '.join(['lol'] * width)}]"
    for i in range(1, levels):
        value = f"&l{i} [{value}, {', '.join([f'*l{i - 1}'] * (width - 1))}]"
    return value


@pytest.fixture()
def low_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    """Archives may unpack to at most 2x their size plus the 64 MiB allowance: an 80 MiB member is a bomb."""
    monkeypatch.setenv("RESDOM_MAX_EXPANSION", "2")


# ------------------------------------------------------------------------------------ the limits themselves


def test_each_limit_is_raised_by_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    limit = Limit("RESDOM_MAX_TEST_THING", 100, "things")
    assert limit.value == 100
    for raw, value in (("5", 5), ("2_000", 2000), ("3K", 3 << 10), ("2g", 2 << 30), ("junk", 100), ("0", 100)):
        monkeypatch.setenv("RESDOM_MAX_TEST_THING", raw)
        assert limit.value == value, raw
    monkeypatch.setenv("RESDOM_MAX_EXPANSION", "10")
    assert expansion_cap(MIB) == 10 * MIB + 64 * MIB
    monkeypatch.setenv("RESDOM_MAX_MEMBER_BYTES", "1M")
    assert expansion_cap(MIB) == MIB


def test_docs_limits_names_every_limit_with_its_default() -> None:
    """docs/limits.md's table lists each limit of resdom.limits (its variable and default), and no other."""
    from resdom.limits import ALL_LIMITS

    doc = (Path(__file__).parents[1] / "docs" / "limits.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in doc.splitlines()
            if line.startswith("| `RESDOM_")}
    names = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    documented = {k: int(v[:-1]) * names[v[-1]] if v[-1] in names else int(v) for k, v in rows.items()}
    assert documented == {limit.env: limit.default for limit in ALL_LIMITS}


def test_a_value_quoted_in_a_message_is_cut_to_a_readable_length() -> None:
    huge = "1" * 50_000_000
    assert len(short(huge)) < 400 and "50,000,000 characters" in short(huge)
    assert short("abc") == "'abc'" and short([1, 2]) == "[1, 2]"
    line = str(ResdomError(f"data.csv:2: timestamp {huge!r} is not a number"))
    assert len(line) < READABLE and line.startswith("data.csv:2: timestamp '111") and line.endswith("not a number")
    spaced = " ".join(["word"] * 2_000_000)
    assert len(cut_message(f"x: {spaced}; do this")) < READABLE and cut_message("short one") == "short one"
    assert MESSAGE_CHARS.value == 300


@pytest.mark.parametrize("message", [
    "data.csv:2: timestamp " + short("1" * 50_000_000) + " is not a number",
    "x: " + "1" * 5000 + " then " + " ".join(["word"] * 2_000_000) + "; do this",
    " ".join(["w" * 299] * 40), "a " + "é" * 301, short(b"\x00" * 400), short(["x" * 1000]),
])
def test_cutting_a_cut_message_changes_nothing(message: str) -> None:
    """A message that quotes another (``f"--users {path}: {error}"``) is cut again by ResdomError: the counts the
    first cut gave must stand (a cut value once read "...(314 characters) characters)" for 50,000,000)."""
    once = cut_message(message)
    assert cut_message(once) == once and len(once) <= 8 * 300
    assert str(ResdomError(f"--users u.txt: {ResdomError(message)}")) == f"--users u.txt: {once}"
    if "50,000,000" in message:
        assert "(50,000,000 characters) is not a number" in once


def test_model_params_estimate_is_a_lower_bound_of_every_model() -> None:
    from resdom.models import build_model
    from resdom.models.config import make_model_config

    for fields in ({"name": "sasrec"}, {"name": "gru4rec", "layers": 3}, {"name": "bert4rec", "hidden": 32},
                   {"name": "sasrec", "output": "untied", "inner_size": 8}):
        heads = {} if fields["name"] == "gru4rec" else {"heads": 2}  # gru4rec: no attention heads
        cfg = make_model_config(n_items=50, max_len=20, hidden=fields.get("hidden", 16), **heads,
                                **{k: v for k, v in fields.items() if k != "hidden"})
        real = sum(p.numel() for p in build_model(cfg).parameters())
        lower, estimate = model_params(cfg.model_dump())
        assert lower <= real, (fields, lower, real)
        assert estimate >= lower


# ------------------------------------------------------------------------------ checkpoints (the three importers)


BOMB = call("__builtin__", "bytearray", 1 << 45)  # 32 TiB: the old unpickler tried to allocate it


def test_a_pickle_calling_bytearray_is_refused_by_every_importer(tmp_path: Path) -> None:
    """The 318-byte checkpoint of the issue: ``bytearray(N)`` is no global the unpickler offers at all."""
    inner = torch_zip(BOMB)
    for name, read in (("pmixer.pth", read_pmixer_state_dict), ("recbole.pth", read_recbole_checkpoint)):
        path = tmp_path / name
        path.write_bytes(inner)
        with pytest.raises(ResdomError, match="refused to load: it needs the global 'builtins.bytearray'"):
            read(path)
    path = tmp_path / "model.rectools"  # RecTools: a plain pickle (model.save) and a Lightning zip
    path.write_bytes(BOMB)
    with pytest.raises(ResdomError, match="the global 'builtins.bytearray'"):
        read_rectools_file(path)
    path.write_bytes(inner)
    with pytest.raises(ResdomError, match="the global 'builtins.bytearray'"):
        read_rectools_file(path)


@pytest.mark.parametrize("dims", [list(range(1, 200)), "x" * 1000, [2, -1], [1.5]])
def test_torch_size_takes_only_a_few_whole_dimensions(tmp_path: Path, dims: object) -> None:
    path = tmp_path / "size.pth"
    path.write_bytes(torch_zip(call("torch", "Size", dims)))
    with pytest.raises(ResdomError, match=r"torch\.Size"):
        load_torch_file(path)
    path.write_bytes(torch_zip(call("torch", "Size", [3, 4])))
    assert load_torch_file(path) == (3, 4)


def test_a_tensor_needs_its_bytes_in_the_archive(tmp_path: Path) -> None:
    """A record naming more elements than its storage holds is refused before any tensor is made."""
    good = saved({"w": torch.arange(6, dtype=torch.float32)})
    path = tmp_path / "short.pth"
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    data_key = next(n for n in members if "/data/" in n)
    members[data_key] = members[data_key][:8]  # 2 of 6 floats
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, d in members.items():
            z.writestr(n, d)
    path.write_bytes(buf.getvalue())
    with pytest.raises(ResdomError, match="storage record .* has 8 bytes"):
        load_torch_file(path)


def _damaged(kind: str) -> bytes:
    good = saved({"w": torch.arange(6, dtype=torch.float32)})
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        names = z.namelist()
    prefix = names[0].split("/")[0]
    if kind == "bad CRC":
        data = bytearray(good)
        at = data.find(struct.pack("<f", 3.0))
        data[at] ^= 0xFF  # one weight's byte: the member's CRC no longer matches
        return bytes(data)
    if kind == "unknown compression method":
        return patch_zip_headers(good, f"{prefix}/data.pkl", method=99)
    if kind == "encrypted member":
        return patch_zip_headers(good, f"{prefix}/data.pkl", flags=1)
    if kind == "non-text byteorder":
        with zipfile.ZipFile(io.BytesIO(good)) as z:
            members = {n: z.read(n) for n in z.namelist()}
        members[f"{prefix}/byteorder"] = b"\xff\xfe\x00"
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for n, d in members.items():
                z.writestr(n, d)
        return buf.getvalue()
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["bad CRC", "unknown compression method", "encrypted member",
                                  "non-text byteorder"])
def test_a_damaged_checkpoint_zip_is_one_line_in_every_importer(tmp_path: Path, kind: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "damaged.pth"
    path.write_bytes(_damaged(kind))
    for read in (load_torch_file, read_pmixer_state_dict, read_recbole_checkpoint, read_rectools_file):
        with pytest.raises(ResdomError) as e:
            read(path)
        assert str(path) in str(e.value) and "\n" not in str(e.value), (read, e.value)
    code, _, err = run_cli(capsys, "import-pmixer", str(path), "--data", SMALL_SYNTHETIC, "--out",
                           str(tmp_path / "out"))
    one_line_error(code, err, str(path))


@pytest.mark.parametrize("bad", ["1-D", "not a tensor", "hidden size 0"])
def test_a_crafted_pmixer_item_table_is_one_line(tmp_path: Path, bad: str) -> None:
    state = {"item_emb.weight": torch.zeros(11, 8), "pos_emb.weight": torch.zeros(5, 8)}
    state["item_emb.weight"] = {"1-D": torch.zeros(11), "not a tensor": 3, "hidden size 0": torch.zeros(11, 0)}[bad]
    path = tmp_path / "pmixer.pth"
    path.write_bytes(saved(state))
    with pytest.raises(ResdomError, match="item_emb.weight"):
        read_pmixer_state_dict(path)
    ok = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}
    if "item_emb.weight" in ok:
        with pytest.raises(ResdomError, match="item_emb.weight"):
            pmixer_model(ok, np.array([None, *range(1, 11)], dtype=object), where="state")


# ------------------------------------------------------------------------------------------------ YAML configs


@pytest.mark.parametrize("where", ["model", "data"])
def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  where: str) -> None:
    """The 489-byte config of the issue (its aliases expand to a million values; the old reader took them all and
    its error message quoted them whole)."""
    path = tmp_path / "bomb.yaml"
    field = "name" if where == "model" else "user_col"
    path.write_text(alias_bomb() + f"{where}:\n  {field}: *l5\n")
    assert path.stat().st_size < 600
    code, _, err = run_cli(capsys, "config", "show", "--config", str(path))
    line = one_line_error(code, err, f"{path}:", "refused: its aliases expand to more than 100,000 values",
                          "RESDOM_MAX_YAML_NODES")
    assert len(line) < READABLE


@pytest.mark.slow  # over 5 s of CPU: the fast subset stays under 2 minutes on 2 cores
def test_a_long_yaml_list_without_aliases_is_refused_while_it_is_read(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A config holding a 3,000,000-value list (6 MB, no alias) was composed whole (68 s, 2.2 GB) and then refused
    as "its aliases expand to more than 100,000 values"; the values are counted as they are composed and the
    message says what the document holds."""
    from resdom.bounded import load_yaml

    path = tmp_path / "long.yaml"
    path.write_text("model:\n  hidden: [" + ",".join(["1"] * 100_001) + "]\n")
    code, _, err = run_cli(capsys, "config", "show", "--config", str(path))
    line = one_line_error(code, err, f"{path}:2: refused: it holds more than 100,000 values", "RESDOM_MAX_YAML_NODES")
    assert "alias" not in line
    assert load_yaml("[" + ",".join(["1"] * 99_998) + "]") == [1] * 99_998  # the list node and its values: 99,999
    with pytest.raises(ResdomError, match="x:1: refused: it holds more than 100,000 values"):
        load_yaml("{" + ", ".join(f"k{i}: {i}" for i in range(50_000)) + "}", "x")


def test_an_alias_bomb_in_set_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["config", "show"], ["train", SMALL_SYNTHETIC, "--out", "never"]):
        code, _, err = run_cli(capsys, *args, "--set", f"model.name={flow_alias_bomb()}")
        line = one_line_error(code, err, "--set model.name", "refused")
        assert len(line) < READABLE
    assert not Path("never").exists()


def test_deep_yaml_and_json_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("model:\n  name: " + "[" * 5000 + "]" * 5000 + "\n")
    code, _, err = run_cli(capsys, "config", "show", "--config", str(path))
    one_line_error(code, err, f"{path}:", "nested more than 50 levels deep", "RESDOM_MAX_YAML_DEPTH")
    with pytest.raises(ResdomError, match="nested too deeply"):
        load_json("[" * 100_000 + "]" * 100_000, "model.json")
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}  # a few aliases are fine


# -------------------------------------------------------------------------------------------------- archives


def _split_dir(tmp_path: Path) -> Path:
    from resdom.data.prepare import prepare_split

    split = prepare_split(SMALL_SYNTHETIC, "loo")
    out = tmp_path / "split"
    split.save(out)
    return out


def test_an_arrays_npz_that_unpacks_far_past_its_size_is_refused(tmp_path: Path, low_expansion: None) -> None:
    folder = _split_dir(tmp_path)
    path = folder / "arrays.npz"
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    path.write_bytes(zip_with_member("pad.npy", 80 * MIB, members))
    assert path.stat().st_size < MIB
    with pytest.raises(ResdomError, match=r"arrays\.npz: not a readable prepared split \(refused: its members unpack "
                                          r"to 8\d,\d{3},\d{3} bytes"):
        SplitData.load(folder)


def test_an_npy_header_declaring_more_than_its_bytes_is_refused(tmp_path: Path) -> None:
    record = bytearray(npy_bytes(np.arange(4, dtype=np.int64)))
    record = record.replace(b"(4,)", b"(9999999999,)".ljust(len(b"(4,)") + 9)[: len(b"(4,)") + 9], 1)
    header_len = struct.unpack_from("<H", record, 8)[0]
    struct.pack_into("<H", record, 8, header_len + 9)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x.npy", bytes(record))
    with pytest.raises(ResdomError, match=r"x\.npy: .*(declares shape|not a readable array record)"):
        load_npz(buf.getvalue(), "a.npz")


def test_an_arrays_npz_with_a_vector_n_items_is_one_line(tmp_path: Path) -> None:
    folder = _split_dir(tmp_path)
    path = folder / "arrays.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    for name, value in (("n_items", np.array([3, 4])), ("train_offsets", arrays["train_offsets"].reshape(1, -1))):
        np.savez_compressed(path, **{**arrays, name: value})
        with pytest.raises(ResdomError, match=r"arrays\.npz: not a readable prepared split"):
            SplitData.load(folder)


def test_a_users_npz_bomb_is_refused(tmp_path: Path, low_expansion: None) -> None:
    header = {"version": 1, "checkpoint": "abc"}
    good = npz_bytes({"header": np.array(json.dumps(header)), "users": np.arange(3)})
    path = tmp_path / "users.npz"
    path.write_bytes(good)
    assert read_users(path)[0] == header and read_header(path) == header
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    path.write_bytes(zip_with_member("pad.npy", 80 * MIB, members))
    with pytest.raises(ValueError, match="refused: its members unpack"):
        read_users(path)
    assert read_header(path) == header  # the header alone is small: still read


def test_a_movielens_zip_bomb_is_refused(tmp_path: Path, low_expansion: None) -> None:
    path = tmp_path / "ml-1m.zip"
    path.write_bytes(zip_with_member("ml-1m/ratings.dat", 80 * MIB))
    with pytest.raises(ResdomError, match=r"ml-1m\.zip: refused: its members unpack"):
        read_movielens_zip(path)


@pytest.mark.parametrize("name,fmt", [("data.csv.gz", "csv"), ("data.txt.gz", "user-lines")])
def test_a_gzip_bomb_is_refused(tmp_path: Path, low_expansion: None, name: str, fmt: str) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"user_id,item_id,timestamp\n" + bytes(80 * MIB), 1))
    with pytest.raises(ResdomError, match="refused: this gzip file .* unpacks to more than"):
        read_interactions([path], fmt)


def test_a_truncated_csv_gz_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said only "error: aborted" (Click takes any EOFError for the end of input)."""
    path = tmp_path / "data.csv.gz"
    rows = "".join(f"{u},{i},{1000 + i}\n" for u in range(30) for i in range(1, 9))
    path.write_bytes(gzip.compress(("user_id,item_id,timestamp\n" + rows).encode())[:-30])
    code, _, err = run_cli(capsys, "data", "stats", str(path))
    one_line_error(code, err, str(path), "truncated")


def _capped(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter under a 2 GiB address-space cap and a timeout (the old code hung here)."""
    prelude = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_a_device_or_fifo_given_as_data_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    code = ("from pathlib import Path\nfrom resdom.data.readers import read_interactions, split_source_paths\n"
            "from resdom.errors import ResdomError\n"
            f"for p in ({str(fifo)!r}, '/dev/zero'):\n"
            "    for read in (lambda: read_interactions([Path(p)], 'csv'), lambda: read_interactions([Path(p)]),\n"
            "                 lambda: split_source_paths(p)):\n"
            "        try:\n            read()\n            print('read', p)\n"
            "        except ResdomError as e:\n            print('error', e)\n")
    try:
        done = _capped(code)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO or /dev/zero did not end")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert len(lines) == 6 and all(x.startswith("error") for x in lines), lines
    assert "a FIFO (named pipe), not a regular file" in lines[0] and "a character device" in lines[3]


def test_a_synthetic_size_is_bounded() -> None:
    for spec, name in (("n_users=10000000", "RESDOM_MAX_SYNTHETIC_USERS"),
                       ("n_items=10000000,n_clusters=5", "RESDOM_MAX_SYNTHETIC_ITEMS"),
                       ("n_users=1000000,max_len=1000,min_len=1", "RESDOM_MAX_SYNTHETIC_INTERACTIONS")):
        with pytest.raises(ResdomError, match=name):
            parse_synthetic_source(f"synthetic:{spec}")
    assert parse_synthetic_source("synthetic:n_users=100000").n_users == 100_000


# ---------------------------------------------------------------------------------------------- run folders


@pytest.fixture()
def checkpoint(tmp_path: Path) -> Path:
    from resdom.models import build_model
    from resdom.models.config import make_model_config
    from resdom.runs import save_checkpoint

    path = tmp_path / "model.safetensors"
    save_checkpoint(path, build_model(make_model_config(n_items=10, hidden=8, layers=1, heads=2, max_len=8)))
    return path


@pytest.mark.parametrize("field,value,needle", [
    ("layers", 200_000, "more than its weights file"), ("layers", 20_000_000, "refused: this model"),
    ("max_len", 1_000_000_000, "refused: this model"),
    ("n_items", 1_000_000, "more than its weights file"), ("hidden", 4096, "more than its weights file"),
])
def test_a_model_description_is_checked_before_anything_is_built(checkpoint: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 field: str, value: int, needle: str) -> None:
    """model.json saying layers=200000 or max_len=1e9 built gigabytes of weights before any check."""
    import resdom.runs as runs

    def never(cfg: object) -> None:
        raise AssertionError("the model was built")

    side = checkpoint.with_suffix(".json")
    meta = json.loads(side.read_text())
    meta["model"][field] = value
    if field == "hidden":
        meta["model"]["heads"] = 1
    side.write_text(json.dumps(meta))
    monkeypatch.setattr(runs, "build_model", never)
    with pytest.raises(ResdomError, match=needle) as e:
        runs.load_checkpoint(checkpoint)
    assert str(side) in str(e.value)


# ------------------------------------------------------------------------------------------- native readers


@pytest.mark.parametrize("escape", [r"\x4", r"\N{no such name}", r"\u12", "\\"])
def test_a_bad_escape_in_steam_or_beeradvocate_is_read_or_one_line(tmp_path: Path, escape: str) -> None:
    steam = tmp_path / "steam.json"
    steam.write_text("{'username': 'ann" + escape + "x', 'product_id': '7', 'date': '2017-01-02'}\n"
                     "{'username': 'bob', 'product_id': '8', 'date': '2017-01-03'}\n")
    beer = tmp_path / "beer.json"
    beer.write_text("{'review/profileName': 'ann" + escape + "x', 'beer/beerId': '7', 'review/time': '100'}\n"
                    "{'review/profileName': 'bob', 'beer/beerId': '8', 'review/time': '200'}\n")
    for read, path in ((read_steam, steam), (read_beeradvocate, beer)):
        try:
            raw = read(path)
        except ResdomError as e:
            assert "\n" not in str(e)
        else:
            assert len(raw.users) == 2


def test_a_parquet_column_of_lists_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    pd.DataFrame({"user_id": [[1, 2], [3]], "item_id": [1, 2], "timestamp": [1, 2]}).to_parquet(path)
    with pytest.raises(ResdomError, match=r"data\.parquet: row 1: column 'user_id' holds a ndarray"):
        read_interactions([path], "parquet")


# ------------------------------------------------------------------------------------------------- messages


def test_a_huge_timestamp_or_id_is_quoted_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 50 MB timestamp (here 2 MB) and a 20 MB id were repeated whole in the message."""
    path = tmp_path / "data.csv"
    path.write_text("user_id,item_id,timestamp\n1,2,100\n1,3," + "9" * 2_000_000 + "x\n")
    code, _, err = run_cli(capsys, "data", "stats", str(path))
    line = one_line_error(code, err, f"{path}:3", "timestamp '999")
    assert len(line) < READABLE
    lines = tmp_path / "lines.txt"  # user-lines: the same user on two lines names the user
    big = "u" * 2_000_000
    lines.write_text(f"{big} 1 2 3\n{big} 4 5 6\n")
    code, _, err = run_cli(capsys, "data", "stats", str(lines), "--format", "user-lines")
    line = one_line_error(code, err, str(lines))
    assert len(line) < READABLE


def test_json_nested_too_deeply_is_one_line_where_resdom_reads_json(tmp_path: Path) -> None:
    """recommend --sequences FILE.json and a split's manifest.json: a RecursionError traceback before."""
    from resdom.cli.data_options import split_manifest
    from resdom.cli.recommend_cmd import read_sequences

    deep = "[" * 100_000 + "]" * 100_000
    sessions = tmp_path / "sessions.json"
    sessions.write_text(deep)
    with pytest.raises(ResdomError, match=r"--sequences .*sessions\.json: refused: JSON nested too deeply"):
        read_sequences(sessions)
    (tmp_path / "manifest.json").write_text(deep)
    with pytest.raises(ResdomError, match=r"manifest\.json: refused: JSON nested too deeply"):
        split_manifest(tmp_path)


@pytest.mark.parametrize("name", [b"rle.parquet", b"rle\xe4.parquet"])
def test_a_parquet_file_declaring_far_more_rows_than_its_size_holds_is_refused(tmp_path: Path, name: bytes,
                                                                               low_expansion: None) -> None:
    """A few KB of run-length-encoded pages can declare a billion rows (here 3 million, the limit lowered); a file
    whose name is no UTF-8 (Latin-1 bytes, which pyarrow cannot take as a path) went unchecked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 3_000_000
    path = tmp_path / os.fsdecode(name)
    zeros = pa.array(np.zeros(n, dtype=np.int64))
    plain = tmp_path / "written.parquet"  # pyarrow's writer takes no such name either
    pq.write_table(pa.table({"user_id": zeros, "item_id": zeros, "timestamp": zeros}), plain, compression="zstd")
    plain.rename(path)
    assert path.stat().st_size < MIB
    with pytest.raises(ResdomError, match=r"rle.?\.parquet: refused: this Parquet file .* declares 3,000,000 rows"):
        read_interactions([path], "parquet")


def test_a_parquet_file_whose_name_is_no_utf8_is_read(tmp_path: Path) -> None:
    """pyarrow cannot encode a name held with surrogates (Latin-1 bytes): such a file was "not a readable Parquet
    file (UnicodeEncodeError ...)"."""
    frame = pd.DataFrame({"user_id": [1, 1, 2], "item_id": [5, 6, 5], "timestamp": [1, 2, 3]})
    path = tmp_path / os.fsdecode(b"d\xe4ten.parquet")
    frame.to_parquet(tmp_path / "plain.parquet")
    (tmp_path / "plain.parquet").rename(path)
    raw = read_interactions([path], "parquet")
    assert raw.users.tolist() == [1, 1, 2] and raw.items.tolist() == [5, 6, 5] and raw.times.tolist() == [1, 2, 3]


def test_the_cli_turns_an_unforeseen_memory_or_recursion_error_into_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The last line of defence (the limits refuse what they foresee first); and an EOFError a reader let through
    is a truncated file, not "aborted"."""
    for error, needle, status in ((MemoryError(), "out of memory", 2), (RecursionError(), "nested too deeply", 2),
                                  (EOFError("Compressed file ended before the end-of-stream marker was reached"),
                                   "truncated", 2)):
        def fail(*args: object, _e: BaseException = error, **kwargs: object) -> None:
            raise _e

        monkeypatch.setattr("resdom.cli.data_cmd.format_stats", fail)
        code, _, err = run_cli(capsys, "data", "stats", SMALL_SYNTHETIC)
        assert code == status and "Traceback" not in err
        lines = [x for x in err.splitlines() if x.startswith("error:")]
        assert len(lines) == 1 and needle in lines[0], err


CUDA_OOM = ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.20 "
            "GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html)")


@pytest.mark.parametrize("error, said", [
    (torch.OutOfMemoryError(CUDA_OOM), "(CUDA out of memory, tried to allocate 20.00 GiB)"),
    (RuntimeError("MPS backend out of memory (MPS allocated: 17.50 GB, other allocations: 1.00 GB, max allowed: "
                  "18.13 GB). Tried to allocate 2.00 GB on private pool."),
     "(MPS backend out of memory, tried to allocate 2.00 GB)"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
                  "tried to allocate 35184372088832 bytes. Error code 12 (Cannot allocate memory)"),
     "(DefaultCPUAllocator: can't allocate memory, tried to allocate 35184372088832 bytes)")])
def test_a_device_out_of_memory_is_one_line_naming_what_to_lower(
        error: RuntimeError, said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """torch's own allocation failure is no MemoryError: `resdom train --device cuda` with ce_all on a large
    catalogue (the (positions x items) scores at once on a GPU, docs/scaling.md) ended in a traceback and torch's
    page on its allocator; now one line, with what to lower."""
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr("resdom.training.trainer.backward_groups", fail)
    code, _, err = run_cli(capsys, "train", SMALL_SYNTHETIC, "--out", str(tmp_path / "run"), "--epochs", "1",
                           "--device", "cpu", "--set", "model.hidden=8", "--set", "model.layers=1")
    one_line_error(code, err, f"out of memory {said}; lower --set train.batch_size=N", "--set model.max_len=N",
                   "--set train.objective=ce_sampled")
    monkeypatch.setattr("resdom.training.trainer.backward_groups", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("a bug")))  # any other RuntimeError is no out-of-memory line
    with pytest.raises(RuntimeError, match="a bug"):
        run_cli(capsys, "train", SMALL_SYNTHETIC, "--out", str(tmp_path / "run2"), "--epochs", "1", "--device",
                "cpu")


@pytest.mark.parametrize("bad", [torch.zeros(5), torch.zeros(5, 0), torch.zeros(2, 2, 2)])
def test_a_crafted_recbole_or_rectools_item_table_is_one_line(bad: torch.Tensor) -> None:
    """A 1-D, empty or 3-D item table was an IndexError traceback in both importers' model configs."""
    import dataclasses

    from resdom.adapters.recbole import recbole_model_config
    from resdom.adapters.rectools import ID_EMB, rectools_model_config

    fixtures = Path(__file__).parent / "fixtures"
    recbole = read_recbole_checkpoint(fixtures / "recbole" / "sasrec_tiny.pth")
    crafted = dataclasses.replace(recbole, state_dict={**recbole.state_dict, "item_embedding.weight": bad})
    with pytest.raises(ResdomError, match="'item_embedding.weight' is .*, not a table"):
        recbole_model_config(crafted, 4)
    rectools = read_rectools_file(fixtures / "rectools" / "sasrec.rectools")
    crafted_rt = dataclasses.replace(rectools, state_dict={**rectools.state_dict, ID_EMB: bad})
    with pytest.raises(ResdomError, match="not a table of rows x hidden size"):
        rectools_model_config(crafted_rt, 4, "model.rectools")


def test_a_numpy_object_array_whose_shape_exceeds_its_elements_is_refused() -> None:
    """RecTools keeps item ids in object arrays; numpy allocates the shape (8 bytes an element) before it compares
    it with the list of elements: a shape of 10^8 over two ids took 800 MB."""
    import io as _io

    from resdom.adapters.safe_pickle import RestrictedUnpickler

    good = pickle.dumps(np.array(["a", "b"], dtype=object), protocol=2)
    assert good.count(b"K\x02\x85") == 1
    bomb = good.replace(b"K\x02\x85", b"J" + struct.pack("<i", 10**8) + b"\x85")
    assert list(RestrictedUnpickler(_io.BytesIO(good), object_arrays=True).load()) == ["a", "b"]
    with pytest.raises(ResdomError, match=r"a numpy array of shape \(100000000,\) whose data holds 2 elements"):
        RestrictedUnpickler(_io.BytesIO(bomb), object_arrays=True).load()


def test_the_reports_users_npz_reader_refuses_a_bomb(tmp_path: Path, low_expansion: None) -> None:
    """report.compare.read_users (the report's per-user evidence) reads within the same limits: a member that
    unpacks past them is one ResdomError naming the file, before any array is built."""
    from resdom.report.compare import read_users as report_read_users

    good = npz_bytes({"header": np.array(json.dumps({"version": 1}))})
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    path = tmp_path / "users.npz"
    path.write_bytes(zip_with_member("pad.npy", 80 * MIB, members))
    with pytest.raises(ResdomError, match=r"users\.npz.*not a readable \.npz file.*refused"):
        report_read_users(path)
