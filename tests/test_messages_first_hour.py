"""The messages a newcomer meets in the first hour (issue 27): each says what the input is and
what to do, with the exit code of bad input (2) where the input is wrong."""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar._docs import DOCS_URL
from h5sidecar.cli import build_parser, main
from h5sidecar.dest import RECORD_NAME
from h5sidecar.errors import NotHDF5Error
from h5sidecar.indexer import index_granule
from h5sidecar.read import H5SidecarBackend, read_arrays
from h5sidecar.sample import write_daily_collection
from h5sidecar.workflows import index_many
from tests.test_messages import _netcdf3
from tests.workflows.conftest import assert_matches_h5py, write_granule


@pytest.fixture(scope="module")
def dest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(granule folder, DEST)`` of two indexed granules."""
    root = tmp_path_factory.mktemp("first-hour")
    write_granule(root / "src" / "a.h5", seed=1)
    write_granule(root / "src" / "b.h5", seed=2)
    report = index_many(str(root / "src"), str(root / "dest"), executor="serial")
    assert report.ok
    return root / "src", root / "dest"


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_dest_folder_is_named_with_its_sidecars(command: str, dest: tuple[Path, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src, folder = dest
    assert main([command, str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is an index folder" in err and "pass one of its sidecars" in err, err
    assert str(folder / "a.h5.parq") in err and "index the granule first" not in err
    # the sidecar it names is the one to pass: it reads what h5py reads
    assert_matches_h5py(str(folder / "a.h5.parq"), src / "a.h5")


def test_prune_on_a_folder_of_granules_says_it_is_not_a_dest(
        dest: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    src, folder = dest
    for apply in ([], ["--apply"]):
        assert main(["prune", str(src), *apply]) == 2
        err = capsys.readouterr().err
        assert "is not a DEST" in err and "h5sidecar index -o" in err, err
    assert sorted(p.name for p in src.iterdir()) == ["a.h5", "b.h5"]  # no lock file left there
    assert main(["prune", str(folder)]) == 0
    assert "0 of 2 sidecar(s) and temporaries would be removed" in capsys.readouterr().out


def test_an_empty_dest_is_still_a_dest(tmp_path: Path) -> None:
    """A DEST whose run kept nothing (a record, no sidecar) is pruned as before."""
    from h5sidecar.workflows import prune

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.h5").write_bytes(b"not HDF5")
    assert not index_many(str(tmp_path / "src"), str(tmp_path / "d"), executor="serial").ok
    assert (tmp_path / "d" / RECORD_NAME).is_file() and not list((tmp_path / "d").glob("*.parq"))
    result = prune(str(tmp_path / "d"))
    assert result.entries == () and result.sidecars_checked == 0


def test_a_dest_that_cannot_be_created_is_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    granule = write_granule(tmp_path / "src" / "a.h5")
    (tmp_path / "file").write_text("x")
    targets = [tmp_path / "file" / "dest"] + ([Path("/proc/nope")] if sys.platform == "linux"
                                             else [])
    for target in targets:
        assert main(["index", str(granule.parent), "-o", str(target), "--serial"]) == 2
        captured = capsys.readouterr()
        assert f"cannot create DEST {target}" in captured.err, captured.err
        assert "failed" not in captured.out + captured.err
    assert not (tmp_path / "file").is_dir()


def test_netcdf3_advice_fits_the_caller(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    (tmp_path / "src").mkdir()
    nc3 = _netcdf3(tmp_path / "src" / "classic.nc")
    with pytest.raises(NotHDF5Error) as err:  # from Python: no CLI option in the message
        index_granule(str(nc3))
    assert "netCDF-3" in str(err.value) and "--pattern" not in str(err.value)
    assert "patterns=" in (err.value.hint or "")
    assert main(["index", str(nc3.parent), "-o", str(tmp_path / "out"), "--serial"]) == 1
    out = capsys.readouterr().out
    what_to_do = next(line for line in out.splitlines() if "what to do:" in line)
    assert "--pattern" in what_to_do and "re-stage" not in what_to_do, what_to_do


def test_a_typo_in_read_arrays_names_the_sidecar(dest: tuple[Path, Path]) -> None:
    src, folder = dest
    sidecar = str(folder / "a.h5.parq")
    with pytest.raises(KeyError) as err:
        read_arrays(sidecar, ["gt1l/heights/h_pj"])
    message = str(err.value)
    assert sidecar in message and "did you mean 'gt1l/heights/h_ph'" in message, message
    got = read_arrays(sidecar, ["gt1l/heights/h_ph"])["gt1l/heights/h_ph"]
    with h5py.File(src / "a.h5") as f:
        np.testing.assert_array_equal(got, f["gt1l/heights/h_ph"][()])


def _many_variables(path: Path, n: int = 60) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for i in range(n):
            f.create_dataset(f"g{i % 3}/v{i:02d}", data=np.arange(20.0) + i, chunks=(10,))
    return path


def test_inspect_and_verify_summarise_many_variables(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    granule = _many_variables(tmp_path / "src" / "many.h5")
    report = index_many(str(granule.parent), str(tmp_path / "dest"), executor="serial")
    sidecar = report.granules[0].sidecar
    assert_matches_h5py_all(sidecar, granule)
    for command in ("inspect", "verify"):
        assert main([command, sidecar]) == 0
        short = capsys.readouterr().out
        assert "per top-level group (--all: every variable)" in short
        assert "g0/v00" not in short and "g1" in short  # a row per group, not per variable
        assert len(short.splitlines()) < 30
        assert main([command, sidecar, "--all"]) == 0
        every = capsys.readouterr().out
        assert all(f"v{i:02d}" in every for i in range(60)) and "per top-level" not in every


def assert_matches_h5py_all(sidecar: str, granule: Path) -> None:
    got = read_arrays(sidecar, [f"g{i % 3}/v{i:02d}" for i in range(60)])
    with h5py.File(granule) as f:
        for name, values in got.items():
            np.testing.assert_array_equal(values, f[name][()])


def test_verify_says_when_the_decoded_check_is_skipped(
        dest: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    sidecar = str(dest[1] / "a.h5.parq")
    assert main(["verify", sidecar]) == 0
    assert "not checked" not in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "h5netcdf", None)  # as when it is not installed
    assert main(["verify", sidecar]) == 0
    out = capsys.readouterr().out
    assert "not checked" in out and "h5netcdf is not installed" in out
    assert 'pip install "h5sidecar[netcdf]"' in out  # not eaten as markup


def test_cube_prints_first_and_last_times_as_dates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_daily_collection(tmp_path / "src", days=2, start=date(2020, 1, 1))
    assert index_many(str(tmp_path / "src"), str(tmp_path / "dest"), executor="serial").ok
    assert main(["cube", str(tmp_path / "dest"), "-o", str(tmp_path / "cube.parq")]) == 0
    out = capsys.readouterr().out
    times = []
    for p in paths:  # the oracle: xarray + h5netcdf's decoded times
        with xr.open_dataset(p, engine="h5netcdf") as ds:
            times += [str(np.datetime_as_string(t, unit="s")) for t in ds["time"].values]
    assert times[0] in out and times[-1] in out, out


def test_every_option_of_every_command_has_help() -> None:
    missing = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(child, sub)
            elif not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "h5sidecar")
    assert not missing, f"options without help: {missing}"
    sample = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    photons = next(a for a in sample.choices["sample"]._actions if a.dest == "photons")
    assert "per granule, over its six beams" in (photons.help or "")


def test_the_xarray_engine_points_at_the_published_docs() -> None:
    assert DOCS_URL.startswith("https://") and DOCS_URL.endswith("/")
    assert H5SidecarBackend.url == f"{DOCS_URL}how-to/xarray/"
    assert xr.backends.list_engines()["h5sidecar"].url == H5SidecarBackend.url
