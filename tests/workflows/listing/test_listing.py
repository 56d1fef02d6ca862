"""Listing granules: files, folders, globs, S3 prefixes; identities; sidecar names."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec
import h5py
import pytest

from h5sidecar.dest._locations import sidecar_url
from h5sidecar.errors import SourceNotFoundError
from h5sidecar.references import SourceInfo
from h5sidecar.workflows.listing._listed_granule import Granule
from h5sidecar.workflows.listing._listing import list_granules, normalize_url
from h5sidecar.workflows.listing._staged_listing import StagedListing
from tests.workflows.conftest import write_granule


def test_folder_recursive_with_patterns(tmp_path: Path) -> None:
    write_granule(tmp_path / "a.h5")
    write_granule(tmp_path / "sub" / "b.nc")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".hidden.h5").write_bytes(b"x")
    (tmp_path / ".tmpdir").mkdir()
    (tmp_path / ".tmpdir" / "c.h5").write_bytes(b"x")
    granules = list_granules(str(tmp_path))
    assert [g.name for g in granules] == ["a.h5", "sub/b.nc"]
    for g in granules:
        st = os.stat(g.url)
        assert os.path.isabs(g.url) and "://" not in g.url
        assert g.identity.url == g.url
        assert g.identity.size == st.st_size
        assert g.identity.mtime == pytest.approx(st.st_mtime, abs=1e-6)
    everything = list_granules(str(tmp_path), patterns=["*"])
    assert [g.name for g in everything] == ["a.h5", "notes.txt", "sub/b.nc"]


def test_single_file_glob_and_exclude(tmp_path: Path) -> None:
    a = write_granule(tmp_path / "data" / "a.h5")
    write_granule(tmp_path / "data" / "x" / "b.h5")
    write_granule(tmp_path / "data" / "out" / "c.h5")
    single = list_granules(str(a))
    assert [(g.name, g.url) for g in single] == [("a.h5", str(a))]
    # a glob is taken as given (no pattern filter); names are relative to its fixed part
    globbed = list_granules(str(tmp_path / "data" / "**" / "*.h5"))
    assert [g.name for g in globbed] == ["a.h5", "out/c.h5", "x/b.h5"]
    excluded = list_granules(str(tmp_path / "data"), exclude=[str(tmp_path / "data" / "out")])
    assert [g.name for g in excluded] == ["a.h5", "x/b.h5"]
    assert list_granules("file://" + str(a))[0].url == str(a)


def test_missing_or_empty_source_raises(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="neither a file"):
        list_granules(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceNotFoundError, match="--pattern"):
        list_granules(str(tmp_path / "empty"))
    with pytest.raises(SourceNotFoundError):
        list_granules(str(tmp_path / "empty" / "*.h5"))


def test_sidecar_names() -> None:
    assert sidecar_url("/out", "sub/a.h5", "parquet") == "/out/sub/a.h5.parq"
    assert sidecar_url("s3://b/p/", "a.h5", "json") == "s3://b/p/a.h5.json"
    assert normalize_url("rel/x") == os.path.abspath("rel/x")


def test_s3_prefix_listing(tmp_path: Path, s3, s3_bucket: str, s3_storage_options) -> None:
    a = write_granule(tmp_path / "a.h5", n=1000)
    s3.put(str(a), f"{s3_bucket}/in/2019/a.h5")
    s3.put(str(a), f"{s3_bucket}/in/b.h5")
    s3.pipe(f"{s3_bucket}/in/readme.txt", b"x")
    s3.pipe(f"{s3_bucket}/other/c.h5", b"x")
    granules = list_granules(f"s3://{s3_bucket}/in", storage_options=s3_storage_options)
    assert [g.name for g in granules] == ["2019/a.h5", "b.h5"]
    assert granules[0].url == f"s3://{s3_bucket}/in/2019/a.h5"
    info = s3.info(f"{s3_bucket}/in/b.h5")
    ident = granules[1].identity
    assert ident.size == a.stat().st_size == info["size"]
    assert ident.etag == info["ETag"].strip('"') and '"' not in ident.etag
    assert ident.mtime == pytest.approx(info["LastModified"].timestamp())
    globbed = list_granules(f"s3://{s3_bucket}/*/c.h5", storage_options=s3_storage_options)
    assert [g.url for g in globbed] == [f"s3://{s3_bucket}/other/c.h5"]
    with pytest.raises(SourceNotFoundError):
        list_granules(f"s3://{s3_bucket}/missing", storage_options=s3_storage_options)


def test_local_walk_lists_what_fsspec_finds(tmp_path: Path) -> None:
    # the folder is walked with os.scandir (one folder at a time, staged on disk): it must
    # keep what fsspec's find(detail=True) gave, with the same rules applied after it
    src = tmp_path / "src"
    a = write_granule(src / "a.h5")
    write_granule(src / "x" / "y" / "b.nc")
    write_granule(src / "z.h5", seed=3)
    (src / ".dot").mkdir()
    write_granule(src / ".dot" / "hidden.h5")
    (src / "link.h5").symlink_to(a)  # a symlink to a regular file is a granule
    (src / "dangling.h5").symlink_to(src / "nowhere.h5")
    (src / "dirlink.h5").symlink_to(src / "x")  # not entered, not a regular file
    os.mkfifo(src / "pipe.h5")
    write_granule(src / "out" / "c.h5")  # DEST inside SOURCE: never listed
    not_regular: list[str] = []
    got = list_granules(str(src), exclude=[str(src / "out")], not_regular=not_regular)
    fs = fsspec.filesystem("file")
    expected = sorted(
        p for p, info in fs.find(str(src), detail=True).items()
        if p.endswith((".h5", ".nc")) and "/." not in p[len(str(src)):]
        and not p.startswith(str(src / "out") + "/")
        and (info["type"] == "file" or os.path.isfile(p)))
    assert [g.url for g in got] == expected
    assert [g.name for g in got] == ["a.h5", "link.h5", "x/y/b.nc", "z.h5"]
    assert sorted(not_regular) == [str(src / n) for n in ("dangling.h5", "dirlink.h5", "pipe.h5")]
    for g in got:
        st = os.stat(g.url)
        assert (g.identity.size, g.identity.mtime_ns, g.identity.inode, g.identity.ctime_ns) \
            == (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        with h5py.File(g.url) as f, h5py.File(a if g.name == "link.h5" else g.url) as ref:
            assert sorted(f) == sorted(ref)


def test_staged_listing_sorts_by_name_stably_and_keeps_identities() -> None:
    big = 2**64 - 5  # an inode past SQLite's signed 64-bit integers (some network file systems)
    granules = [
        Granule("/b/2", "b", SourceInfo("/b/2", 2, None, 1.5, 15, big, 7, big - 1)),
        Granule("s3://k/a", "a", SourceInfo("s3://k/a", 1, "etag", 2.0)),
        Granule("/b/1", "b", SourceInfo("/b/1", 3, None, None, 10**18, 4, 5, 6)),
    ]
    with StagedListing(iter(granules)) as staged:
        assert len(staged) == 3
        assert list(staged) == [granules[1], granules[0], granules[2]]  # "b"s as added
        assert list(staged.names()) == [("s3://k/a", "a"), ("/b/2", "b"), ("/b/1", "b")]
