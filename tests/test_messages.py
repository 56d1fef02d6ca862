"""Messages that lead somewhere: each names what the input is and what to do next."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.cli import main
from h5sidecar.errors import InvalidReferenceError, NotIndexedError, did_you_mean
from h5sidecar.read import load_refs
from h5sidecar.workflows import index_many
from tests.workflows.conftest import write_granule


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("messages")
    h5 = write_granule(root / "src" / "g.h5")
    report = index_many(str(root / "src"), str(root / "dest"), executor="serial")
    assert report.ok
    return h5, Path(report.granules[0].sidecar)


def _netcdf3(path: Path) -> Path:
    import netCDF4

    with netCDF4.Dataset(path, "w", format="NETCDF3_CLASSIC") as d:
        d.createDimension("x", 3)
        d.createVariable("v", "f4", ("x",))[:] = [1, 2, 3]
    return path


def test_inspect_names_what_the_file_is(indexed: tuple[Path, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    h5, sidecar = indexed
    assert main(["inspect", str(h5)]) == 2
    err = capsys.readouterr().err
    assert "is an HDF5/netCDF-4 file, not a sidecar" in err and "h5sidecar index" in err
    record = next(sidecar.rglob("refs.0.parq"))
    with pytest.raises(InvalidReferenceError, match="one record file of the Parquet sidecar"):
        load_refs(str(record))
    assert main(["inspect", str(record)]) == 2
    assert str(sidecar) in capsys.readouterr().err
    nc3 = _netcdf3(tmp_path / "classic.nc")
    with pytest.raises(InvalidReferenceError, match="netCDF-3"):
        load_refs(str(nc3))


def test_index_names_netcdf3_and_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    src = tmp_path / "src"
    src.mkdir()
    _netcdf3(src / "classic.nc")
    good = write_granule(tmp_path / "good.h5")
    (src / "zipped.h5").write_bytes(gzip.compress(good.read_bytes()))
    assert main(["index", str(src), "-o", str(tmp_path / "out"), "--serial"]) == 1
    out = capsys.readouterr().out
    assert "netCDF-3 (classic or 64-bit offset) file" in out and "convert" not in out
    assert "gzip-compressed file" in out
    assert "[not_hdf5]" in out  # the kind is printed, not eaten as a markup tag


def test_typo_gets_did_you_mean(indexed: tuple[Path, Path]) -> None:
    h5, sidecar = indexed
    with h5py.File(h5) as f:
        groups = [name for name, obj in f.items() if isinstance(obj, h5py.Group)]
        group = next(g for g in groups if any(
            isinstance(o, h5py.Dataset) and o.dtype.kind in "iuf" for o in f[g].values()))
        var = next(n for n, o in f[group].items()
                   if isinstance(o, h5py.Dataset) and o.dtype.kind in "iuf")
        expected = f[f"{group}/{var}"][...]
    typo = group[:-1] + ("x" if group[-1] != "x" else "y")
    with pytest.raises(NotIndexedError, match=f"did you mean {group!r}"):
        xr.open_dataset(sidecar, engine="h5sidecar", group=typo)
    with pytest.raises(KeyError, match=f"did you mean {f'{group}/{var}'!r}"):
        h5sidecar.read_arrays(str(sidecar), [f"{typo}/{var}"])
    # the right names read what h5py reads
    got = h5sidecar.read_arrays(str(sidecar), [f"{group}/{var}"])[f"{group}/{var}"]
    np.testing.assert_array_equal(got, expected)


def test_did_you_mean_lists_the_level_when_nothing_is_close() -> None:
    names = ["", "gt1l", "gt1l/heights", "gt2l", "gt2l/heights", "orbit_info"]
    assert did_you_mean("gt1l/heigths", names).startswith("did you mean 'gt1l/heights'")
    msg = did_you_mean("zzz", names)
    assert "gt1l" in msg and "orbit_info" in msg and "gt1l/heights" not in msg


def test_skips_that_hold_no_data_are_counted_apart(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    with h5py.File(src / "g.h5", "w") as f:
        f["data"] = np.arange(6.0)
        f["data"].make_scale("x")  # data stays; a second link to a group holds no data
        f["g"] = f.create_group("inner")
        f["inner/v"] = np.arange(3)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)  # lost: LZF after a checksum
        dcpl.set_chunk((100,))
        dcpl.set_fletcher32()
        dcpl.set_filter(32000, h5py.h5z.FLAG_MANDATORY, ())
        space = h5py.h5s.create_simple((1000,))
        h5py.h5d.create(f.id, b"lzf", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
    assert main(["index", str(src), "-o", str(tmp_path / "out"), "--serial"]) == 0
    out = capsys.readouterr().out
    report = h5sidecar.workflows.read_report(str(tmp_path / "out"))
    [g] = report.granules
    assert g.n_skipped > g.n_lost >= 1
    assert f"{g.n_lost} variable(s) skipped" in out
    assert f"{g.n_skipped - g.n_lost} entries left out that hold no data" in out
