"""The sample granules look like the archival products they stand in for.

Structure (groups, ~1000 variables, chunking, filters, layouts, dimension scales, strings),
determinism, and sane values, all read back with h5py (and xarray for the CF decoding).
"""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.sample import (
    granule_name,
    write_atl03_like,
    write_netcdf_like,
    write_sample_granules,
)

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
RATE_GROUPS = ("heights", "geolocation", "geophys_corr", "bckgrd_atlas")
PHOTONS = 20_000


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_atl03_like(tmp_path_factory.mktemp("atl03") / granule_name(5), photons=PHOTONS,
                            seed=5)


def _datasets(f: h5py.File) -> dict[str, h5py.Dataset]:
    out: dict[str, h5py.Dataset] = {}

    def collect(name: str, obj: object) -> None:  # returning a value would stop visititems
        if isinstance(obj, h5py.Dataset):
            out[name] = obj

    f.visititems(collect)
    return out


def _layout(ds: h5py.Dataset) -> int:
    return int(ds.id.get_create_plist().get_layout())


def test_group_tree_and_variable_count(granule: Path) -> None:
    with h5py.File(granule, "r") as f:
        assert {*BEAMS, "ancillary_data", "orbit_info", "METADATA", "quality_assessment",
                "atlas_impulse_response"} <= set(f)
        for beam in BEAMS:
            assert {*RATE_GROUPS, "signal_find_output"} <= set(f[beam])
            assert set(f[f"{beam}/signal_find_output"]) == {"land", "ocean", "sea_ice",
                                                            "land_ice", "inland_water"}
        assert 900 <= len(_datasets(f)) <= 1100
        assert f.attrs["short_name"] == "ATL03"


def test_rate_variables_are_unlimited_gzip6_10000_row_chunks(granule: Path) -> None:
    with h5py.File(granule, "r") as f:
        n = 0
        for name, ds in _datasets(f).items():
            if not (name.startswith("gt") and name.split("/")[1] in RATE_GROUPS):
                continue
            n += 1
            assert ds.chunks == (10_000, *ds.shape[1:]), name
            assert ds.maxshape[0] is None, name
            assert (ds.compression, ds.compression_opts) == ("gzip", 6), name
            assert ds.shuffle == (ds.dtype.kind in "iu"), name
            assert "units" in ds.attrs and "long_name" in ds.attrs, name
        assert n > 400
        assert f["gt1l/heights/signal_conf_ph"].shape[1:] == (5,)
        assert f["gt1l/heights/signal_conf_ph"].dtype == np.int8
        # partial edge chunks: photon arrays are not a multiple of the chunk length
        assert f["gt1l/heights/h_ph"].shape[0] % 10_000 != 0


def test_dimension_scales_like_the_product(granule: Path) -> None:
    with h5py.File(granule, "r") as f:
        for beam in BEAMS:
            for group in RATE_GROUPS:
                scale = f[f"{beam}/{group}/delta_time"]
                assert scale.is_scale
                for name, ds in f[f"{beam}/{group}"].items():
                    if name != "delta_time":
                        assert ds.dims[0][0] == scale, f"{beam}/{group}/{name}"
        conf = f["gt2r/heights/signal_conf_ph"]
        assert conf.dims[1][0] == f["ds_surf_type"]


def test_ancillary_layouts_strings_and_attribute_only_metadata(granule: Path) -> None:
    with h5py.File(granule, "r") as f:
        layouts = {_layout(ds) for ds in _datasets(f).values()}
        assert layouts == {h5py.h5d.COMPACT, h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED}
        assert _layout(f["ancillary_data/land/nphot_min"]) == h5py.h5d.COMPACT
        assert _layout(f["ancillary_data/start_rgt"]) == h5py.h5d.COMPACT
        assert _layout(f["ancillary_data/atlas_engineering/ds_gt"]) == h5py.h5d.CONTIGUOUS
        utc = f["ancillary_data/data_start_utc"]
        assert utc.dtype.kind == "S" and utc.dtype.itemsize == 27
        assert re.fullmatch(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", utc[0])
        meta = f["METADATA"]
        nested: list[str] = []
        meta.visit(nested.append)
        assert len(nested) > 20
        assert all(isinstance(meta[p], h5py.Group) for p in nested)
        assert sum(len(meta[p].attrs) for p in nested) > 60
        lidar_type = meta["AcquisitionInformation/lidar"].attrs["type"]
        assert isinstance(lidar_type, bytes) and lidar_type == b"Photon Counting Lidar"
        extent = meta["Extent"].attrs
        assert float(extent["southBoundLatitude"]) < float(extent["northBoundLatitude"])


def test_values_are_physically_sane(granule: Path) -> None:
    with h5py.File(granule, "r") as f:
        total = 0
        for beam in BEAMS:
            h = f[f"{beam}/heights"]
            geo = f[f"{beam}/geolocation"]
            t = h["delta_time"][:]
            assert np.all(np.diff(t) >= 0) and t[0] > 3e7  # seconds since 2018, monotonic
            assert np.all(np.diff(geo["delta_time"][:]) >= 0)
            lat, lon = h["lat_ph"][:], h["lon_ph"][:]
            assert np.all(np.abs(lat) <= 90) and np.all(np.abs(lon) <= 180)
            assert np.abs(np.diff(lat)).max() < 0.01  # a continuous ground track
            # photon <-> segment bookkeeping, as readers of ATL03 rely on it
            cnt, beg = geo["segment_ph_cnt"][:], geo["ph_index_beg"][:]
            assert cnt.sum() == t.size
            nonempty = cnt > 0
            assert np.array_equal(beg[nonempty] - 1, (np.cumsum(cnt) - cnt)[nonempty])
            # confident signal photons sit on the surface; the rest spread over the window
            dem = np.repeat(f[f"{beam}/geophys_corr/dem_h"][:], cnt)
            conf = h["signal_conf_ph"][:, 0]
            resid = h["h_ph"][:] - dem
            assert np.median(np.abs(resid[conf == 4])) < 2.0
            assert np.median(np.abs(resid[conf == 0])) > 50.0
            total += t.size
        assert abs(total - PHOTONS) < 0.05 * PHOTONS
        strong, weak = (f[f"gt1{s}/heights/h_ph"].shape[0] for s in "lr")
        assert strong > 2.5 * weak


def test_compression_ratio_is_realistic(granule: Path) -> None:
    with h5py.File(granule, "r") as f:
        raw = stored = 0
        for ds in f["gt1l/heights"].values():
            raw += ds.nbytes
            stored += ds.id.get_storage_size()
    # noisy photon data compresses a little, not like random bytes or constants
    assert 1.2 < raw / stored < 4.0


def test_same_seed_same_bytes_other_seed_other_granule(tmp_path: Path) -> None:
    # the file name is recorded in the granule (producer_granule_id): same name, other folders
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_atl03_like(tmp_path / "a" / "g.h5", photons=3000, seed=7)
    b = write_atl03_like(tmp_path / "b" / "g.h5", photons=3000, seed=7)
    c = write_atl03_like(tmp_path / "c.h5", photons=3000, seed=8)
    assert a.read_bytes() == b.read_bytes()
    with h5py.File(a, "r") as fa, h5py.File(c, "r") as fc:
        assert not np.array_equal(fa["gt1l/heights/delta_time"][:5],
                                  fc["gt1l/heights/delta_time"][:5])


def test_sample_granules_have_real_style_distinct_names(tmp_path: Path) -> None:
    paths = write_sample_granules(tmp_path / "out", granules=3, photons=3000, seed=11)
    pattern = re.compile(r"ATL03_(\d{14})_(\d{4})(\d{2})(\d{2})_006_01\.h5")
    matches = [pattern.fullmatch(p.name) for p in paths]
    assert all(matches)
    assert len({m.group(1) for m in matches if m}) == 3
    assert len({m.group(2) for m in matches if m}) == 3
    for p, m in zip(paths, matches, strict=True):
        assert m is not None
        with h5py.File(p, "r") as f:
            assert int(f["ancillary_data/start_rgt"][0]) == int(m.group(2))
            assert int(f["orbit_info/cycle_number"][0]) == int(m.group(3))
            start = f["ancillary_data/granule_start_utc"][0].decode()
            assert start.replace("-", "").replace(":", "").replace("T", "")[:14] == m.group(1)


def test_too_few_photons_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="photons"):
        write_atl03_like(tmp_path / "x.h5", photons=10)


def test_netcdf_like_cf_features(tmp_path: Path) -> None:
    pytest.importorskip("netCDF4")  # optional dependency (h5sidecar[all]) of the writer
    xr = pytest.importorskip("xarray")
    path = write_netcdf_like(tmp_path / "grid.nc", seed=1)
    with h5py.File(path, "r") as f:
        assert "_NCProperties" in f.attrs
        time, tas, pr = f["time"], f["tas"], f["pr"]
        assert time.maxshape == (None,) and time.is_scale
        assert tas.shape[0] % tas.chunks[0] != 0  # partial edge chunk along time
        assert tas.dtype == np.int16 and tas.compression == "gzip" and tas.shuffle
        raw_tas = tas[:]
        scale, offset = tas.attrs["scale_factor"], tas.attrs["add_offset"]
        fill = tas.attrs["_FillValue"]
        raw_pr, pr_fill = pr[:], pr.attrs["_FillValue"]
        assert f["lat"].is_scale and tas.dims[1][0] == f["lat"]
        assert f["orog"].chunks is None
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        expected = np.where(raw_tas == fill, np.nan, raw_tas * scale + offset)
        np.testing.assert_allclose(ds["tas"].values, expected, rtol=1e-6)
        assert 250 < float(ds["tas"].mean()) < 300
        missing = raw_pr == pr_fill
        assert 0.02 < missing.mean() < 0.1
        assert np.array_equal(np.isnan(ds["pr"].values), missing)
        assert ds["time"].dtype.kind == "M" and ds.sizes["time"] == 25
        names = [n.decode() if isinstance(n, bytes) else n for n in ds["site_name"].values]
        assert names == ["Boulder", "Greenbelt", "Ny-Alesund", "Davis"]
    again = write_netcdf_like(tmp_path / "again.nc", seed=1)
    with h5py.File(again, "r") as f:
        assert np.array_equal(f["tas"][:], raw_tas)
