"""Opening a datacube costs nothing per member: identities are made for the members read."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import ForbiddenSourceError, InvalidReferenceError, StaleReferenceError
from h5sidecar.read import read_arrays
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import MemberTable, SourceInfo
from h5sidecar.references.parquet_sidecar._members_file import _Loader
from h5sidecar.settings import ReadSettings
from h5sidecar.sources._allow import MemberAllowList, MemberSourceIndex
from h5sidecar.workflows import build_cube
from tests.workflows.cube.test_cube import _reference
from tests.workflows.cube.test_cube_append import _days, _index


@pytest.fixture
def cube(tmp_path: Path) -> tuple[Path, list[Path]]:
    files = _days(tmp_path / "nc", 0, 12)
    _index(tmp_path / "nc", tmp_path / "sidecars")
    path = tmp_path / "cube.parq"
    build_cube(str(tmp_path / "sidecars"), str(path))
    return path, files


def _counted(monkeypatch) -> dict[str, int]:
    """How many member identities are made and how often the members file is read."""
    seen = {"made": 0, "loads": 0}
    objects, load = MemberTable._objects, _Loader.__call__

    def made(self, start: int, length: int) -> list[SourceInfo]:
        out = objects(self, start, length)
        seen["made"] += len(out)
        return out

    def loads(self):
        seen["loads"] += 1
        return load(self)

    monkeypatch.setattr(MemberTable, "_objects", made)
    monkeypatch.setattr(_Loader, "__call__", loads)
    return seen


def test_open_makes_no_member_and_a_read_only_the_members_read(
    cube: tuple[Path, list[Path]], monkeypatch
) -> None:
    path, files = cube
    seen = _counted(monkeypatch)
    SidecarStore(path)  # the store's fetcher: allow-list and freshness guard set up
    assert seen == {"made": 0, "loads": 0}
    ref = _reference(files)
    with xr.open_dataset(path, engine="h5sidecar") as ds:
        assert ds.sizes["time"] == 12  # times are inline: nothing of a member needed
        assert seen == {"made": 0, "loads": 0}
        got = ds["tas"].isel(time=5).values
        np.testing.assert_array_equal(got, ref["tas"].isel(time=5).values)
        assert seen == {"made": 1, "loads": 1}  # the one member read, checked against its own
        np.testing.assert_array_equal(ds["pr"].isel(time=5).values, ref["pr"].isel(time=5).values)
        assert seen["made"] == 1  # made once, shared by the guard and the chunk cache
        with h5py.File(files[5]) as f:
            raw = f["tas"][0]
        np.testing.assert_array_equal(read_arrays(str(path), ["tas"])["tas"][5], raw)


def test_a_chunk_outside_the_members_is_refused(cube: tuple[Path, list[Path]]) -> None:
    path, files = cube
    fetcher = SidecarStore(path).fetcher
    beside = files[0].parent / "not_a_member.nc"
    beside.write_bytes(b"x" * 100)
    for url in (str(beside), str(path / ".zmetadata"), "s3://bucket/" + files[0].name):
        with pytest.raises(ForbiddenSourceError, match="the 12 members of the cube"):
            fetcher.plan([(url, 0, 10)])
    size = files[3].stat().st_size
    with pytest.raises(InvalidReferenceError, match="past the end"):
        fetcher.plan([(str(files[3]), size - 4, 10)])  # the member's recorded size holds
    assert fetcher.fetch_sync([(str(files[3]), 0, 4)]) == [files[3].read_bytes()[:4]]


def test_a_member_changed_after_the_open_is_stale(cube: tuple[Path, list[Path]]) -> None:
    path, files = cube
    ref = _reference(files)
    with xr.open_dataset(path, engine="h5sidecar") as ds:
        with open(files[7], "ab") as f:  # re-processed after the cube was opened
            f.write(b"\0" * 64)
        with pytest.raises(StaleReferenceError, match=files[7].name):
            ds["tas"].isel(time=7).values  # noqa: B018 - the access reads it
        np.testing.assert_array_equal(ds["tas"].isel(time=6).values,
                                      ref["tas"].isel(time=6).values)  # fmt: skip


MEMBERS = [SourceInfo(url=f"s3://bucket/daily/g{i:05d}.nc", size=1000 + i, etag=f"e{i}")
           for i in range(20_000)]  # fmt: skip


def test_member_allow_list_allows_what_the_listed_prefixes_did() -> None:
    table = MemberTable.of([*MEMBERS, SourceInfo(url="s3a://bucket/odd/o.nc", size=7)])
    extern = "s3://bucket/daily/g00001.nc.raw"  # HDF5 external storage beside a member
    allow = MemberAllowList(table, [MEMBERS[0].url, extern, "s3://bucket/other/x.raw"])
    assert allow.allows(MEMBERS[12_345].url)
    assert allow._members_canon is None  # found without normalising every member's URL
    assert allow.allows(extern)  # a companion
    assert not allow.allows("s3://bucket/other/x.raw")  # no member's folder
    assert not allow.allows("s3://bucket/daily/g99999.nc")  # beside them, but not referenced
    assert allow.allows("s3://bucket/odd/o.nc")  # a member recorded in another spelling
    assert allow.allows(MEMBERS[3].url + "/below")  # below a member, as a prefix allowed
    assert not allow.allows("s3://bucket/daily/g00001.nc2")
    assert not allow.allows("file:///etc/passwd")
    index = MemberSourceIndex(table)
    assert index.get(MEMBERS[42].url) == MEMBERS[42]
    assert index._recorded is None
    assert index.get("s3://bucket/odd/o.nc") == SourceInfo(url="s3a://bucket/odd/o.nc", size=7)
    assert index.get("s3://bucket/daily/g99999.nc") is None
    unknown = MemberSourceIndex(MemberTable.of([SourceInfo(url=MEMBERS[0].url, size=-1)]))
    assert unknown.get(MEMBERS[0].url) is None  # a kerchunk member: not freshness-checked


def test_a_cube_fetcher_pickles_without_its_members_made() -> None:
    import pickle

    from h5sidecar.sources.fetch._chunk_fetcher import ChunkFetcher

    table = MemberTable.of(MEMBERS)
    fetcher = ChunkFetcher(ReadSettings(), members=table, member_companions=["s3://x/y"])
    again = pickle.loads(pickle.dumps(fetcher))
    assert again.allow_list.check(MEMBERS[5].url).url == MEMBERS[5].url
    with pytest.raises(InvalidReferenceError, match="past the end"):
        again.plan([(MEMBERS[5].url, 1000, 20)])  # the member's recorded size is checked
    with pytest.raises(ForbiddenSourceError):
        again.plan([("s3://bucket/daily/other.nc", 0, 10)])


# -- a cube's chunk URLs placed among its members (Arrow, no dict a member) ------------------
def _rewrite_urls(path: Path, change) -> None:
    """Rewrite the cube's manifests file with ``change(urls, dictionary)`` giving its URL
    column anew (decoded strings in; strings or a dictionary array out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from h5sidecar.references import MANIFESTS_FILE
    from h5sidecar.references.parquet_sidecar._manifests_file import WRITE_OPTIONS

    file = path / MANIFESTS_FILE
    table = pq.read_table(file, read_dictionary=["array", "url"])
    url = table.column("url").combine_chunks()
    new = change(url.dictionary_decode().to_pylist(), url.dictionary.to_pylist())
    at = table.schema.get_field_index("url")
    pq.write_table(table.set_column(at, "url", pa.chunked_array([new])), file, **WRITE_OPTIONS)


@pytest.fixture(params=["bulk", "small", "per-array", "per-array-small"])
def decoder(request, monkeypatch) -> str:
    """The all-arrays manifests file decoded in columns (as a large cube's), or in Python;
    every array's at once, or one array's when it is first read (as a cube's of more than
    ``PER_ARRAY_ROWS`` chunks)."""
    from h5sidecar.references.parquet_sidecar import _manifests_file, _parquet_lazy

    if request.param in ("bulk", "per-array"):
        monkeypatch.setattr(_manifests_file, "SMALL_ROWS", 0)
    if request.param.startswith("per-array"):
        monkeypatch.setattr(_parquet_lazy, "PER_ARRAY_ROWS", 0)
    return request.param


def test_a_large_cubes_open_and_read_decode_only_the_arrays_read(
    cube: tuple[Path, list[Path]], monkeypatch
) -> None:
    """A cube's manifests file of more than ``PER_ARRAY_ROWS`` chunks is decoded an array at
    a time: the open decodes the coordinates', a read of ``tas`` its rows alone, and ``pr``
    is never decoded; each array reads as h5netcdf and h5py read the files."""
    from h5sidecar.references.parquet_sidecar import _parquet_lazy

    path, files = cube
    decoded: list[set[str]] = []
    decode = _parquet_lazy.decode_manifests

    def watched(data, metas, others=()):  # type: ignore[no-untyped-def]
        decoded.append(set(metas))
        return decode(data, metas, others)

    monkeypatch.setattr(_parquet_lazy, "decode_manifests", watched)
    ref = _reference(files)
    monkeypatch.setattr(_parquet_lazy, "PER_ARRAY_ROWS", 0)
    with xr.open_dataset(path, engine="h5sidecar") as ds:
        assert sorted(map(sorted, decoded)) == [["lat"], ["lon"], ["time"]]
        np.testing.assert_array_equal(ds["tas"].values, ref["tas"].values)
        assert decoded[-1] == {"tas"} and len(decoded) == 4
        np.testing.assert_array_equal(ds["time"].values, ref["time"].values)
    raw = read_arrays(str(path), ["pr"])["pr"]
    with h5py.File(files[3]) as f:
        np.testing.assert_array_equal(raw[3], f["pr"][0])
    assert decoded[-1] == {"pr"}


def test_chunk_urls_in_another_order_than_the_members_read_right(
    cube: tuple[Path, list[Path]], decoder: str
) -> None:
    """The file's URL dictionary usually begins with the members' URLs in order (compared as a
    whole); in any other order each URL is looked up, and every time step reads the same."""
    import pyarrow as pa

    path, files = cube

    def reverse(urls: list, dictionary: list) -> pa.Array:
        order = sorted(set(dictionary), reverse=True)
        at = {u: i for i, u in enumerate(order)}
        indices = pa.array([None if u is None else at[u] for u in urls], pa.int32())
        return pa.DictionaryArray.from_arrays(indices, pa.array(order, pa.string()))

    _rewrite_urls(path, reverse)
    ref = _reference(files)
    with xr.open_dataset(path, engine="h5sidecar") as ds:
        for name in ("tas", "pr"):
            np.testing.assert_array_equal(ds[name].values, ref[name].values)
    raw = read_arrays(str(path), ["tas"])["tas"]
    for i in (0, 7, 11):
        with h5py.File(files[i]) as f:
            np.testing.assert_array_equal(raw[i], f["tas"][0])


def test_a_chunk_url_no_member_has_is_refused(
    cube: tuple[Path, list[Path]], decoder: str
) -> None:
    path, files = cube
    stranger = str(files[4].parent / "stranger.nc")
    _rewrite_urls(path, lambda urls, _: [stranger if u == str(files[4]) else u for u in urls])
    with xr.open_dataset(path, engine="h5sidecar") as ds, pytest.raises(
            InvalidReferenceError, match=r"stranger\.nc' is not among the array's URLs"):
        ds["tas"].isel(time=4).values  # noqa: B018 - the access reads it


def test_a_chunk_past_its_members_recorded_size_is_refused(
    cube: tuple[Path, list[Path]], decoder: str
) -> None:
    """Every chunk's end is checked against its member's size from the members file (placed
    by URL in Arrow); the error names the array and the member."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from h5sidecar.references import MANIFESTS_FILE
    from h5sidecar.references.parquet_sidecar._manifests_file import WRITE_OPTIONS

    path, files = cube
    file = path / MANIFESTS_FILE
    table = pq.read_table(file, read_dictionary=["array", "url"])
    urls = table.column("url").combine_chunks().dictionary_decode().to_pylist()
    arrays = table.column("array").combine_chunks().dictionary_decode().to_pylist()
    row = next(i for i, (a, u) in enumerate(zip(arrays, urls, strict=True))
               if a == "pr" and u == str(files[9]))
    offset = table.column("offset").to_numpy().copy()
    offset[row] = files[9].stat().st_size  # the chunk now ends past the member
    at = table.schema.get_field_index("offset")
    pq.write_table(table.set_column(at, "offset", pa.array(offset)), file, **WRITE_OPTIONS)
    ref = _reference(files)
    with xr.open_dataset(path, engine="h5sidecar") as ds:
        with pytest.raises(InvalidReferenceError, match=f"pr: a chunk ends at byte .* past the "
                                                        f"end of .*{files[9].name}"):
            ds["pr"].isel(time=2).values  # noqa: B018 - the access reads it
        np.testing.assert_array_equal(ds["tas"].values, ref["tas"].values)  # the other array
