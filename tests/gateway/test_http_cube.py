"""Datacubes served by the gateway: one Zarr store per cube, beside the granules, in every view.

The sample daily collection is indexed, combined with ``build_cube`` (one cube outside DEST, one
written inside it) and served by uvicorn on a free port.  zarr-python 3.1 and xarray read each
cube over HTTP in the v2, v3 and sharded views; every value equals what h5py and xarray +
h5netcdf read from the files, concatenated along time.
"""

from __future__ import annotations

import datetime as dt
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import h5py
import httpx
import numpy as np
import pytest
import xarray as xr
import zarr

from h5sidecar.read._cube_view import cube_names, source_key
from h5sidecar.references import GranuleRefs, SourceInfo
from h5sidecar.sample import write_daily_collection, write_daily_granule
from h5sidecar.settings import ReadSettings
from h5sidecar.workflows import build_cube, index_many
from h5sidecar.workflows.checks._cfcheck import open_truth
from tests.conftest import free_port
from tests.gateway._http import gateway, http, wait_healthy

__all__ = ["http"]  # fixture used below

#: zarr warns that numcodecs codecs (zlib, shuffle) are outside the v3 spec: expected.
pytestmark = pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")

DAYS = 4
VIEWS = ("zarr", "zarr3", "zarr3-shard/3")


def _index(src: Path, dest: Path) -> None:
    report = index_many(str(src), str(dest), executor="serial")
    assert all(g.status == "ok" for g in report.granules), report.granules


@pytest.fixture(scope="module")
def daily(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path, dict[str, str]]:
    """Daily granules, their DEST, and two cubes: ``daily`` (Parquet, outside DEST) and
    ``indest`` (JSON, written inside DEST and named with NAME=PATH)."""
    root = tmp_path_factory.mktemp("cube-serve")
    files = write_daily_collection(root / "nc", days=DAYS)
    _index(root / "nc", root / "dest")
    outside = build_cube(str(root / "dest"), str(root / "cubes" / "daily.parq")).path
    inside = build_cube(str(root / "dest"), str(root / "dest" / "all.json"), format="json").path
    return files, root / "dest", {"daily": outside, "indest": inside}


@pytest.fixture(scope="module")
def served_cubes(daily) -> Iterator[tuple[str, Any]]:
    _, dest, cubes = daily
    with gateway(str(dest), cubes=[cubes["daily"], f"indest={cubes['indest']}"]) as running:
        yield running


def _h5py_truth(files: list[Path], name: str) -> np.ndarray:
    """Raw (packed) values of ``name`` in every file, in time order."""
    parts, times = [], []
    for f in files:
        with h5py.File(f) as h:
            parts.append(h[name][...])
            times.append(h["time"][...])
    return np.concatenate(parts)[np.argsort(np.concatenate(times))]


def _h5netcdf_truth(files: list[Path]) -> xr.Dataset:
    """xarray + h5netcdf on the files, concatenated along time, decoded with float64 packing
    attributes (what every Zarr reader does: JSON attributes hold no float32)."""
    parts = [open_truth(f, "")[1] for f in files]
    return xr.concat(parts, "time", data_vars="minimal", coords="minimal",
                     compat="override").sortby("time").load()  # fmt: skip


@pytest.mark.parametrize("cube", ["daily", "indest"])
@pytest.mark.parametrize("view", VIEWS)
def test_cube_reads_like_the_files(daily, served_cubes, view: str, cube: str) -> None:
    files, _, _ = daily
    url, _ = served_cubes
    store = f"{url}/{view}/{cube}/"
    fmt = 2 if view == "zarr" else 3
    root = zarr.open_group(store, mode="r", zarr_format=fmt)
    for name in ("tas", "pr", "time"):
        np.testing.assert_array_equal(root[name][...], _h5py_truth(files, name))
    if "shard" in view:  # 3 daily chunks per shard: DAYS=4 days make 2 shards
        assert root["tas"].shards == (3, 8, 12)
    want = _h5netcdf_truth(files)
    with xr.open_zarr(store, zarr_format=fmt, consolidated=True if fmt == 2 else None) as ds:
        assert ds.sizes["time"] == DAYS
        for name in ("time", "lat", "lon", "tas", "pr"):
            np.testing.assert_array_equal(ds[name].values, want[name].values)
        assert np.isnan(ds["tas"].values).any()  # fill cells masked, not read as numbers
        # a time series at one grid point: one chunk of each member
        np.testing.assert_array_equal(ds["tas"][:, 3, 5].values, want["tas"][:, 3, 5].values)


def test_cubes_are_listed_as_cubes(served_cubes, http) -> None:
    url, _ = served_cubes
    listing = http.get(f"{url}/api/granules").json()
    assert listing["cubes"] == ["daily", "indest"]
    # the cube written inside DEST is listed once, as a cube
    assert listing["granules"] == [f"tas_2020010{d}.nc" for d in range(1, DAYS + 1)]
    info = http.get(f"{url}/api/granules/daily").json()
    assert info["kind"] == "cube" and info["cube"] == {"members": DAYS, "concat_dim": "time"}
    assert http.get(f"{url}/api/granules/tas_20200101.nc").json()["kind"] == "granule"
    page = http.get(f"{url}/").text
    assert "Cubes (2)" in page and "cube of 4 granules along <code>time</code>" in page
    assert http.get(f"{url}/quicklook.png", params={"granule": "indest",
                                                    "variable": "tas"}).status_code == 200
    meta = http.get(f"{url}/zarr/daily/.zmetadata").json()["metadata"]
    assert meta["tas/.zarray"]["shape"] == [DAYS, 8, 12]


def test_cube_members_must_be_allowed(daily, tmp_path: Path, http) -> None:
    """The gateway's allow-list applies to a cube's members (DEST without a report here)."""
    _, _, cubes = daily
    empty = tmp_path / "empty"
    empty.mkdir()
    with gateway(str(empty), cubes=[cubes["daily"]]) as (url, _):
        assert http.get(f"{url}/zarr/daily/.zmetadata").status_code == 200  # no source read
        r = http.get(f"{url}/zarr/daily/tas/1.0.0")
        assert r.status_code == 403 and r.json()["error"] == "forbidden_source"
    with gateway(str(empty), cubes=[cubes["daily"]], allow=(str(tmp_path),)) as (url, _):
        assert http.get(f"{url}/zarr/daily/tas/1.0.0").status_code == 403


@pytest.mark.parametrize("view", VIEWS)
def test_replaced_member_is_refused(tmp_path: Path, view: str) -> None:
    """A member granule re-processed after the cube was built: 409, never the old bytes, also
    for chunks already in the gateway's cache."""
    files = write_daily_collection(tmp_path / "nc", days=3, nlat=4, nlon=6)
    _index(tmp_path / "nc", tmp_path / "dest")
    cube = build_cube(str(tmp_path / "dest"), str(tmp_path / "cube.parq")).path
    read = ReadSettings(revalidate_seconds=0.0)
    key = "tas/1.0.0" if "shard" not in view else "tas/0.0.0"  # the shard holds day 2
    with gateway(str(tmp_path / "dest"), cubes=[cube], read_settings=read) as (url, _), \
            httpx.Client(timeout=30) as http:  # fmt: skip
        first = http.get(f"{url}/{view}/cube/{key}")
        assert first.status_code == 200, first.text
        assert http.get(f"{url}/{view}/cube/{key}").status_code == 200  # cached now
        write_daily_granule(files[1], dt.date(2020, 1, 2), nlat=4, nlon=6, seed=99)
        again = http.get(f"{url}/{view}/cube/{key}")
        assert again.status_code == 409, again.text
        assert again.json()["error"] == "stale_reference" and "re-index" in again.text
        if "shard" not in view:  # the other members still read
            assert http.get(f"{url}/{view}/cube/tas/0.0.0").status_code == 200
        with pytest.raises(aiohttp.ClientResponseError) as info:  # fsspec's HTTP client
            zarr.open_group(f"{url}/{view}/cube/", mode="r")["tas"][...]
        assert info.value.status == 409


def test_rebuilt_cube_changes_every_chunk_etag(tmp_path: Path, http) -> None:
    """A cube's cache keys and ETags follow every member's identity, not only the first's."""
    files = write_daily_collection(tmp_path / "nc", days=2, nlat=4, nlon=6)
    _index(tmp_path / "nc", tmp_path / "dest")
    out = str(tmp_path / "cube.json")
    build_cube(str(tmp_path / "dest"), out, format="json")
    with gateway(str(tmp_path / "dest"), cubes=[out]) as (url, app):
        app.state.gateway.revalidate_seconds = 0.0
        before = http.get(f"{url}/zarr/cube/tas/1.0.0").headers["etag"]
        # the second day's file is replaced by an identical copy (same chunk offsets, new
        # mtime), re-indexed, and the cube rebuilt
        shutil.copy(files[1], tmp_path / "copy.nc")
        shutil.move(tmp_path / "copy.nc", files[1])
        index_many(str(tmp_path / "nc"), str(tmp_path / "dest"), executor="serial")
        build_cube(str(tmp_path / "dest"), out, format="json")
        after = http.get(f"{url}/zarr/cube/tas/1.0.0")
        assert after.status_code == 200
        assert after.headers["etag"] != before


def test_source_key_covers_every_member() -> None:
    a = SourceInfo("/d/a.nc", 10, None, 1.0)
    b1, b2 = SourceInfo("/d/b.nc", 10, None, 1.0), SourceInfo("/d/b.nc", 10, None, 2.0)
    one = GranuleRefs(a, {"": {}}, {}, members=(a, b1))
    two = GranuleRefs(a, {"": {}}, {}, members=(a, b2))
    assert source_key(one) != source_key(two)
    assert source_key(GranuleRefs(a, {"": {}}, {})) == "/d/a.nc|10|None|1.0"


def test_cube_names() -> None:
    assert cube_names(["/x/daily.parq", "other=s3://b/c.json", "/y/a=b/c.json"]) == {
        "daily": "/x/daily.parq", "other": "s3://b/c.json", "c": "/y/a=b/c.json"}
    with pytest.raises(ValueError, match="two cubes are named"):
        cube_names(["/x/daily.parq", "/y/daily.json"])
    with pytest.raises(ValueError, match="one URL path segment"):
        cube_names({"a/b": "/x/c.parq"})


def test_serve_command_with_a_cube_on_s3(tmp_path: Path, s3, s3_bucket: str,
                                         s3_storage_options) -> None:  # fmt: skip
    """``h5sidecar serve DEST --cube CUBE`` as a user runs it, DEST, cube and granules on S3."""
    files = write_daily_collection(tmp_path / "nc", days=3, nlat=4, nlon=6)
    for f in files:
        s3.put(str(f), f"{s3_bucket}/nc/{f.name}")
    dest = f"s3://{s3_bucket}/sidecars"
    report = index_many(f"s3://{s3_bucket}/nc", dest, storage_options=s3_storage_options,
                        executor="serial")  # fmt: skip
    assert report.ok, report.to_dict()
    cube = build_cube(dest, f"s3://{s3_bucket}/cubes/tas.parq",
                      storage_options=s3_storage_options).path  # fmt: skip
    port = free_port()
    log = tmp_path / "serve.log"
    endpoint = s3_storage_options["endpoint_url"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "h5sidecar.cli", "serve", dest, "--port", str(port),
             "--cube", cube, "--storage-option", f"endpoint_url={endpoint}"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(proc, url, log)
            assert httpx.get(f"{url}/api/granules").json()["cubes"] == ["tas"]
            root = zarr.open_group(f"{url}/zarr3-shard/2/tas/", mode="r")
            for name in ("tas", "pr", "time"):
                np.testing.assert_array_equal(root[name][...], _h5py_truth(files, name))
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert code in (0, -signal.SIGTERM), log.read_text()


def test_dest_index_lists_cubes_once(daily, caplog) -> None:
    """A cube inside DEST is not a granule too; a cube named like a granule hides it (warned)."""
    from h5sidecar.gateway._dest import DestIndex

    _, dest, cubes = daily
    index = DestIndex(str(dest), cubes={"indest": cubes["indest"]})
    snap = index.snapshot()
    assert index.locate(snap, "all") is None and snap.url_of("indest") == cubes["indest"]
    assert "all" not in index.page(snap, "", 100)
    index = DestIndex(str(dest), cubes={"tas_20200101.nc": cubes["daily"]})
    for _ in range(2):
        snap = index.snapshot(max_age=0)
        assert index.locate(snap, "all") is not None
        assert index.find(snap, "tas_20200101.nc/tas/0.0.0") == ("tas_20200101.nc", "tas/0.0.0",
                                                                 None)  # fmt: skip
        assert index.locate(snap, "tas_20200101.nc") == (cubes["daily"], None)
    assert sum("hidden by the cube" in r.message for r in caplog.records) == 1


def test_what_is_not_a_cube_is_refused(daily, tmp_path: Path, http) -> None:
    _, dest, _ = daily
    (tmp_path / "repo.icechunk").mkdir()
    granule = str(dest / "tas_20200101.nc.parq")
    with gateway(str(dest), cubes=[str(tmp_path / "repo.icechunk"), f"one={granule}"]) as (url, _):
        r = http.get(f"{url}/zarr/repo.icechunk/.zmetadata")
        assert r.status_code == 404 and "not kerchunk JSON or Parquet" in r.text
        r = http.get(f"{url}/zarr/one/.zmetadata")
        assert r.status_code == 404 and "not a cube" in r.text
        assert http.get(f"{url}/zarr/tas_20200102.nc/.zmetadata").status_code == 200
