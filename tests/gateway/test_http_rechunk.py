"""The virtual re-chunk view over HTTP: zarr-python and xarray read uncompressed arrays (chunked
and contiguous, little- and big-endian) with smaller chunks, every value equal to h5py;
compressed arrays keep their chunks; a thin selection moves few more bytes than its answer.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.errors import ZarrUserWarning

from tests.gateway._http import gateway, settled

NAME = "rechunk.h5"
#: name -> (shape, chunks or None for contiguous, dtype, compression)
ARRAYS: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None, str, str | None]] = {
    "wind": ((700, 1100), (256, 372), "<i2", None),  # edge chunks along both axes
    "wind_gz": ((700, 1100), (256, 372), "<i2", "gzip"),
    "temp": ((300, 250), (64, 50), ">f4", None),
    "contig": ((5000, 300), None, "<i2", None),  # one stored chunk of 3 MB
    "contig_be": ((3001, 77), None, ">f8", None),  # one stored chunk, 3001 rows: padded tail
    "contig_big": ((6000, 700), None, "<i2", None),  # indexed as 3 chunks of 2000 rows
    "grp/sub/series": ((400, 500), (100, 250), "<u2", None),  # in a nested group
}
#: (rows, cols) selections read from every 2-D array
SELECTIONS = [
    (slice(None), slice(None)),
    (slice(137, 138), slice(None)),  # one time step
    (slice(None), slice(41, 42)),  # one site's series
    (slice(250, 270), slice(30, 77)),  # a box across chunk edges
    (slice(-3, None), slice(-5, None)),  # the array's corner (edge chunks)
]


@pytest.fixture(scope="module")
def dest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("rechunk")
    src = root / "src"
    src.mkdir()
    rng = np.random.default_rng(17)
    with h5py.File(src / NAME, "w") as f:
        for name, (shape, chunks, dtype, comp) in ARRAYS.items():
            data = rng.integers(-30000, 30000, size=shape).astype(dtype)
            f.create_dataset(name, data=data, chunks=chunks, compression=comp)
    out = root / "dest"
    report = index_many(str(src), str(out), format="json", executor="serial")
    assert report.ok, report.to_dict()
    return {"dest": str(out), "h5": src / NAME}


@pytest.fixture(scope="module")
def served(dest: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    with gateway(dest["dest"]) as running_app:
        yield running_app


def _open(url: str, view: str) -> zarr.Group:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ZarrUserWarning)
        return zarr.open_group(f"{url}/{view}/{NAME}/", mode="r")


def _array(root: zarr.Group, name: str) -> zarr.Array:
    node = root[name]
    assert isinstance(node, zarr.Array)
    return node


@pytest.mark.parametrize("view", ["zarr3-rechunk/64k", "zarr3-rechunk/1x0",
                                  "zarr-rechunk/auto", "zarr-rechunk/2048"])  # fmt: skip
def test_rechunk_view_equals_h5py(served, dest: dict[str, Any], view: str) -> None:  # type: ignore[no-untyped-def]
    url, _ = served
    root = _open(url, view)
    fine = view.endswith(("1x0", "2048"))
    with h5py.File(dest["h5"]) as f:
        for name, (shape, *_) in ARRAYS.items():
            arr = _array(root, name)
            for i, sel in enumerate(SELECTIONS):
                if fine and i in (0, 2) and shape[0] > 400:
                    continue  # thousands of tiny chunks: read in full by the coarser views
                got = np.asarray(arr[sel])
                want = f[name][sel]
                assert got.dtype.newbyteorder("=") == want.dtype.newbyteorder("="), name
                np.testing.assert_array_equal(got, want, err_msg=f"{view} {name} {sel}")


def test_chunk_shapes_of_the_view(served) -> None:  # type: ignore[no-untyped-def]
    url, _ = served
    plain = _open(url, "zarr3")
    v64 = _open(url, "zarr3-rechunk/64k")
    rows = _open(url, "zarr3-rechunk/1x0")
    v2 = _open(url, "zarr-rechunk/auto")  # default rechunk_bytes = 64 KiB
    assert _array(plain, "wind").chunks == (256, 372)
    assert _array(v64, "wind").chunks == (64, 372)  # largest divisor of 256 within 64 KiB
    assert _array(v2, "wind").chunks == (64, 372)
    assert _array(rows, "wind").chunks == (1, 372)
    assert _array(v64, "contig").chunks == (109, 300)
    assert _array(rows, "contig_be").chunks == (1, 77)
    assert _array(plain, "contig_big").chunks == (2000, 700)
    assert _array(v64, "contig_big").chunks == (40, 700)  # divides the stored 2000 rows
    # compressed arrays keep their stored chunks and bytes
    for root in (v64, rows, v2):
        assert _array(root, "wind_gz").chunks == (256, 372)
    a = httpx.get(f"{url}/zarr3/{NAME}/wind_gz/1.2")
    b = httpx.get(f"{url}/zarr3-rechunk/1x0/{NAME}/wind_gz/1.2")
    assert a.status_code == b.status_code == 200 and a.content == b.content


def test_xarray_reads_the_view(served, dest: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    url, _ = served
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ZarrUserWarning)
        ds = xr.open_zarr(f"{url}/zarr3-rechunk/64k/{NAME}/", zarr_format=3,
                          mask_and_scale=False)  # fmt: skip
        v2 = xr.open_zarr(f"{url}/zarr-rechunk/16k/{NAME}/", mask_and_scale=False)
    with h5py.File(dest["h5"]) as f:
        for name in ARRAYS:
            if "/" in name:
                continue  # in a group: see test_groups_open_directly
            if name in ("wind", "contig", "contig_be", "contig_big"):
                assert ds[name].encoding["chunks"] != ds[name].shape, name
                assert ds[name].encoding["chunks"] != f[name].chunks, name
            np.testing.assert_array_equal(ds[name].values, f[name][...], err_msg=name)
            np.testing.assert_array_equal(ds[name][137].values, f[name][137], err_msg=name)
            np.testing.assert_array_equal(v2[name][:, 41].values, f[name][:, 41], err_msg=name)


@pytest.mark.parametrize("view", ["zarr3-rechunk/8k", "zarr-rechunk/8k"])
def test_groups_open_directly(served, dest: dict[str, Any], view: str) -> None:  # type: ignore[no-untyped-def]
    """Each group's consolidated metadata (v2 g/.zmetadata, v3 g/zarr.json) is re-chunked too."""
    url, _ = served
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=ZarrUserWarning)
        ds = xr.open_zarr(f"{url}/{view}/{NAME}/", group="grp/sub", mask_and_scale=False)
    assert ds["series"].encoding["chunks"] == (10, 250)  # 8 KiB: 16 rows of 500 B; 10 divides 100
    with h5py.File(dest["h5"]) as f:
        np.testing.assert_array_equal(ds["series"].values, f["grp/sub/series"][...])
    root = _open(url, view)
    sub = root["grp"]
    assert isinstance(sub, zarr.Group)
    assert _array(sub, "sub/series").chunks == (10, 250)


def _upstream_bytes(app: Any) -> float:
    return settled(app).total("h5sidecar_upstream_bytes_total")


@pytest.mark.parametrize("name", ["wind", "temp", "contig", "contig_be", "contig_big"])
def test_thin_selection_moves_little_more_than_its_answer(dest: dict[str, Any], name: str) -> None:
    shape, _, dtype, _ = ARRAYS[name]
    answer = shape[1] * np.dtype(dtype).itemsize  # one row
    # a fresh gateway per case: nothing in its chunk cache
    with gateway(dest["dest"]) as (url, app), h5py.File(dest["h5"]) as f:
        rows = _array(_open(url, "zarr3-rechunk/1x0"), name)
        plain = _array(_open(url, "zarr3"), name)
        before = _upstream_bytes(app)
        np.testing.assert_array_equal(rows[123], f[name][123])
        moved = _upstream_bytes(app) - before
        # one virtual chunk per stored chunk the row crosses; only an edge chunk's padding more
        assert answer <= moved <= 1.2 * answer, (moved, answer)
        before = _upstream_bytes(app)
        np.testing.assert_array_equal(plain[124], f[name][124])
        assert _upstream_bytes(app) - before > 20 * answer  # the plain view moves whole chunks


def test_bad_specs_are_refused(served) -> None:  # type: ignore[no-untyped-def]
    url, _ = served
    for spec in ("zero", "12", "64kb", "1x", "2g"):
        r = httpx.get(f"{url}/zarr3-rechunk/{spec}/{NAME}/zarr.json")
        assert r.status_code == 400, spec
        assert "re-chunk" in r.json()["message"]
    # a virtual chunk outside the virtual grid is absent (404), like any missing key
    assert httpx.get(f"{url}/zarr3-rechunk/1x0/{NAME}/wind/700.0").status_code == 404
    assert httpx.get(f"{url}/zarr3-rechunk/1x0/{NAME}/wind/699.2").status_code == 200


def test_source_changed_is_refused(tmp_path: Path) -> None:
    """Same freshness guard as the other views: a rewritten source answers 409, not bytes."""
    from h5sidecar.workflows import index_many

    src = tmp_path / "src"
    src.mkdir()
    data = np.arange(4000 * 50, dtype="<i2").reshape(4000, 50)
    with h5py.File(src / NAME, "w") as f:
        f.create_dataset("contig", data=data)
    report = index_many(str(src), str(tmp_path / "dest"), format="json", executor="serial")
    assert report.ok
    with gateway(str(tmp_path / "dest")) as (url, _):
        first = httpx.get(f"{url}/zarr3-rechunk/1x0/{NAME}/contig/7.0")
        assert first.status_code == 200
        assert np.array_equal(np.frombuffer(first.content, "<i2"), data[7])
        with h5py.File(src / NAME, "w") as f:
            f.create_dataset("contig", data=data[::-1].copy())
            f.attrs["grown"] = np.zeros(1000)
        r = httpx.get(f"{url}/zarr3-rechunk/1x0/{NAME}/contig/8.0")
        assert r.status_code == 409, r.text


def test_ranges_head_and_etag_of_a_virtual_chunk(served, dest: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    url, _ = served
    key = f"{url}/zarr3-rechunk/64k/{NAME}/contig_be/28.0"  # the padded last virtual chunk
    full = httpx.get(key)
    assert full.status_code == 200 and len(full.content) == 106 * 77 * 8
    with h5py.File(dest["h5"]) as f:
        want = f["contig_be"][28 * 106 :]
    got = np.frombuffer(full.content, ">f8").reshape(106, 77)
    np.testing.assert_array_equal(got[: want.shape[0]], want)
    assert not got[want.shape[0] :].any()  # padding outside the array: zeros
    part = httpx.get(key, headers={"Range": "bytes=1000-4999"})
    assert part.status_code == 206 and part.content == full.content[1000:5000]
    head = httpx.head(key)
    assert head.headers["content-length"] == str(len(full.content))
    assert head.headers["etag"] == full.headers["etag"]
    other = httpx.get(f"{url}/zarr3-rechunk/1x0/{NAME}/contig_be/0.0")
    assert other.headers["etag"] != full.headers["etag"]


def test_inline_chunks_are_cut_in_memory(tmp_path: Path) -> None:
    """Chunks the sidecar holds inline are re-chunked from memory: no upstream read."""
    from h5sidecar.settings import IndexSettings
    from h5sidecar.workflows import index_many

    src = tmp_path / "src"
    src.mkdir()
    data = np.arange(60 * 40, dtype=">i4").reshape(60, 40)
    with h5py.File(src / NAME, "w") as f:
        f.create_dataset("small", data=data, chunks=(30, 40))  # 4,800-byte chunks
    report = index_many(str(src), str(tmp_path / "dest"), format="json", executor="serial",
                        settings=IndexSettings(inline_threshold=8192))  # fmt: skip
    assert report.ok
    with gateway(str(tmp_path / "dest")) as (url, app):
        arr = _array(_open(url, "zarr3-rechunk/1x0"), "small")
        assert arr.chunks == (1, 40)
        np.testing.assert_array_equal(arr[17], data[17])
        np.testing.assert_array_equal(arr[...], data)
        assert _upstream_bytes(app) == 0


def test_virtual_chunk_larger_than_the_response_limit_is_refused(dest: dict[str, Any]) -> None:
    with gateway(dest["dest"], max_response_bytes=10_000) as (url, app):
        r = httpx.get(f"{url}/zarr3-rechunk/64k/{NAME}/contig_be/28.0")  # 63 KB, padded
        assert r.status_code == 413, r.text
        assert "smaller re-chunk spec" in r.json()["message"]
        assert settled(app).total("h5sidecar_upstream_requests_total") == 0
        ok = httpx.get(f"{url}/zarr3-rechunk/1x0/{NAME}/contig_be/3000.0")  # 616 bytes
        assert ok.status_code == 200 and len(ok.content) == 616
