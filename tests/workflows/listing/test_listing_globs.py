"""Globs listed as they are found: a local glob walked one folder at a time, an S3 glob one
page at a time from its literal head, each listing exactly what fsspec's ``glob`` lists (which
the listing no longer calls)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
import s3fs
from fsspec.implementations.local import LocalFileSystem

from h5sidecar.errors import SourceNotFoundError
from h5sidecar.sources.stores._urls import normalize_url
from h5sidecar.workflows import index_many
from h5sidecar.workflows.listing import _listing_walk
from h5sidecar.workflows.listing._listing import _glob_root, identity_from_info, list_granules
from tests.conftest import moto_seed
from tests.workflows.conftest import assert_matches_h5py, observe_calls, write_granule

#: Globs of every form over the trees below: ``*``, ``?``, ``[ab]``, ``[!a]``, ``**``, nested
#: levels, a literal head within a segment, dot-files (fsspec's patterns match them).
GLOBS = ("*/c.h5", "in/*/*/g0000?.h5", "in/[01]/*/g*.h5", "in/[!0]/1/*", "in/**/g0001*.h5",
         "in/**", "**/*.h5", "in/1/0/g000*", "in/?/[02]/g00[0-2]?[13].h5", "in/*",
         "in/.*", "in/**/.*/*.h5", "*", "in/**/", "in/nothing*")


def _keys(bucket: str, n: int) -> dict[str, bytes]:
    """``n`` tiny objects under ``in/`` at two folder levels, and a few at other depths."""
    out = {f"{bucket}/in/{i % 7}/{i // 7 % 3}/g{i:05d}.h5": b"x" * (i % 5 + 1) for i in range(n)}
    out[f"{bucket}/in/readme.txt"] = b"x"
    out[f"{bucket}/in/.hidden.h5"] = b"x"
    out[f"{bucket}/in/.tmp/x.h5"] = b"x"
    out[f"{bucket}/other/c.h5"] = b"x"
    out[f"{bucket}/top.h5"] = b"x"
    return out


def _globbed(fs: fsspec.AbstractFileSystem, pattern: str, scheme: str
             ) -> list[tuple[str, str, Any]]:
    """``(name, url, identity)`` of the files fsspec's ``glob`` lists (its regular files, as
    the listing took them before), named as the listing names them."""
    if scheme == "file":
        pattern = normalize_url(pattern)  # as the listing took it (a trailing / dropped)
    root = _glob_root(pattern)
    out = []
    for path, info in fs.glob(pattern, detail=True).items():
        if info["type"] == "directory":
            continue
        if scheme == "file" and not os.path.isfile(path):
            continue  # not a regular file (a FIFO, a dangling symlink, a link to a folder)
        url = f"{scheme}://{path}" if scheme != "file" else path
        out.append((path[len(root):].lstrip("/"), url, identity_from_info(url, info)))
    return sorted(out)


@pytest.fixture
def whole_listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths fsspec's whole-listing ``glob``/``find`` are called with (S3 and local),
    observed only: they still do what they do."""
    yield observe_calls(monkeypatch, [(cls, method) for cls in (s3fs.S3FileSystem, LocalFileSystem)
                                      for method in ("glob", "find")])


def test_s3_globs_listed_page_by_page_as_glob_lists_them(
    s3, s3_bucket: str, s3_storage_options, monkeypatch: pytest.MonkeyPatch,
    whole_listings: list[str],
) -> None:
    moto_seed(_keys(s3_bucket, 300))
    s3.invalidate_cache()
    s3.invalidate_cache()
    listed: list[str] = []
    real = _listing_walk._iter_objects

    def observed(fs, prefix, start="", one_level=False):  # type: ignore[no-untyped-def]
        for info in real(fs, prefix, start, one_level):
            listed.append(info["name"])
            yield info

    monkeypatch.setattr(_listing_walk, "_PAGE", 64)  # many calls into the listing's pages
    monkeypatch.setattr(_listing_walk, "_iter_objects", observed)
    empty: list[str] = []
    for glob in GLOBS:
        expected = _globbed(s3, f"{s3_bucket}/{glob}", "s3")
        s3.invalidate_cache()
        whole_listings.clear()
        listed.clear()
        try:
            granules = list_granules(f"s3://{s3_bucket}/{glob}",
                                     storage_options=s3_storage_options)
        except SourceNotFoundError as exc:  # nothing found, as fsspec's glob finds nothing
            assert expected == [], (glob, exc)
            empty.append(glob)
            continue
        finally:
            assert whole_listings == [], glob  # neither glob nor find: listed as it goes
        assert [(g.name, g.url, g.identity) for g in granules] == expected, glob
        if glob == "in/1/0/g000*":  # the literal head narrows the listing itself
            assert len(expected) == 5
            assert sorted(listed) == [u.split("://")[1] for _, u, _ in expected]
        if glob == "in/*":  # one level listed, not the 300 objects below it
            assert sorted(listed) == sorted(u.split("://")[1] for _, u, _ in expected)
            assert len(listed) == 2
    assert empty == ["in/**/", "in/nothing*"]  # folders only (none on S3); no match


def test_local_globs_walked_as_glob_lists_them(
    tmp_path: Path, whole_listings: list[str]
) -> None:
    root = tmp_path / "src"
    for key in _keys("src", 60):
        path = tmp_path / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * len(key))
    os.mkfifo(root / "in" / "2" / "1" / "g00099.h5")  # matches: named, not listed
    (root / "in" / "1" / "0" / "g00777.h5").symlink_to(root / "in" / "1" / "0" / "g00001.h5")
    (root / "in" / "1" / "0" / "g00778.h5").symlink_to(root / "gone.h5")
    (root / "in" / "3" / "link").symlink_to(root / "in" / "1")  # not entered
    fs = LocalFileSystem()
    empty: list[str] = []
    for glob in GLOBS:
        pattern = f"{root}/{glob}"
        expected = _globbed(fs, pattern, "file")
        expected_not_regular = sorted(
            p for p, i in fs.glob(normalize_url(pattern), detail=True).items()
            if i["type"] != "directory" and not os.path.isfile(p))
        whole_listings.clear()
        not_regular: list[str] = []
        try:
            granules = list_granules(pattern, not_regular=not_regular)
        except SourceNotFoundError as exc:  # nothing found, as fsspec's glob finds nothing
            assert expected == [], (glob, exc)
            empty.append(glob)
            continue
        finally:
            assert whole_listings == [], glob
            assert sorted(not_regular) == expected_not_regular, glob
        assert [(g.name, g.url, g.identity) for g in granules] == expected, glob
    assert empty == ["in/nothing*"]  # every other glob finds granules
    not_regular = []
    granules = list_granules(f"{root}/in/**", not_regular=not_regular)
    assert f"{root}/in/1/0/g00777.h5" in [g.url for g in granules]  # a link to a file is one
    assert sorted(not_regular) == [f"{root}/in/1/0/g00778.h5", f"{root}/in/2/1/g00099.h5",
                                   f"{root}/in/3/link"]  # the link to a folder not entered


def test_s3_glob_indexed_from_a_paged_listing(
    tmp_path: Path, s3, s3_bucket: str, s3_storage_options, whole_listings: list[str]
) -> None:
    files = [write_granule(tmp_path / f"g{i}.h5", seed=i, n=2_000) for i in range(4)]
    for i, f in enumerate(files):
        s3.put(str(f), f"{s3_bucket}/in/{2020 + i % 2}/{f.name}")
    dest = tmp_path / "out"
    whole_listings.clear()
    report = index_many(f"s3://{s3_bucket}/in/202[0]/g*.h5", str(dest), format="json",
                        executor="serial", storage_options=s3_storage_options)
    assert report.counts["ok"] == 2 and [g.url for g in report.granules] == [
        f"s3://{s3_bucket}/in/2020/g0.h5", f"s3://{s3_bucket}/in/2020/g2.h5"]
    assert not [c for c in whole_listings if "in/" in c]
    for g in report.granules:
        assert_matches_h5py(g.sidecar, tmp_path / posixpath.basename(g.url), s3_storage_options,
                            remote_protocol="s3")
