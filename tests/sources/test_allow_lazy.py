"""The allow-list and identity index of a cube's many members: normalised only when read.

A lazily built list must decide exactly as an eagerly built one for every URL (the fast path
only skips normalising prefixes that are not asked about); a recorded URL that is not in
normalised form is still found (by normalising all, once).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from h5sidecar.errors import ForbiddenSourceError, InvalidReferenceError
from h5sidecar.references import SourceInfo
from h5sidecar.settings import ReadSettings
from h5sidecar.sources._allow import AllowList, SourceIndex
from h5sidecar.sources.fetch._chunk_fetcher import ChunkFetcher

MEMBERS = [f"s3://bucket/daily/g{i:05d}.nc" for i in range(2000)]


def _decisions(allow: AllowList, urls: list[str]) -> list[object]:
    out: list[object] = []
    for u in urls:
        try:
            out.append(allow.check(u).url)
        except (ForbiddenSourceError, InvalidReferenceError) as exc:
            out.append(type(exc))
    return out


def test_lazy_list_decides_as_the_eager_one(tmp_path: Path) -> None:
    root = os.path.realpath(tmp_path)
    given = [*MEMBERS[:50], "s3a://other/x.nc", "s3://whole-bucket", f"{root}/dir"]
    asked = [
        MEMBERS[0], MEMBERS[49], MEMBERS[50],           # members, and one not given
        "S3A://bucket/daily/g00003.nc",                 # another spelling of a member
        "s3://other/x.nc", "s3://whole-bucket/a/b.nc",  # normalised only by the slow path
        f"{root}/dir/g.h5", f"{root}/dir2/g.h5", f"{root}/dir/../dir2/g.h5",
        "s3://bucket/daily/../secret", "s3://bucket/a\x00b", "ftp://bucket/x",
    ]  # fmt: skip
    eager = _decisions(AllowList(given), asked)
    lazy = _decisions(AllowList(given, lazy=True), asked)
    assert lazy == eager
    assert eager[:5] == [MEMBERS[0], MEMBERS[49], ForbiddenSourceError, MEMBERS[3],
                         "s3://other/x.nc"]  # fmt: skip
    assert eager[-3:] == [ForbiddenSourceError, InvalidReferenceError, ForbiddenSourceError]


def test_lazy_list_skips_a_bad_member_url_instead_of_failing_every_read() -> None:
    bad = "s3://bucket/daily/../../etc/passwd"
    with pytest.raises(ForbiddenSourceError):
        AllowList([MEMBERS[0], bad])  # a prefix given by the caller: refused at once
    lazy = AllowList([MEMBERS[0], bad], lazy=True)
    assert lazy.check(MEMBERS[0]).url == MEMBERS[0]
    with pytest.raises(ForbiddenSourceError):
        lazy.check(bad)
    assert not lazy.allows("s3://bucket/etc/passwd")  # the slow path ran: still refused


def test_source_index_finds_identities_by_normalised_url() -> None:
    infos = [SourceInfo(url=u, size=100 + i, etag=f"e{i}") for i, u in enumerate(MEMBERS)]
    odd = SourceInfo(url="s3a://bucket/odd.nc", size=7, etag="odd")
    bad = SourceInfo(url="s3://bucket/x/../y.nc", size=1)
    index = SourceIndex([*infos, odd, bad])
    assert index.get(MEMBERS[1234]) == infos[1234]
    assert index._all is None  # found without normalising the others
    assert MEMBERS[7] in index
    assert index.get("s3://bucket/odd.nc") == odd  # recorded in another spelling
    assert index.get("s3://bucket/nothing.nc") is None
    assert "s3://bucket/y.nc" not in index


def test_cube_fetcher_pickles_its_lazy_list() -> None:
    import pickle

    infos = [SourceInfo(url=u, size=100) for u in MEMBERS]
    fetcher = ChunkFetcher(ReadSettings(allowed_prefixes=tuple(MEMBERS)), sources=infos,
                           lazy_allow_list=True)  # fmt: skip
    again = pickle.loads(pickle.dumps(fetcher))
    assert again.lazy_allow_list and again.allow_list._canon is None
    assert again.allow_list.check(MEMBERS[5]).url == MEMBERS[5]
    with pytest.raises(ForbiddenSourceError):
        again.plan([("s3://bucket/daily/other.nc", 0, 10)])
    with pytest.raises(InvalidReferenceError, match="past the end"):
        again.plan([(MEMBERS[5], 90, 20)])  # the size recorded for the member is checked
