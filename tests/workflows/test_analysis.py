"""One task of the gridded analysis (:func:`granule_cells`) against a real S3 server: the values
equal h5py's, and the per-granule price is counted at the server (requests to open the sidecar,
requests for the named arrays' chunks, no HEAD)."""

from __future__ import annotations

import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.examples.grid_cells import _merge, bin_cells
from h5sidecar.examples.icesat2 import granule_cells
from h5sidecar.workflows import index_many
from tests.faultproxy import FaultProxy

#: one worker: the module's granule on S3 is made once, not once per worker
pytestmark = pytest.mark.xdist_group("analysis")
BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from h5sidecar.sample import granule_name, write_atl03_like

    d = tmp_path_factory.mktemp("analysis")
    return write_atl03_like(d / granule_name(5), photons=30_000, seed=5)


@pytest.fixture(scope="module")
def on_s3(granule: Path, s3_endpoint: str) -> dict[str, str]:
    """The granule on the moto server, indexed there into a JSON and a Parquet sidecar."""
    import s3fs

    opts = {"endpoint_url": s3_endpoint}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
    bucket = f"analysis-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    fs.put_file(str(granule), f"{bucket}/src/{granule.name}")
    out = {"bucket": bucket}
    for fmt in ("json", "parquet"):
        report = index_many(f"s3://{bucket}/src", f"s3://{bucket}/{fmt}", format=fmt,
                            executor="serial", storage_options=opts)
        assert report.ok
        out[fmt] = report.granules[0].sidecar
    return out


def _h5py_cells(path: Path, grid: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = []
    with h5py.File(path) as f:
        for b in BEAMS:
            g = f[f"{b}/heights"]
            parts.append(bin_cells(g["h_ph"][:], g["lat_ph"][:], g["lon_ph"][:], grid))
    return _merge(*parts)


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_one_granule_costs_few_requests_and_equals_h5py(
        fmt: str, on_s3: dict[str, str], granule: Path, proxy: FaultProxy) -> None:
    sidecar = on_s3[fmt]
    cells, sums, counts, groups = granule_cells(sidecar, 0.05,
                                                storage_options={"endpoint_url": proxy.url})
    want = _h5py_cells(granule, 0.05)
    assert groups == len(BEAMS)
    np.testing.assert_array_equal(cells, want[0])
    np.testing.assert_array_equal(counts, want[2])
    np.testing.assert_allclose(sums, want[1], rtol=1e-12)
    assert [r for r in proxy.requests if r.method != "GET"] == []  # no HEAD, no listing
    key = sidecar.split("://", 1)[1]
    opening = [r for r in proxy.requests if key in r.path]
    source = [r for r in proxy.requests if key not in r.path]
    # opening: the JSON file (one GET); .zmetadata + the all-arrays manifests file (two)
    assert len(opening) == (1 if fmt == "json" else 2), opening
    # the 18 named arrays (3 per beam) in one coalesced batch: fewer requests than arrays
    assert all(r.range is not None for r in source)
    assert 0 < len(source) < len(BEAMS) * 3 // 2, source


def test_block_bytes_bounds_each_read_and_keeps_the_values(
        on_s3: dict[str, str], granule: Path, proxy: FaultProxy) -> None:
    # blocks of one source chunk of each variable: many reads, same cells
    got = granule_cells(on_s3["json"], 0.05, storage_options={"endpoint_url": proxy.url},
                        block_bytes=1)
    want = _h5py_cells(granule, 0.05)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_granule_cells_masks_fill_values_like_the_xarray_engine(tmp_path: Path) -> None:
    """A _FillValue in h_ph is masked (NaN, then not binned), as ``open_dataset`` decodes."""
    from h5sidecar.indexer import index_granule
    from h5sidecar.references import write_json

    path = tmp_path / "fill.h5"
    rng = np.random.default_rng(0)
    n = 5000
    h = rng.normal(100, 5, n).astype("f4")
    h[::10] = 3.4028235e38
    with h5py.File(path, "w") as f:
        g = f.create_group("gt1l/heights")
        ds = g.create_dataset("h_ph", data=h, chunks=(1000,), compression="gzip")
        ds.attrs["_FillValue"] = np.float32(3.4028235e38)
        g.create_dataset("lat_ph", data=rng.uniform(-80, 80, n), chunks=(1000,))
        g.create_dataset("lon_ph", data=rng.uniform(-180, 180, n), chunks=(1000,))
    sidecar = write_json(index_granule(str(path)), tmp_path / "fill.h5.json")
    cells, sums, counts, groups = granule_cells(sidecar, 1.0)
    with h5py.File(path) as f:
        keep = f["gt1l/heights/h_ph"][:] != np.float32(3.4028235e38)
        want = bin_cells(np.where(keep, f["gt1l/heights/h_ph"][:], np.nan),
                         f["gt1l/heights/lat_ph"][:], f["gt1l/heights/lon_ph"][:], 1.0)
    assert groups == 1 and int(counts.sum()) == int(keep.sum()) == n - n // 10
    np.testing.assert_array_equal(cells, want[0])
    np.testing.assert_allclose(sums, want[1], rtol=1e-12)



def _cells_by_loop(h: np.ndarray, lat: np.ndarray, lon: np.ndarray, grid: float
                   ) -> dict[int, tuple[float, int]]:
    """The binning rule of ``bin_cells``, photon by photon (the oracle)."""
    n_lat, n_lon = int(np.ceil(180 / grid - 1e-9)), int(np.ceil(360 / grid - 1e-9))
    out: dict[int, tuple[float, int]] = {}
    for hv, la, lo in zip(h.tolist(), lat.tolist(), lon.tolist(), strict=True):
        if not (np.isfinite(hv) and np.isfinite(la) and np.isfinite(lo) and abs(la) <= 90):
            continue
        i = min(max(int(np.floor((la + 90) / grid)), 0), n_lat - 1)
        j = min(max(int(np.floor(((lo + 180) % 360) / grid)), 0), n_lon - 1)
        s, c = out.get(i * n_lon + j, (0.0, 0))
        out[i * n_lon + j] = (s + hv, c + 1)
    return out


@pytest.mark.parametrize("order", ["track", "shuffled"])
def test_bin_cells_equals_a_photon_by_photon_loop(order: str) -> None:
    """Runs of photons in one cell are summed before the sort: in track order (long runs) and
    shuffled (no runs) the cells equal a plain loop's; edges, NaNs and bad latitudes too."""
    rng = np.random.default_rng(7)
    n = 20_000
    lat = np.linspace(-89.95, 89.95, n) + rng.normal(0, 0.01, n)
    lon = np.linspace(-179.9, 179.9, n) + rng.normal(0, 0.01, n)
    h = rng.normal(50, 20, n)
    lat[:4], lon[:4] = [90.0, -90.0, 0.0, 95.0], [180.0, -180.0, 179.999, 0.0]
    h[10:20] = np.nan
    lat[30] = np.inf
    if order == "shuffled":
        p = rng.permutation(n)
        h, lat, lon = h[p], lat[p], lon[p]
    cells, sums, counts = bin_cells(h, lat, lon, 0.5)
    want = _cells_by_loop(h, lat, lon, 0.5)
    assert cells.tolist() == sorted(want)
    assert counts.tolist() == [want[k][1] for k in sorted(want)]
    np.testing.assert_allclose(sums, [want[k][0] for k in sorted(want)], rtol=1e-12)
    assert int(counts.sum()) == n - 10 - 2  # NaN heights, an infinite and a 95 deg latitude


@pytest.mark.parametrize("case", ["valid", "invalid", "tiny grid"])
def test_bin_cells_in_pieces_equals_a_photon_by_photon_loop(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Binned in pieces (runs of one cell cut at piece edges), float32 heights summed in
    float64, longitudes beyond +-180 wrapped, with every photon valid (checked by reductions)
    or some not (masked), and on a grid too fine for float64 cell numbers: a plain loop's
    cells."""
    from h5sidecar.examples import grid_cells

    monkeypatch.setattr(grid_cells, "_PIECE", 1000)
    rng = np.random.default_rng(11)
    n = 10_500
    lat = np.repeat(np.linspace(-90.0, 90.0, n // 50), 50)[:n] + rng.normal(0, 1e-3, n)
    lat = np.clip(lat, -90.0, 90.0)
    lon = np.repeat(np.linspace(-400.0, 400.0, n // 70), 70)[:n]
    lon[:3] = [180.0, -180.0, 540.0]
    h = rng.normal(50, 20, n).astype("f4")
    if case == "invalid":
        h[5], lat[6], lon[7], lat[8] = np.nan, np.nan, np.inf, -90.5
        h[2000:3000] = np.nan  # a whole piece without a photon to bin
    grid = 1e-6 if case == "tiny grid" else 0.25
    cells, sums, counts = bin_cells(h, lat, lon, grid)
    want = _cells_by_loop(h, lat, lon, grid)
    assert cells.dtype == counts.dtype == np.int64 and sums.dtype == np.float64
    assert cells.tolist() == sorted(want)
    assert counts.tolist() == [want[k][1] for k in sorted(want)]
    np.testing.assert_allclose(sums, [want[k][0] for k in sorted(want)], rtol=1e-12)
    assert int(counts.sum()) == n - (1004 if case == "invalid" else 0)
    if case == "invalid":
        empty = bin_cells(h[2000:3000], lat[2000:3000], lon[2000:3000], grid)
        assert [a.size for a in empty] == [0, 0, 0]
        assert empty[0].dtype == empty[2].dtype == np.int64
    if case != "tiny grid":
        assert len(cells) < n // 10  # runs of equal cells, also across piece edges


def test_granule_cells_of_2d_variables_equal_h5py(tmp_path: Path) -> None:
    """Variables that are not 1-D are read by ``read_arrays`` (not into reused 1-D buffers),
    in blocks of rows; every value is binned, as h5py's arrays are."""
    from h5sidecar.indexer import index_granule
    from h5sidecar.references import write_json

    path = tmp_path / "2d.h5"
    rng = np.random.default_rng(3)
    n = 4000
    with h5py.File(path, "w") as f:
        g = f.create_group("gt1l/heights")
        g.create_dataset("h_ph", data=rng.normal(100, 5, (n, 3)).astype("f4"), chunks=(500, 3),
                         compression="gzip")
        g.create_dataset("lat_ph", data=rng.uniform(-80, 80, (n, 3)), chunks=(500, 3))
        g.create_dataset("lon_ph", data=rng.uniform(-180, 180, (n, 3)), chunks=(500, 3),
                         compression="gzip", shuffle=True)
    sidecar = write_json(index_granule(str(path)), tmp_path / "2d.h5.json")
    cells, sums, counts, groups = granule_cells(sidecar, 5.0, block_bytes=30_000)
    with h5py.File(path) as f:
        want = bin_cells(*(f[f"gt1l/heights/{v}"][:] for v in ("h_ph", "lat_ph", "lon_ph")),
                         5.0)
    assert groups == 1 and int(counts.sum()) == 3 * n
    np.testing.assert_array_equal(cells, want[0])
    np.testing.assert_array_equal(counts, want[2])
    np.testing.assert_allclose(sums, want[1], rtol=1e-12)
