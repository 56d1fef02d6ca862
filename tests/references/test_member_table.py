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


# -- lookups with no Python object a member: what a dict of every URL answered --------------
def _urls(rng, n: int) -> list[str]:
    words = ["a", "b", "é", "ü/x", "z", "granule_", "0", "9", "/"]  # (non-ASCII: bytes order)
    out = {"/" + "".join(rng.choice(words, size=int(rng.integers(1, 6)))) for _ in range(3 * n)}
    return sorted(out)[:n]


@pytest.mark.parametrize("seed", range(8))
def test_row_of_answers_as_a_dict_of_every_url(seed: int) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    urls = _urls(rng, 40)
    rng.shuffle(urls)
    members = [SourceInfo(url=u, size=i) for i, u in enumerate(urls)]
    cut = int(rng.integers(1, len(members)))  # in two chunks, as a cube's members files
    table = MemberTable.concat([MemberTable.of(members[:cut]), MemberTable.of(members[cut:])])
    rows = {u: i for i, u in enumerate(urls)}
    for url in [*urls, "/", "", "/zz", urls[0] + "x", urls[-1][:-1], "\uffff"]:
        assert table.row_of(url) == rows.get(url), url


@pytest.mark.parametrize("seed", range(8))
def test_positions_and_sizes_answer_as_dicts_of_every_url(seed: int) -> None:
    """:func:`positions` compares a leading run of the members' URLs whole and looks up the
    rest; :func:`url_sizes` gives what :func:`known_sizes` maps, member first, then the
    source."""
    import numpy as np
    import pyarrow as pa

    from h5sidecar.references._assemble import known_sizes, url_sizes
    from h5sidecar.references._extras import Extras
    from h5sidecar.references.datacube._member_table import positions

    rng = np.random.default_rng(seed)
    pool = _urls(rng, 60)
    members = list(rng.choice(pool, size=30, replace=False))
    others = [u for u in pool if u not in members]
    case = seed % 4
    if case == 0:  # the members in order, then others (a cube's usual dictionary)
        values = members + others[:5]
    elif case == 1:  # a shorter run of them
        values = members[:10]
    elif case == 2:  # shuffled among others
        values = list(rng.permutation(members[:20] + others[:10]))
    else:  # none of them
        values = others[:12]
    table = MemberTable.concat([MemberTable.of([SourceInfo(url=u, size=int(rng.integers(-1, 99)))
                                                for u in part])
                                for part in (members[:13], members[13:])])
    rows = {u: i for i, u in enumerate(members)}
    got = positions(pa.array(values, pa.string()), table.urls)
    assert got.tolist() == [rows.get(u, -1) for u in values]
    for source in (SourceInfo(url=values[-1], size=5), SourceInfo(url="/elsewhere", size=7),
                   SourceInfo(url=members[0], size=3)):
        for given in (table, tuple(table)):
            extras = Extras(source=source, members=given)
            known = known_sizes(extras)
            sizes = url_sizes(pa.array(values, pa.string()), extras)
            assert sizes.tolist() == [known.get(u, -1) for u in values]
