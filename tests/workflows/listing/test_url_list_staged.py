"""A URL list staged as it is read: the file a line at a time, the identities a chunk at a
time, with the same granules, names and errors as the list read whole."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from h5sidecar.errors import InvalidRequestError, SourceNotFoundError
from h5sidecar.sources._source_identity import source_identity
from h5sidecar.workflows import index_many
from h5sidecar.workflows.listing import _url_list
from h5sidecar.workflows.listing._listing import list_granules, stage_granules
from h5sidecar.workflows.listing._url_list import UrlList, read_url_list
from tests.workflows.conftest import assert_matches_h5py, write_granule


def _linked(tmp_path: Path, n: int) -> list[str]:
    """Paths of ``n`` hard links to one tiny file (distinct names, one inode)."""
    one = tmp_path / "one.h5"
    one.write_bytes(b"x")
    folder = tmp_path / f"links{n}"
    folder.mkdir()
    out = []
    for i in range(n):
        os.link(one, folder / f"g{i:06d}.h5")
        out.append(str(folder / f"g{i:06d}.h5"))
    return out


def test_a_long_url_list_is_staged_as_the_list_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = _linked(tmp_path, 2_500)
    listed = tmp_path / "urls.txt"
    with open(listed, "w") as f:
        f.write("# granules\n\n")
        f.writelines(f"  {p}\n" if i % 3 else f"{p}\n{p}\n" for i, p in enumerate(reversed(paths)))  # duplicates kept once
    monkeypatch.setattr(_url_list, "_CHUNK", 300)  # many chunks of identity requests
    # the list read whole, each named and identified as before, sorted by name
    expected = sorted((os.path.basename(u), u, source_identity(u))
                      for u in dict.fromkeys(read_url_list(listed)))
    assert len(expected) == 2_500
    with stage_granules(UrlList(listed)) as staged:
        assert len(staged) == 2_500
        assert [(g.name, g.url, g.identity) for g in staged] == expected


def test_url_list_errors_as_before(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        UrlList(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n")
    with pytest.raises(SourceNotFoundError, match="names no URL"):
        list_granules(UrlList(empty))
    a = write_granule(tmp_path / "a" / "g.h5")
    b = write_granule(tmp_path / "b" / "g.h5", seed=1)
    clash = tmp_path / "clash.txt"
    clash.write_text(f"{a}\n{a}\n{b}\n{tmp_path / 'gone.h5'}\n")
    # every name checked before any identity is requested (gone.h5 is not reported)
    with pytest.raises(InvalidRequestError, match=r"share the file name 'g\.h5'"):
        list_granules(UrlList(clash))
    gone = tmp_path / "gone.txt"
    gone.write_text(f"{a}\n{tmp_path / 'gone.h5'}\n")
    with pytest.raises(SourceNotFoundError, match=r"gone\.h5"):
        list_granules(UrlList(gone))


def _staging_peak(listed: Path) -> int:
    tracemalloc.start()
    try:
        with stage_granules(UrlList(listed)) as staged:
            assert len(staged)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_url_list_staging_memory_does_not_grow_with_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_url_list, "_CHUNK", 500)
    peaks = []
    for n in (2_000, 8_000):
        listed = tmp_path / f"urls{n}.txt"
        listed.write_text("".join(p + "\n" for p in _linked(tmp_path, n)))
        _staging_peak(listed)  # imports, threads
        # tracemalloc also counts what other threads of this worker allocate meanwhile (an
        # earlier test's I/O loop or server): the least of three runs is this staging's own
        peaks.append(min(_staging_peak(listed) for _ in range(3)))
    # held whole, 6,000 more granules cost ~1 KB each (~6 MB); staged, only noise grows
    assert peaks[1] - peaks[0] < 1_000_000, peaks


def test_url_list_indexed_from_a_streamed_file(tmp_path: Path) -> None:
    files = [write_granule(tmp_path / "src" / f"g{i}.h5", seed=i, n=2_000) for i in range(3)]
    listed = tmp_path / "urls.txt"
    listed.write_text("".join(f"{f}\n" for f in reversed(files)))
    report = index_many(UrlList(listed), str(tmp_path / "out"), format="json",
                        executor="serial")
    assert report.counts["ok"] == 3
    assert [g.url for g in report.granules] == [str(f) for f in files]
    for g, f in zip(report.granules, files, strict=True):
        assert_matches_h5py(g.sidecar, f)
