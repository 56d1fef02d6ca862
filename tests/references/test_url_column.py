"""UrlColumn: a built datacube's member URLs in one Arrow column, read as the same strings a
tuple holds, and written by the Parquet writers without a Python string per URL."""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pytest

from h5sidecar.references import (
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    MemberTable,
    SourceInfo,
    UrlColumn,
)
from h5sidecar.references.datacube._concat import concat_manifests, concat_refs, slice_manifest
from h5sidecar.references.datacube._url_column import arrow_urls, distinct_urls, repeated_url

URLS = ("/data/a.nc", "/data/b.nc", "s3://bucket/c.nc", "https://host/d.nc")


def test_reads_as_the_tuple_of_its_strings() -> None:
    column = UrlColumn(pa.array(URLS))
    assert len(column) == 4 and list(column) == list(URLS) and tuple(column) == URLS
    assert column[1] == URLS[1] and column[-1] == URLS[-1] and isinstance(column[0], str)
    assert column == URLS and URLS == column and column == list(URLS)  # noqa: SIM300
    assert column != URLS[:3] and column != (*URLS[:3], "/other.nc")
    assert column[1:3] == URLS[1:3] and column[::2] == URLS[::2] and column[3:1] == ()
    assert column.take([3, 0]) == (URLS[3], URLS[0])
    assert pickle.loads(pickle.dumps(column)) == column
    assert UrlColumn(pa.chunked_array([pa.array(URLS[:2]), pa.array(URLS[2:])])) == URLS
    with pytest.raises(IndexError):
        column[4]
    with pytest.raises(ValueError, match="non-null Arrow strings"):
        UrlColumn(pa.array(["/a.nc", None]))


def test_writers_take_its_arrow_array_as_it_is() -> None:
    array = pa.array(URLS)
    column = UrlColumn(array)
    assert arrow_urls(column) is array  # no copy
    assert arrow_urls(URLS).equals(array)
    # a slice shares the buffers too
    assert column[1:3].arrow.buffers()[2].address == array.buffers()[2].address


def test_a_repeated_url_is_found_and_urls_in_order_are_not_sorted(monkeypatch) -> None:
    assert repeated_url(pa.array(sorted(URLS))) is None
    assert repeated_url(pa.array(["/b.nc", "/a.nc", "/b.nc"])) == "/b.nc"
    assert repeated_url(pa.array(["/b.nc", "/a.nc", "/c.nc"])) is None
    assert repeated_url(pa.array(["/a.nc", "/a.nc"])) == "/a.nc"
    assert distinct_urls(UrlColumn(pa.array(["/b.nc", "/a.nc"])))
    assert not distinct_urls(UrlColumn(pa.array(["/a.nc", "/a.nc"])))
    assert not distinct_urls(["/a.nc", "/b.nc", "/a.nc"]) and distinct_urls(["/a.nc"])
    # in order (a DEST listed by name): no sort, so no sorted copy of every URL
    import pyarrow.compute as pc

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("sorted")

    monkeypatch.setattr(pc, "array_sort_indices", refused)
    assert repeated_url(pa.array([f"/data/g{i:05d}.nc" for i in range(1000)])) is None


def test_members_share_the_url_column_they_equal() -> None:
    members = MemberTable.of(SourceInfo(url=u, size=i + 1) for i, u in enumerate(URLS))
    urls = pa.array(URLS)
    shared = members.sharing_urls(urls)
    assert shared == members and shared is not members
    assert shared.urls.chunk(0).buffers()[2].address == urls.buffers()[2].address
    other = pa.array([*URLS[:3], "/other.nc"])
    assert members.sharing_urls(other) is members  # not its URLs: left as it is
    assert members.duplicate_url() is None
    twice = MemberTable.of([*members, SourceInfo(url=URLS[0], size=9)])
    assert twice.duplicate_url() == URLS[0]


def test_urls_in_several_chunks_are_kept_as_they_are_and_read_alike() -> None:
    """A cube's members' URLs come in one chunk a members file: held as they are (no joined
    copy), read, sliced, taken, compared and pickled as the tuple of their strings."""
    chunks = pa.chunked_array([pa.array(URLS[:1]), pa.array(URLS[1:3]), pa.array(URLS[3:])])
    column = UrlColumn(chunks)
    assert column.arrow.equals(pa.array(URLS)) and list(column) == list(URLS)
    assert [column[k] for k in range(-4, 4)] == [*URLS, *URLS]
    assert column[1:4] == URLS[1:4] and column.take([2, 0]) == (URLS[2], URLS[0])
    assert column == UrlColumn(pa.array(URLS)) and UrlColumn(pa.array(URLS)) == column
    assert column != UrlColumn(pa.array([*URLS[:3], "/other.nc"]))
    assert pickle.loads(pickle.dumps(column)) == URLS
    assert column.distinct and not UrlColumn(pa.chunked_array([pa.array(URLS[:2]),
                                                               pa.array(URLS[:1])])).distinct


def test_a_parquet_cubes_manifest_names_its_members_in_arrow(tmp_path, monkeypatch) -> None:
    """The manifest of a cube's array whose URLs are its members' holds them as a UrlColumn
    over the members' URL column (no Python string a member), equal to their strings (a
    file of more than SMALL_ROWS rows: here every file, so this small cube's)."""
    import datetime as dt

    from h5sidecar.references import read_refs
    from h5sidecar.references.parquet_sidecar import _manifests_file as bulk
    from h5sidecar.sample import write_daily_collection
    from h5sidecar.workflows import build_cube, index_many

    files = write_daily_collection(tmp_path / "nc", days=3, start=dt.date(2020, 1, 1))
    index_many(str(tmp_path / "nc"), str(tmp_path / "sc"), executor="serial")
    cube = build_cube(str(tmp_path / "sc"), str(tmp_path / "cube.parq")).path
    monkeypatch.setattr(bulk, "SMALL_ROWS", -1)
    refs = read_refs(cube)
    urls = refs.arrays["tas"].manifest.urls
    assert isinstance(urls, UrlColumn) and urls == tuple(str(f) for f in sorted(files))
    assert urls == tuple(m.url for m in refs.members)


def test_unordered_urls_are_compared_a_sorted_slice_at_a_time(monkeypatch) -> None:
    """A repeat is found however the sorted order falls across the slices compared (their
    boundary included), and none is found where there is none."""
    from h5sidecar.references.datacube import _url_column

    monkeypatch.setattr(_url_column, "_SORTED_SLICE", 3)
    names = [f"/d/g{i:02d}.nc" for i in range(10)][::-1]  # out of order: sorted
    assert repeated_url(pa.array(names)) is None
    for k in range(1, 10):  # the repeat's sorted neighbours at each place, boundaries too
        urls = [*names, names[k]]
        assert repeated_url(pa.array(urls)) == names[k]
        split = pa.chunked_array([pa.array(urls[:4]), pa.array(urls[4:])])
        assert repeated_url(split) == names[k]


def _manifest(urls: tuple[str, ...] | UrlColumn, codes: list[int]) -> ChunkManifest:
    n = len(codes)
    return ChunkManifest.from_arrays(
        urls=urls, codes=np.array(codes, np.int32).reshape(n, 1),
        offsets=np.arange(n, dtype=np.uint64).reshape(n, 1) * 10,
        lengths=np.full((n, 1), 7, np.uint64))


def _chunk_urls(m: ChunkManifest) -> list[str | None]:
    return [m.urls[c] if c >= 0 else None for c in m.codes.reshape(-1).tolist()]


@pytest.mark.parametrize("arrow", [False, True])
def test_sliced_and_joined_manifests_keep_their_urls_in_arrow(arrow: bool) -> None:
    """Slices of a manifest whose URLs are a UrlColumn keep a UrlColumn (no Python string a
    URL), and joining them (with a granule's tuple, URLs repeated or not) reads every chunk
    from the URL the tuple-based join gives."""
    urls = tuple(f"/d/g{i}.nc" for i in range(6))
    whole = _manifest(UrlColumn(pa.array(urls)) if arrow else urls, [0, 1, 2, -1, 3, 4, 5])
    head, tail = slice_manifest(whole, 0, 0, 3), slice_manifest(whole, 0, 4, 7)
    assert isinstance(head.urls, UrlColumn) is arrow and isinstance(tail.urls, UrlColumn) is arrow
    assert list(head.urls) == list(urls[:3]) and list(tail.urls) == list(urls[3:])
    for extra in (("/d/new.nc",), ("/d/g1.nc",)):  # a new URL; one the slices list already
        mid = _manifest(extra, [0, 0])
        joined = concat_manifests([head, mid, tail], axis=0)
        assert isinstance(joined.urls, UrlColumn) is arrow
        assert _chunk_urls(joined) == [*urls[:3], extra[0], extra[0], *urls[3:]]
        assert len(set(joined.urls)) == len(joined.urls)  # each URL listed once
        assert joined.offsets.reshape(-1).tolist() == [0, 10, 20, 0, 10, 40, 50, 60]


def test_arrays_joined_to_equal_url_columns_share_one() -> None:
    """A cube's arrays joined from slices list the same members: they share one UrlColumn
    (the manifests writer codes a shared table once, not a mapping of every URL per array)."""
    urls = UrlColumn(pa.array([f"/d/g{i}.nc" for i in range(4)]))
    meta = ArrayMeta(shape=(2, 1), chunks=(1, 1), dtype="<i2",
                     dimension_names=("time", "x"))
    parts = []
    for a, b in ((0, 2), (2, 4)):
        arrays = {n: ArrayRefs(path=n, meta=meta, manifest=_manifest(urls[a:b], [0, 1]))
                  for n in ("tas", "pr")}  # (each array's slice its own object)
        parts.append(GranuleRefs(SourceInfo(url=urls[a], size=100), {}, arrays))
    joined = concat_refs(parts, "time")
    assert joined.arrays["tas"].manifest.urls is joined.arrays["pr"].manifest.urls
    assert joined.arrays["tas"].manifest.urls == urls
