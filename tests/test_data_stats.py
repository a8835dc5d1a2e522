"""dataset_stats (spec §1) on hand-computed cases; ``resdom data stats`` of a file and of a split folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import one_line_error, run_cli

from resdom.data.prepare import prepare_split
from resdom.data.sequences import Sequences
from resdom.data.stats import dataset_stats, format_stats
from resdom.errors import ResdomError


def test_stats_by_hand() -> None:
    # 3 users (lengths 2, 3, 1) over items {1, 2, 5}: 6 interactions; times span 2 days + 12 hours
    seqs = Sequences(np.array([0, 2, 5, 6]), np.array([1, 2, 2, 5, 1, 5]),
                     np.array([0, 10, 86400, 2 * 86400, 3600, 2 * 86400 + 43200]))
    s = dataset_stats(seqs)
    assert (s["users"], s["items"], s["interactions"]) == (3, 3, 6)
    assert s["avg_length"] == 2.0 and s["max_length"] == 3 and s["min_length"] == 1
    assert s["density"] == pytest.approx(6 / 9)
    assert s["span_days"] == 2.5
    lines = format_stats(s)
    assert any(line.startswith("span days") and line.endswith("2.50") for line in lines)


def test_the_density_line_reads_back_as_the_density_of_a_sparse_data_set() -> None:
    """data stats printed density to six decimals: a million users and items with ten million interactions
    (1.04e-05) read 0.000010, and a sparser set's 0.000000, as if it held no interaction."""
    for users, items, interactions in ((3, 3, 6), (1_000_000, 960_000, 10_000_000), (2_000_000, 5_000_000, 3_000_000),
                                       (20_000, 10_000, 200_000)):
        density = interactions / (users * items)
        s = {"users": users, "items": items, "interactions": interactions, "avg_length": interactions / users,
             "max_length": 5, "min_length": 1, "density": density, "span_days": None}
        printed = float(next(line for line in format_stats(s) if line.startswith("density")).split()[-1])
        assert printed == pytest.approx(density, rel=5e-3)
    s["density"] = 0.5
    assert next(line for line in format_stats(s) if line.startswith("density")).endswith("0.500000")  # as before


def test_stats_without_times_and_empty_sequences() -> None:
    s = dataset_stats(Sequences.from_lists([[3, 3, 4], [], [4]]))
    assert (s["users"], s["items"], s["interactions"], s["min_length"]) == (2, 2, 4, 1)
    assert s["span_days"] is None and s["density"] == 1.0
    assert "-" in format_stats(s)[-1]


def test_data_stats_of_a_split_folder_are_those_of_the_data_it_was_made_from(tmp_path, capsys) -> None:
    """`train` and `data split` take a split folder; `data stats` said "cannot tell which files to read (found
    arrays.npz, manifest.json)"."""
    rows = [f"u{u},i{(u * 7 + j) % 9},{10 * u + j}" for u in range(12) for j in range(2 + u % 4)]
    (tmp_path / "f.csv").write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    code, direct, err = run_cli(capsys, "data", "stats", str(tmp_path / "f.csv"))
    assert code == 0, err
    code, _, err = run_cli(capsys, "data", "split", str(tmp_path / "f.csv"), "--protocol", "loo", "--out",
                           str(tmp_path / "split"))
    assert code == 0, err
    code, out, err = run_cli(capsys, "data", "stats", str(tmp_path / "split"))
    assert code == 0, err
    assert out.splitlines()[1:] == direct.splitlines()[1:] and "users                     12" in out
    code, out, err = run_cli(capsys, "data", "stats", str(tmp_path / "split"), "--json")
    assert code == 0 and json.loads(out)["interactions"] == len(rows), err
    code, _, err = run_cli(capsys, "data", "stats", str(tmp_path / "split"), "--k-core", "2")
    one_line_error(code, err, "--k-core: does not apply to", "a split saved by `resdom data split`")
    manifest = tmp_path / "split" / "manifest.json"
    edited = json.loads(manifest.read_text())
    del edited["dataset"]["users"]
    manifest.write_text(json.dumps(edited))
    code, _, err = run_cli(capsys, "data", "stats", str(tmp_path / "split"))
    one_line_error(code, err, "its manifest.json is not what `resdom data split` writes (no field 'users')")
    (tmp_path / "run" / "data").mkdir(parents=True)  # a run's data/ is such a split: the run is named as one
    for name in ("arrays.npz", "manifest.json"):
        (tmp_path / "run" / "data" / name).write_bytes((tmp_path / "split" / name).read_bytes())
    code, _, err = run_cli(capsys, "data", "stats", str(tmp_path / "run"))
    one_line_error(code, err, f"{tmp_path / 'run'}: a run (resdom train), not data to read: its split is "
                   f"{tmp_path / 'run' / 'data'}")
    code, out, err = run_cli(capsys, "data", "stats", str(tmp_path / "run" / "data"), "--json")
    assert code == 0 and json.loads(out)["interactions"] == len(rows), err
    with pytest.raises(ResdomError, match=r"split: a prepared split \(resdom data split\), not data to read: load it "
                       r"as it is \(resdom.load_split"):
        prepare_split(str(tmp_path / "split"))


def test_data_stats_says_how_many_interactions_the_k_core_removed(tmp_path, capsys) -> None:
    """The preprocessing line under the statistics counts what the k-core removed as the ``data:`` line does; it
    printed ``k-core 2: -3`` (and ``-0`` where nothing went), a sign, not a count."""
    rows = [f"u{u},i{j},{10 * u + j}" for u in range(4) for j in range(3)] + ["u9,lone,1", "u9,i0,2", "u8,i1,5"]
    (tmp_path / "f.csv").write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    code, out, err = run_cli(capsys, "data", "stats", str(tmp_path / "f.csv"), "--k-core", "2")
    assert code == 0, err
    assert "data: k-core 2: removed 2 users, 1 item, 3 interactions" in err  # u9 (after 'lone' goes), u8, 'lone'
    assert out.splitlines()[-1].endswith("; k-core 2: 3 interactions removed")
    assert "users                      4" in out
