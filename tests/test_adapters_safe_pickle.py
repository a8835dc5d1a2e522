"""The restricted unpickler: tensors and plain data load; anything that would run code is refused, unexecuted."""

from __future__ import annotations

import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from resdom.adapters.safe_pickle import Inert, load_torch_file, loads_restricted
from resdom.errors import ResdomError


class Evil:
    """Unpickling this runs ``os.system(cmd)`` (with an ordinary unpickler)."""

    def __init__(self, cmd: str) -> None:
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


class EvalEvil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (eval, (f"open({str(self.marker)!r}, 'w').write('pwned')",))


def test_tensors_and_plain_data_round_trip(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    obj = {
        "view": base[:, 1:4],  # non-contiguous view: offset and strides matter
        "t": base.T, "same_storage": base[2],
        "long": torch.tensor([1, -2, 3]), "half": torch.tensor([0.5, 1.5], dtype=torch.float16),
        "bool": torch.tensor([True, False]), "empty": torch.zeros(0, 3), "scalar": torch.tensor(3.25),
        "param": torch.nn.Parameter(torch.ones(2)), "od": OrderedDict(a=1, b=[1.0, "x", None]),
        "device": torch.device("cpu"), "tuple": (1, 2), "set": {1, 2}, "np": np.arange(3, dtype=np.int32),
        "np_scalar": np.float64(2.5),
    }
    path = tmp_path / "ok.pth"
    torch.save(obj, path)
    got = load_torch_file(path)
    for key in ("view", "t", "same_storage", "long", "half", "bool", "empty", "scalar", "param"):
        assert got[key].dtype == obj[key].dtype and torch.equal(got[key], obj[key].detach()), key
    assert got["od"] == obj["od"] and isinstance(got["od"], OrderedDict)
    assert got["device"] == "cpu" and got["tuple"] == (1, 2) and got["set"] == {1, 2}
    assert np.array_equal(got["np"], obj["np"]) and got["np_scalar"] == 2.5


def test_state_dict_with_metadata_loads(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    path = tmp_path / "sd.pth"
    torch.save(model.state_dict(), path)
    got = load_torch_file(path)
    assert set(got) == set(model.state_dict())
    assert all(torch.equal(got[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("make", ["os_system", "eval"])
def test_malicious_checkpoint_is_refused_and_never_runs(tmp_path: Path, make: str) -> None:
    marker = tmp_path / "marker"
    payload = Evil(f"touch {marker}") if make == "os_system" else EvalEvil(marker)
    path = tmp_path / "evil.pth"
    torch.save({"state_dict": {"w": torch.ones(2)}, "config": payload}, path)
    with pytest.raises(ResdomError) as err:
        load_torch_file(path, stand_in_prefixes=("recbole.",))
    expected = "posix.system" if make == "os_system" else "builtins.eval"
    assert expected in str(err.value) and "refused" in str(err.value)
    assert not marker.exists()


def test_malicious_plain_pickle_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    with pytest.raises(ResdomError, match="posix.system"):
        loads_restricted(pickle.dumps(Evil(f"touch {marker}")))
    assert not marker.exists()


def test_every_refusal_names_the_file(tmp_path: Path) -> None:
    """A RecTools model handed to import-recbole said only "refused: numpy object dtype": the unpickler's refusals
    now name the file (or the source) they are about, once."""
    path = tmp_path / "model.pth"
    torch.save({"w": torch.ones(2), "names": np.array(["a", None], dtype=object)}, path)
    with pytest.raises(ResdomError) as err:
        load_torch_file(path)
    assert str(err.value) == f"{path}: refused: numpy object dtype"
    with pytest.raises(ResdomError) as err:
        loads_restricted(pickle.dumps(np.array([1, None], dtype=object)), source="config.pkl")
    assert str(err.value) == "config.pkl: refused: numpy object dtype"


def test_stand_in_prefix_does_not_cover_other_modules() -> None:
    data = pickle.dumps(Evil("true"))
    with pytest.raises(ResdomError, match="posix.system"):
        loads_restricted(data, stand_in_prefixes=("recbole.",))


def test_build_on_a_whitelisted_global_or_its_result_is_refused() -> None:
    # GLOBAL collections.OrderedDict, then BUILD {"x": 1} on the callable itself: must not touch our objects
    data = b"\x80\x02ccollections\nOrderedDict\n}X\x01\x00\x00\x00xK\x01sb."
    with pytest.raises(ResdomError, match="sets state on a _Global"):
        loads_restricted(data)
    # set() then BUILD: only stand-ins, OrderedDicts and numpy objects take state
    data = b"\x80\x02c__builtin__\nset\n)R}X\x01\x00\x00\x00xK\x01sb."
    with pytest.raises(ResdomError, match="sets state on a set"):
        loads_restricted(data)


def test_stand_ins_collect_state_without_running_anything() -> None:
    data = (b"\x80\x02crecbole.config.configurator\nConfig\n)\x81}X\x05\x00\x00\x00modelX\x06\x00\x00\x00SASRec"
            b"sb.")
    cfg = loads_restricted(data, stand_in_prefixes=("recbole.",))
    assert isinstance(cfg, Inert) and cfg.qualname == "recbole.config.configurator.Config"
    assert cfg.state == {"model": "SASRec"}


def test_persistent_reference_without_archive_is_refused() -> None:
    data = b"\x80\x02X\x01\x00\x00\x00xQ."  # BINPERSID on a string
    with pytest.raises(ResdomError, match="persistent"):
        loads_restricted(data)


def test_tensor_reading_past_its_storage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ok.pth"
    torch.save({"w": torch.arange(4.0)}, path)
    bad = tmp_path / "bad.pth"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            blob = src.read(info)
            if info.filename.endswith("data.pkl"):
                # size (4,) -> (40,): the view would read past the 4-element storage
                blob = blob.replace(b"K\x04\x85", b"K(\x85", 1)
                assert b"K(\x85" in blob
            dst.writestr(info, blob)
    with pytest.raises(ResdomError, match="view of 40 elements on a storage of 4"):
        load_torch_file(bad)


def test_not_a_zip_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pth"
    path.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ResdomError, match="not a torch zip checkpoint"):
        load_torch_file(path)
    with pytest.raises(ResdomError, match="not found"):
        load_torch_file(tmp_path / "missing.pth")


def _patched(src_path: Path, dst_path: Path, old: bytes, new: bytes) -> None:
    """Copy the torch zip ``src_path`` to ``dst_path`` with ``old`` replaced once by ``new`` in its data.pkl."""
    with zipfile.ZipFile(src_path) as src, zipfile.ZipFile(dst_path, "w") as dst:
        for info in src.infolist():
            blob = src.read(info)
            if info.filename.endswith("data.pkl"):
                assert old in blob
                blob = blob.replace(old, new, 1)
            dst.writestr(info, blob)


def test_stride_zero_view_larger_than_its_storage_is_refused(tmp_path: Path) -> None:
    """A view with more elements than its storage (stride 0 over one value): its last index is inside the storage,
    but copying it would expand a few hundred bytes into (here) 4 kB, in the reproduced case 1.9 GB."""
    ok = tmp_path / "ok.pth"
    torch.save({"w": torch.ones(1).expand(4)}, ok)  # size (4,), stride (0,) over a 1-element storage
    with pytest.raises(ResdomError, match="view of 4 elements on a storage of 1"):
        load_torch_file(ok)  # an expanded view is refused too (no model weight is one)
    bad = tmp_path / "bad.pth"
    _patched(ok, bad, b"K\x04\x85", b"M\xe8\x03\x85")  # size (4,) -> (1000,)
    with pytest.raises(ResdomError, match="view of 1000 elements on a storage of 1"):
        load_torch_file(bad)
    assert bad.stat().st_size < 2000


def test_offset_and_strides_must_stay_inside_the_storage(tmp_path: Path) -> None:
    ok = tmp_path / "ok.pth"
    torch.save({"w": torch.arange(6.0).reshape(2, 3)}, ok)  # size (2, 3), stride (3, 1), offset 0
    assert torch.equal(load_torch_file(ok)["w"], torch.arange(6.0).reshape(2, 3))
    bad = tmp_path / "stride.pth"
    _patched(ok, bad, b"K\x03K\x01\x86", b"K\x04K\x01\x86")  # stride (3, 1) -> (4, 1): reads index 6
    with pytest.raises(ResdomError, match="past its storage"):
        load_torch_file(bad)


def test_tensors_far_larger_than_the_file_are_refused(tmp_path: Path) -> None:
    """Many whole views of one storage: each is legal, together they are 40x the file. Storages are read once."""
    base = torch.zeros(64 * 1024)  # 256 kB
    path = tmp_path / "many.pth"
    torch.save([base[:] for _ in range(40)], path)
    assert path.stat().st_size < 300_000
    with pytest.raises(ResdomError, match="far more memory than the file's size"):
        load_torch_file(path)
    few = tmp_path / "few.pth"  # tied weights: two views of one storage load
    torch.save({"a": base[:], "b": base[:]}, few)
    got = load_torch_file(few)
    assert torch.equal(got["a"], base) and torch.equal(got["b"], base)


def test_a_record_that_unpacks_far_past_the_file_size_is_refused(tmp_path: Path) -> None:
    """torch.save stores records uncompressed; a deflated 8 MB storage of zeros in a 10 kB file is refused unread."""
    ok = tmp_path / "ok.pth"
    torch.save({"w": torch.zeros(2 * 1024 * 1024)}, ok)
    bad = tmp_path / "deflated.pth"
    with zipfile.ZipFile(ok) as src, zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    assert bad.stat().st_size < 100_000
    with pytest.raises(ResdomError, match="unpacks to 8388608 bytes"):
        load_torch_file(bad)
    assert torch.equal(load_torch_file(ok)["w"], torch.zeros(2 * 1024 * 1024))
