"""MemberTable: a cube's member identities in columns read back as the same SourceInfo, and
references holding one are written byte for byte as those holding a tuple."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import GranuleRefs, MemberTable, SourceInfo, write_json, write_parquet

MEMBERS = (
    SourceInfo(url="/data/a.nc", size=10, mtime_ns=1_700_000_000_123_456_789, inode=7,
               ctime_ns=1_700_000_000_987_654_321, device=2049),
    SourceInfo(url="s3://bucket/b.nc", size=20, etag="abc-2", mtime=1_700_000_001.5),
    SourceInfo(url="https://host/c.nc", size=30),
    SourceInfo(url="/data/d.nc", size=40, mtime=1_700_000_002.25, inode=9),
)


def test_round_trip_slices_and_equality() -> None:
    table = MemberTable.of(MEMBERS)
    assert len(table) == 4 and list(table) == list(MEMBERS)
    assert table[1] == MEMBERS[1] and table[-1] == MEMBERS[-1]
    assert list(table[1:3]) == list(MEMBERS[1:3]) and list(table[::2]) == list(MEMBERS[::2])
    assert table == MEMBERS and tuple.__eq__(MEMBERS, table) is NotImplemented
    assert MEMBERS == table and table != MEMBERS[:3]  # noqa: SIM300 - the reflected side
    assert MemberTable.concat([table[:1], table[1:]]) == table
    assert pickle.loads(pickle.dumps(table)) == table
    with pytest.raises(IndexError):
        table[4]


def test_references_with_a_table_read_and_refuse_as_with_a_tuple() -> None:
    refs = GranuleRefs(MEMBERS[0], {}, {}, members=MemberTable.of(MEMBERS))
    assert refs.identity_of("s3://bucket/b.nc") == MEMBERS[1]
    assert refs.identity_of("/elsewhere.nc") == MEMBERS[0]  # not a member: the source
    with pytest.raises(InvalidReferenceError, match=r"/data/a\.nc more than once"):
        GranuleRefs(MEMBERS[0], {}, {}, members=MemberTable.of([*MEMBERS, MEMBERS[0]]))


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_written_the_same_as_a_tuple(tmp_path: Path, fmt: str) -> None:
    as_tuple = GranuleRefs(MEMBERS[0], {}, {}, extra={"cube": {"granules": 4}}, members=MEMBERS)
    as_table = GranuleRefs(MEMBERS[0], {}, {}, extra={"cube": {"granules": 4}},
                           members=MemberTable.of(MEMBERS))
    write = write_parquet if fmt == "parquet" else write_json
    a, b = tmp_path / "tuple", tmp_path / "table"
    write(as_tuple, str(a))
    write(as_table, str(b))
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file()) if a.is_dir() else [""]
    assert files
    for rel in files:
        assert (b / rel).read_bytes() == (a / rel).read_bytes()
