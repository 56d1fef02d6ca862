"""Safe multi-granule combine: decode each granule with its own CF attributes, or refuse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.references import write_refs
from tests._granules import read_h5, refs_for

COMBINE = {
    "combine_attrs": "drop_conflicts",
    "data_vars": "all",
    "coords": "different",
    "compat": "no_conflicts",
    "join": "outer",
}


def _granule(
    path: Path,
    *,
    scale: float,
    offset: float,
    fill: int,
    time_units: str,
    units: str = "K",
    seed: int = 0,
) -> Path:
    """A CF netCDF-4 granule: packed int16 temperatures with a masked value, CF times."""
    rng = np.random.default_rng(seed)
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("x", 6)
        t = nc.createVariable("time", "f8", ("time",))
        t.units, t.calendar = time_units, "standard"
        t[:] = np.arange(4) * 0.25
        v = nc.createVariable(
            "tas", "i2", ("time", "x"), fill_value=np.int16(fill), chunksizes=(2, 6), zlib=True
        )
        v.scale_factor, v.add_offset = np.float32(scale), np.float32(offset)
        v.units = units
        values = np.ma.masked_array(250 + 30 * rng.random((4, 6)), mask=np.zeros((4, 6), bool))
        values.mask[1, 2] = True
        v[:] = values
    return path


def _sidecar(path: Path) -> str:
    return write_refs(refs_for(path), f"{path}.json", format="json")


@pytest.fixture
def differing(tmp_path: Path) -> list[Path]:
    """Two granules whose scale_factor, add_offset, _FillValue and time units all differ."""
    return [
        _granule(
            tmp_path / "a.nc",
            scale=0.01,
            offset=200.0,
            fill=-32767,
            time_units="days since 2020-01-01",
            seed=1,
        ),
        _granule(
            tmp_path / "b.nc",
            scale=0.002,
            offset=250.0,
            fill=-999,
            time_units="hours since 2020-01-05 00:00",
            seed=2,
        ),
    ]


def _truth(paths: list[Path], **decoding: Any) -> xr.Dataset:
    parts = [xr.open_dataset(p, engine="h5netcdf", **decoding) for p in paths]
    return xr.combine_nested(parts, concat_dim="time", **COMBINE)


def test_differing_encodings_are_decoded_per_granule(differing: list[Path]) -> None:
    refs = [_sidecar(p) for p in differing]
    ours = h5sidecar.open_mfdataset(refs, concat_dim="time")
    xr.testing.assert_identical(ours.compute(), _truth(differing))
    assert ours["tas"].isnull().sum() == 2  # each granule's own _FillValue masked
    # what reference-combining tools produce: every granule decoded with the first's attributes
    first = xr.open_dataset(differing[0], engine="h5netcdf", mask_and_scale=False)
    raw = np.concatenate([read_h5(p, "tas") for p in differing]).astype("f8")
    naive = raw * float(first["tas"].attrs["scale_factor"]) + float(
        first["tas"].attrs["add_offset"]
    )
    assert not np.allclose(naive[4:], ours["tas"].values[4:], equal_nan=True)


def test_mismatch_can_be_refused(differing: list[Path]) -> None:
    refs = [_sidecar(p) for p in differing]
    with pytest.raises(IncompatibleGranulesError) as info:
        h5sidecar.open_mfdataset(refs, concat_dim="time", on_mismatch="raise")
    message = str(info.value)
    for ref in refs:
        assert ref in message
    for attr in ("tas.scale_factor", "tas.add_offset", "tas._FillValue", "time.units"):
        assert attr in message


@pytest.mark.parametrize(
    ("flags", "attr"),
    [({"mask_and_scale": False}, "tas.scale_factor"), ({"decode_times": False}, "time.units")],
)
def test_disabled_decoding_with_differences_is_refused(
    differing: list[Path], flags: dict[str, bool], attr: str
) -> None:
    with pytest.raises(IncompatibleGranulesError, match=attr.replace(".", r"\.")):
        h5sidecar.open_mfdataset([_sidecar(p) for p in differing], concat_dim="time", **flags)


def test_agreeing_granules_concatenate_raw(tmp_path: Path) -> None:
    same = {"scale": 0.01, "offset": 200.0, "fill": -32767, "time_units": "days since 2020-01-01"}
    paths = [_granule(tmp_path / f"{i}.nc", seed=i, **same) for i in range(3)]  # type: ignore[arg-type]
    ours = h5sidecar.open_mfdataset(
        [_sidecar(p) for p in paths], concat_dim="time", mask_and_scale=False, chunks=None
    )
    np.testing.assert_array_equal(
        ours["tas"].values, np.concatenate([read_h5(p, "tas") for p in paths])
    )
    xr.testing.assert_identical(ours, _truth(paths, mask_and_scale=False))


def test_plain_units_that_differ_are_refused(tmp_path: Path) -> None:
    common = {"scale": 0.01, "offset": 0.0, "fill": -32767, "time_units": "days since 2020-01-01"}
    paths = [
        _granule(tmp_path / "k.nc", units="K", **common),  # type: ignore[arg-type]
        _granule(tmp_path / "c.nc", units="degC", **common),
    ]  # type: ignore[arg-type]
    with pytest.raises(IncompatibleGranulesError, match="different units"):
        h5sidecar.open_mfdataset([_sidecar(p) for p in paths], concat_dim="time")


def test_combine_by_coords(differing: list[Path]) -> None:
    refs = [_sidecar(p) for p in reversed(differing)]  # order comes from the time coordinate
    ours = h5sidecar.open_mfdataset(refs, combine="by_coords")
    assert ours.indexes["time"].is_monotonic_increasing
    xr.testing.assert_identical(ours.compute(), _truth(differing))


def test_empty_and_missing_concat_dim(differing: list[Path]) -> None:
    with pytest.raises(ValueError, match="at least one"):
        h5sidecar.open_mfdataset([])
    with pytest.raises(ValueError, match="concat_dim"):
        h5sidecar.open_mfdataset([_sidecar(differing[0])])
