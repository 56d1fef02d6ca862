"""The lookups an append makes over a large cube's members, hashing the few values looked up
rather than every member's: they answer what ``pc.index_in`` over every member answers, and
the members files' URL check finds a URL listed twice in one file or in two."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import MemberTable
from h5sidecar.references.datacube._member_table import _repeated, first_rows


@pytest.mark.parametrize("seed", range(20))
def test_first_rows_is_index_in_over_the_column(seed: int) -> None:
    rng = random.Random(seed)
    pool = [f"s3://b/g{i:03d}.nc" for i in range(rng.randint(1, 40))]
    values = [rng.choice([*pool, None]) for _ in range(rng.randint(0, 60))]
    cuts = sorted(rng.sample(range(len(values) + 1), min(3, len(values) + 1)))
    column = pa.chunked_array([pa.array(values[a:b], pa.string())
                               for a, b in zip([0, *cuts], [*cuts, len(values)], strict=True)],
                              pa.string())
    wanted = pa.array([rng.choice([*pool, "s3://b/other.nc", None])
                       for _ in range(rng.randint(0, 12))], pa.string())
    want = pc.index_in(wanted, value_set=column.combine_chunks(), skip_nulls=True)
    assert first_rows(column, wanted).tolist() == [-1 if v is None else v
                                                   for v in want.to_pylist()]


@pytest.mark.parametrize(("chunks", "twice"), [
    ([["a", "b"], ["c", "d"]], None),
    ([["a", "c"], ["b", "d"]], None),  # each in order, not across: sorted, unique
    ([["c", "a"], ["d"]], None),
    ([["a", "c"], ["c", "d"]], "c"),  # across two files
    ([["b", "a", "b"]], "b"),
    ([[], ["a"]], None),
])
def test_a_url_twice_is_found_in_one_file_or_across_two(chunks, twice) -> None:
    urls = pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
    assert _repeated(urls) == twice
    # the members files' check: the same answer on a whole table
    identity = MemberTable.of([]).table.schema
    rows = pa.table({f.name: urls.combine_chunks() if f.name == "url"
                     else pa.nulls(len(urls), f.type) for f in identity})
    if twice is None:
        MemberTable.check_columns(rows, "members.parq")
    else:
        with pytest.raises(InvalidReferenceError, match="twice"):
            MemberTable.check_columns(rows, "members.parq")


@pytest.mark.parametrize("seed", range(12))
def test_a_table_in_files_answers_lookups_as_the_whole_table(seed: int, monkeypatch) -> None:
    """A lazy table in several members files (3 rows a file here) answers ``rows_of``,
    ``take``, items and slices as the whole table does, reading only the files it needs."""
    from h5sidecar.references.datacube import _member_table
    from h5sidecar.references.parquet_sidecar._members_file import (
        encode_members,
        lazy_members,
    )

    monkeypatch.setattr(_member_table, "DIGEST_ROWS", 3)
    rng = random.Random(seed)
    n = rng.randint(4, 14)
    names = sorted(rng.sample(range(1000), n))
    if seed % 3 == 0:
        rng.shuffle(names)  # URLs out of order: ranges overlap, more files read
    urls = [f"s3://b/g{i:03d}.nc" for i in names]
    whole = MemberTable(pa.table({
        **{f.name: (pa.array(urls, pa.string()) if f.name == "url" else pa.nulls(n, f.type))
           for f in MemberTable.of([]).table.schema},
        "sidecar": pa.array([rng.choice([None, f"{u}.json"]) for u in urls], pa.string()),
    }))
    files, entry = encode_members(whole)
    blobs = dict(files)
    fetched: list[str] = []

    def fetch(wanted: list[str]) -> dict[str, bytes]:
        fetched.extend(wanted)
        return {w: blobs[w] for w in wanted}

    lazy = lazy_members(entry, fetch)
    pool = [*urls, "s3://b/other.nc", "s3://a/first.nc", "s3://z/last.nc", None]
    for name, values in (("url", pool), ("sidecar", [*(f"{u}.json" for u in pool[:-1]), None])):
        wanted = pa.array([rng.choice(values) for _ in range(rng.randint(0, 3))], pa.string())
        assert lazy.rows_of(name, wanted).tolist() == first_rows(
            whole.table.column(name), wanted).tolist()
    rows = [rng.randrange(n) for _ in range(rng.randint(0, 6))]
    assert lazy.take(rows, ["url", "sidecar"]).equals(
        whole.table.select(["url", "sidecar"]).take(pa.array(rows, pa.int64())))
    k = rng.randrange(n)
    assert lazy[k] == whole[k] and lazy[-1] == whole[-1]
    assert lazy.schema == whole.table.schema and not lazy.is_loaded
    a = rng.randrange(n)
    assert lazy._slice(a, 5).equals(whole.table.slice(a, 5))
    assert len(set(fetched)) == len(fetched)  # each file fetched once
    if seed % 3:  # in order: a URL after every member's reads no file but for the schema
        fetched.clear()
        assert lazy.rows_of("url", pa.array(["s3://z/last.nc"])).tolist() == [-1]
        assert fetched == []
    assert lazy.table.equals(whole.table)  # the whole table: the files read once each
    assert sorted(fetched) == sorted(set(fetched))


def test_more_values_looked_up_than_a_file_holds_are_looked_up_in_the_whole_column(
        monkeypatch) -> None:
    """An append given every sidecar of DEST looks each up once in the whole column (one
    hash table of them), not once a file."""
    from h5sidecar.references.datacube import _member_table
    from h5sidecar.references.parquet_sidecar._members_file import (
        encode_members,
        lazy_members,
    )

    monkeypatch.setattr(_member_table, "DIGEST_ROWS", 3)
    urls = [f"s3://b/g{i:03d}.nc" for i in range(7)]
    whole = MemberTable.of([]).table.schema
    table = MemberTable(pa.table({f.name: pa.array(urls) if f.name == "url"
                                  else pa.nulls(7, f.type) for f in whole}))
    files, entry = encode_members(table)
    lazy = lazy_members(entry, lambda names: {n: dict(files)[n] for n in names})
    assert lazy.rows_of("url", pa.array(urls[:3])).tolist() == [0, 1, 2]
    assert not lazy.is_loaded  # three: a file's worth, read by file
    wanted = pa.array([urls[6], "s3://b/none.nc", urls[1], urls[4]])
    assert lazy.rows_of("url", wanted).tolist() == [6, -1, 1, 4]
    assert lazy.is_loaded


@pytest.mark.parametrize("twice", [False, True])
def test_a_cubes_member_urls_and_sizes_are_read_as_those_columns_alone(
        monkeypatch, twice: bool) -> None:
    """What a cube's manifests name (its members' URLs, checked listed once), its chunk size
    check (each URL's recorded size) and a reader's member lookup read those columns of each
    members file alone, not every column: the table is not loaded whole. A URL in two files is refused as the whole
    table's check refuses it. Loaded whole afterwards, the table holds the URL column read
    before (one copy of it)."""
    from h5sidecar.references import SourceInfo
    from h5sidecar.references._assemble import url_sizes
    from h5sidecar.references._extras import Extras
    from h5sidecar.references.datacube import _member_table
    from h5sidecar.references.parquet_sidecar import _members_file
    from h5sidecar.references.parquet_sidecar._members_file import encode_members, lazy_members

    monkeypatch.setattr(_member_table, "DIGEST_ROWS", 3)
    urls = [f"s3://b/g{i:03d}.nc" for i in range(7)]
    if twice:
        urls[5] = urls[1]  # in the second file and the first
    members = [SourceInfo(url=u, size=100 + i) for i, u in enumerate(urls)]
    table = MemberTable(MemberTable.of(members).table)
    files, entry = encode_members(table)
    blobs = dict(files)
    lazy = lazy_members(entry, lambda names: {n: blobs[n] for n in names})
    parsed: list[str] = []
    parse = _members_file._Loader._parse
    monkeypatch.setattr(_members_file._Loader, "_parse",
                        lambda self, k, data: parsed.append(k) or parse(self, k, data))
    extras = Extras(source=members[0], members=lazy)
    if twice:
        with pytest.raises(InvalidReferenceError, match="list a member URL twice"):
            extras.member_urls()
        return
    assert list(extras.member_urls()) == urls
    asked = pa.array(["s3://b/g004.nc", "s3://b/none.nc", "s3://b/g000.nc"])
    assert url_sizes(asked, extras).tolist() == [104, -1, 100]
    # a reader's check that a URL is a member's (the allow-list): the URL column alone
    assert [lazy.row_of(u) for u in ("s3://b/g003.nc", "s3://b/none.nc")] == [3, None]
    assert not lazy.is_loaded and parsed == []  # no file decoded whole
    column = lazy.checked_urls()
    assert lazy.table.column("url") is column or all(  # the same buffers, not a copy
        a.buffers()[2].address == b.buffers()[2].address
        for a, b in zip(lazy.table.column("url").chunks, column.chunks, strict=True))
    assert lazy.table.equals(table.table)
