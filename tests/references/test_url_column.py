"""UrlColumn: a built datacube's member URLs in one Arrow column, read as the same strings a
tuple holds, and written by the Parquet writers without a Python string per URL."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from h5sidecar.references import MemberTable, SourceInfo, UrlColumn
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
