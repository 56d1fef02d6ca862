"""Atomic sidecar I/O (local and S3), format sniffing, and the package's import layering."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem

from h5sidecar.errors import InvalidReferenceError, NotIndexedError
from h5sidecar.references import (
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    SourceInfo,
    _atomic_local,
    read_refs,
    write_json,
    write_parquet,
    write_refs,
)
from tests.references.test_json import small_refs
from tests.references.test_parquet import refs_with_grid


def _listing(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# -- local JSON -----------------------------------------------------------------------------
def test_json_replaces_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    first, second = refs_with_grid([0] * 4, 4), small_refs()
    dest = tmp_path / "out" / "g.h5.json"
    write_json(first, dest)
    write_json(second, dest)
    assert read_refs(dest) == second
    assert _listing(tmp_path) == ["out/g.h5.json"]


def test_json_failure_keeps_the_old_sidecar(tmp_path: Path) -> None:
    dest = tmp_path / "g.h5.json"
    write_json(small_refs(), dest)
    before = dest.read_bytes()

    def failing() -> Iterator[bytes]:
        yield b'{"version": 1, "refs": {'
        raise RuntimeError("disk went away")

    with pytest.raises(RuntimeError, match="disk went away"):
        _atomic_local.write_local_file(dest, failing())
    assert dest.read_bytes() == before
    assert _listing(tmp_path) == ["g.h5.json"]


def test_json_onto_a_directory_is_refused(tmp_path: Path) -> None:
    write_parquet(small_refs(), tmp_path / "g.h5")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        write_json(small_refs(), tmp_path / "g.h5")


# -- local Parquet --------------------------------------------------------------------------
@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "rename-aside"])
def test_parquet_replaces_whole_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    if not exchange:
        monkeypatch.setattr(_atomic_local, "_exchange", lambda a, b: False)  # the portable path
    dest = tmp_path / "g.h5.parq"
    big = refs_with_grid([0] * 12, 1)
    write_parquet(big, dest, record_size=1)
    assert len(_listing(dest)) == 14  # .zmetadata, the manifests file, 12 record files
    small = small_refs()
    write_parquet(small, dest, record_size=10)
    assert read_refs(dest) == small
    assert _listing(dest) == [
        ".h5sidecar/checksums.parq",
        ".h5sidecar/manifests.parq",
        ".zmetadata",
        "g/v/refs.0.parq",
        "s/refs.0.parq",
    ]
    assert _listing(tmp_path) == [f"g.h5.parq/{p}" for p in _listing(dest)]  # no temp dirs


def test_parquet_failure_keeps_the_old_sidecar(tmp_path: Path) -> None:
    dest = tmp_path / "g.h5.parq"
    write_parquet(small_refs(), dest)
    before = {p: (dest / p).read_bytes() for p in _listing(dest)}

    def failing() -> Iterator[tuple[str, bytes]]:
        yield "v/refs.0.parq", b"partial"
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        _atomic_local.write_local_dir(dest, failing())
    assert {p: (dest / p).read_bytes() for p in _listing(dest)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.h5.parq"]


def test_parquet_refuses_to_replace_foreign_content(tmp_path: Path) -> None:
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not part of a Parquet sidecar"):
        write_parquet(small_refs(), folder)
    assert (folder / "notes.txt").read_text() == "keep me"
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        write_parquet(small_refs(), tmp_path / "a_file")


def test_parquet_replaces_an_interrupted_write(tmp_path: Path) -> None:
    dest = tmp_path / "g.h5.parq"
    (dest / "v").mkdir(parents=True)
    (dest / "v" / "refs.0.parq").write_bytes(b"left over, never committed")
    with pytest.raises(NotIndexedError):  # no .zmetadata: not a sidecar yet
        read_refs(dest)
    write_parquet(small_refs(), dest)
    assert read_refs(dest) == small_refs()
    assert "v/refs.0.parq" not in _listing(dest)


def test_write_refs_dispatch_and_bad_arguments(tmp_path: Path) -> None:
    g = small_refs()
    write_refs(g, tmp_path / "a.json", format="json")
    write_refs(g, tmp_path / "a.parq")
    assert (tmp_path / "a.json").is_file() and (tmp_path / "a.parq" / ".zmetadata").is_file()
    with pytest.raises(ValueError, match="format must be"):
        write_refs(g, tmp_path / "a.x", format="yaml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="record_size"):
        write_parquet(g, tmp_path / "b.parq", record_size=0)


# -- reading / sniffing ---------------------------------------------------------------------
def test_read_refs_sniffs_the_format(tmp_path: Path) -> None:
    g = small_refs()
    write_json(g, tmp_path / "no_suffix")
    write_parquet(g, tmp_path / "dir.json")  # a misleading name still reads as Parquet
    assert read_refs(tmp_path / "no_suffix") == g
    assert read_refs(tmp_path / "dir.json") == g
    assert read_refs(f"file://{tmp_path}/no_suffix") == g


def test_read_refs_missing_and_garbage(tmp_path: Path) -> None:
    with pytest.raises(NotIndexedError, match="no sidecar at") as info:
        read_refs(tmp_path / "absent.json")
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(NotIndexedError):
        read_refs(tmp_path / "empty_dir")
    (tmp_path / "garbage.json").write_bytes(b"\x89PNG not json")
    with pytest.raises(InvalidReferenceError, match="not valid JSON"):
        read_refs(tmp_path / "garbage.json")


# -- S3 -------------------------------------------------------------------------------------
def test_s3_roundtrip_and_overwrite(
    s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    g = small_refs()
    so = s3_storage_options
    write_json(g, f"s3://{s3_bucket}/g.h5.json", storage_options=so)
    assert read_refs(f"s3://{s3_bucket}/g.h5.json", storage_options=so) == g
    dest = f"s3://{s3_bucket}/g.h5.parq"
    big = refs_with_grid([0] * 6, 1)
    write_parquet(big, dest, storage_options=so, record_size=1)
    assert read_refs(dest, storage_options=so) == big
    write_parquet(g, dest, storage_options=so, record_size=10)
    assert read_refs(dest, storage_options=so) == g
    s3.invalidate_cache()
    assert sorted(p.split(".parq/", 1)[1] for p in s3.find(f"{s3_bucket}/g.h5.parq")) == [
        ".h5sidecar/checksums.parq",
        ".h5sidecar/manifests.parq",
        ".zmetadata",
        "g/v/refs.0.parq",
        "s/refs.0.parq",
    ]  # the old v/refs.N.parq objects are gone
    with pytest.raises(NotIndexedError):
        read_refs(f"s3://{s3_bucket}/absent.parq", storage_options=so)


def test_s3_refuses_foreign_prefix(
    s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    s3.pipe_file(f"{s3_bucket}/data/granule.h5", b"not ours")
    with pytest.raises(FileExistsError, match="not part of a Parquet sidecar"):
        write_parquet(small_refs(), f"s3://{s3_bucket}/data", storage_options=s3_storage_options)
    assert s3.cat_file(f"{s3_bucket}/data/granule.h5") == b"not ours"


class _LoggingMemoryFS(MemoryFileSystem):
    """An in-memory object store that records, for every PUT, whether .zmetadata existed."""

    protocol = "h5sidecar-test-mem"
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    log: ClassVar[list[tuple[str, bool]]] = []

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        return super()._strip_protocol(str(path).removeprefix(f"{cls.protocol}://"))

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        root = path.split(".parq/", 1)[0] + ".parq"
        self.log.append((path.rsplit("/", 1)[-1], self.exists(f"{root}/.zmetadata")))
        super().pipe_file(path, value, *args, **kwargs)


def test_remote_parquet_commits_zmetadata_last() -> None:
    fsspec.register_implementation(_LoggingMemoryFS.protocol, _LoggingMemoryFS, clobber=True)
    dest = f"{_LoggingMemoryFS.protocol}://bucket/g.h5.parq"
    write_parquet(refs_with_grid([0] * 6, 1), dest, record_size=1)
    _LoggingMemoryFS.log.clear()
    write_parquet(small_refs(), dest, record_size=2)  # an overwrite
    names = [name for name, _ in _LoggingMemoryFS.log]
    assert names[-1] == ".zmetadata" and names.count(".zmetadata") == 1
    # while record files are uploaded no .zmetadata exists: readers never see a mixture
    assert not any(had_marker for name, had_marker in _LoggingMemoryFS.log[:-1])
    assert read_refs(dest) == small_refs()


# -- awkward content ------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_glob_characters_and_numpy_attributes(tmp_path: Path, fmt: str) -> None:
    name = "odd [group]*/data?[0]"
    manifest = ChunkManifest.from_arrays(
        urls=["/data/g.h5"], codes=np.zeros(2), offsets=np.array([0, 8]), lengths=np.array([8, 8])
    )
    attrs = {"scale": np.float32(0.5), "flags": np.array([1, 2], dtype=np.int8)}
    meta = ArrayMeta(shape=(4,), chunks=(2,), dtype="<i4", dimension_names=("x",), attrs=attrs)
    g = GranuleRefs(SourceInfo("/data/g.h5", 16), {}, {name: ArrayRefs(name, meta, manifest)})
    dest = write_refs(g, tmp_path / f"g.{fmt}", format=fmt)  # type: ignore[arg-type]
    back = read_refs(dest)
    assert back.arrays[name].manifest == manifest
    assert dict(back.arrays[name].meta.attrs) == {"scale": 0.5, "flags": [1, 2]}


def test_unserialisable_attributes_say_what_to_do(tmp_path: Path) -> None:
    meta = ArrayMeta(shape=(2,), chunks=(2,), dtype="<i4", attrs={"when": object()})
    arr = ArrayRefs("v", meta, ChunkManifest.empty((1,)))
    with pytest.raises(TypeError, match="must hold JSON values"):
        write_json(GranuleRefs(SourceInfo("u", 1), {}, {"v": arr}), tmp_path / "g.json")
    assert not list(tmp_path.iterdir())  # nothing half-written
