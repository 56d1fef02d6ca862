"""The compact Parquet layout: ``.zmetadata`` + one manifests file, read by h5sidecar alone.

Plain fsspec/kerchunk readers must fail on it (not take the absent record files for missing
chunks and return fill values); h5sidecar's reader must read every array from the one file,
whatever its size; switching layouts replaces the sidecar's files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import xarray as xr
import zarr
import zarr.errors
from fsspec.implementations.reference import LazyReferenceMapper
from zarr.storage import FsspecStore

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import (
    GranuleRefs,
    read_layout,
    read_refs,
    write_parquet,
    write_refs,
)
from h5sidecar.references.parquet_sidecar import _parquet_lazy as _lazy
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import (
    CHECKSUMS_FILE,
    ZMETADATA,
    decode_zmetadata,
)
from h5sidecar.references.parquet_sidecar._manifests_file import MANIFESTS_FILE
from h5sidecar.settings import IndexSettings
from tests._granules import atl03_h5, atl03_refs, refs_for, write_small_granule

__all__ = ["atl03_h5", "atl03_refs"]  # fixtures used below


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GranuleRefs]:
    h5 = write_small_granule(tmp_path_factory.mktemp("compact") / "small.h5")
    return h5, refs_for(h5)


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _same_manifests(a: GranuleRefs, b: GranuleRefs) -> None:
    assert list(a.arrays) == list(b.arrays)
    for path, arr in a.arrays.items():
        ma, mb = arr.manifest, b.arrays[path].manifest
        assert ma.urls == mb.urls, path
        np.testing.assert_array_equal(ma.codes, mb.codes, err_msg=path)
        np.testing.assert_array_equal(ma.offsets, mb.offsets, err_msg=path)
        np.testing.assert_array_equal(ma.lengths, mb.lengths, err_msg=path)
        assert dict(ma.inline) == dict(mb.inline), path


def test_compact_sidecar_is_two_objects_three_with_checksums(
    small: tuple[Path, GranuleRefs], tmp_path: Path
) -> None:
    h5, refs = small
    kerchunk = Path(write_parquet(refs, tmp_path / "k.parq"))
    compact = Path(write_parquet(refs, tmp_path / "c.parq", layout="compact"))
    assert _files(compact) == {ZMETADATA, MANIFESTS_FILE}
    assert len(_files(kerchunk)) > 10  # one record file per array with chunks
    summed = refs_for(h5, settings=IndexSettings(checksums=True))
    with_sums = Path(write_parquet(summed, tmp_path / "s.parq", layout="compact"))
    assert _files(with_sums) == {ZMETADATA, MANIFESTS_FILE, CHECKSUMS_FILE}
    assert read_layout(compact) == "compact" and read_layout(kerchunk) == "kerchunk"
    assert read_layout(tmp_path / "nothing.parq") is None
    doc = json.loads((compact / ZMETADATA).read_text())
    assert "record_size" not in doc and doc["h5sidecar"]["layout"] == "compact"
    back = read_refs(with_sums, lazy=False)
    for path, arr in summed.arrays.items():
        if arr.checksums is not None:
            np.testing.assert_array_equal(back.arrays[path].checksums, arr.checksums)


@pytest.mark.parametrize("lazy", [True, False])
def test_compact_reads_the_same_references_as_the_kerchunk_layout(
    atl03_refs: GranuleRefs, tmp_path: Path, lazy: bool
) -> None:
    kerchunk = write_parquet(atl03_refs, tmp_path / "k.parq")
    compact = write_parquet(atl03_refs, tmp_path / "c.parq", layout="compact")
    assert len(_files(Path(compact))) == 2 < len(_files(Path(kerchunk))) // 100
    _same_manifests(read_refs(compact, lazy=lazy), read_refs(kerchunk, lazy=lazy))
    _same_manifests(read_refs(compact, lazy=lazy), atl03_refs)


def test_compact_reads_its_manifests_file_whatever_its_size(
    small: tuple[Path, GranuleRefs], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kerchunk-layout sidecar falls back to record files past BULK_LOAD_BYTES; a compact one
    has none, so it must read the manifests file anyway, once for every array."""
    _, refs = small
    compact = Path(write_parquet(refs, tmp_path / "c.parq", layout="compact"))
    monkeypatch.setattr(_lazy, "BULK_LOAD_BYTES", 0)
    fetched: list[list[str]] = []

    def fetch(rels: list[str]) -> dict[str, bytes | None]:
        fetched.append(list(rels))
        return {r: (compact / r).read_bytes() if (compact / r).exists() else None for r in rels}

    zmeta = decode_zmetadata((compact / ZMETADATA).read_bytes())
    lazy = _lazy.read_parquet_lazy(zmeta, fetch)
    assert lazy is not None
    _same_manifests(lazy, refs)
    assert fetched == [[MANIFESTS_FILE]]


def _plain_chunk(sidecar: str) -> Any:
    fs = fsspec.filesystem("reference", fo=sidecar, remote_protocol="file")
    return fs.cat_file("gt1l/heights/h_ph/0")


def _plain_zarr(sidecar: str) -> Any:
    # pyarrow: fsspec's default Parquet engine (fastparquet) is not a dependency
    fo = LazyReferenceMapper(sidecar, engine="pyarrow")
    so = {"fo": fo, "remote_protocol": "file"}
    store = FsspecStore.from_url("reference://", storage_options=so, read_only=True)
    return zarr.open_group(store, mode="r", zarr_format=2)["gt1l/heights/h_ph"][:]


def test_plain_fsspec_and_kerchunk_fail_on_compact_instead_of_reading_fill_values(
    small: tuple[Path, GranuleRefs], tmp_path: Path
) -> None:
    _, refs = small
    kerchunk = write_parquet(refs, tmp_path / "k.parq")
    compact = write_parquet(refs, tmp_path / "c.parq", layout="compact")
    # the kerchunk layout: plain fsspec reads the chunk (tests/references/test_plain_readers.py
    # compares every value through plain zarr)
    assert len(_plain_chunk(kerchunk)) > 0
    # compact: every key fails (fsspec finds no record_size), so zarr finds no group at all;
    # never a chunk taken for missing (fill values)
    with pytest.raises((KeyError, FileNotFoundError)):
        _plain_chunk(compact)
    with pytest.raises(zarr.errors.GroupNotFoundError):
        _plain_zarr(compact)
    with pytest.raises(KeyError, match="record_size"):  # guessing the protocol reads it
        fsspec.filesystem("reference", fo=compact)
    pytest.importorskip("kerchunk")
    with pytest.raises(KeyError, match="record_size"):
        xr.open_dataset(compact, engine="kerchunk", group="gt1l/heights")
    with pytest.raises(zarr.errors.GroupNotFoundError):
        xr.open_dataset(compact, engine="kerchunk", group="gt1l/heights",
                        storage_options={"remote_protocol": "file"})  # fmt: skip


def test_compact_without_its_manifests_file_is_refused(
    small: tuple[Path, GranuleRefs], tmp_path: Path
) -> None:
    _, refs = small
    compact = Path(write_parquet(refs, tmp_path / "c.parq", layout="compact"))
    (compact / MANIFESTS_FILE).unlink()
    with pytest.raises(InvalidReferenceError, match="missing"):
        read_refs(compact, lazy=False)
    doc = json.loads((compact / ZMETADATA).read_text())
    del doc["h5sidecar"]["manifests"]
    (compact / ZMETADATA).write_text(json.dumps(doc))
    with pytest.raises(InvalidReferenceError, match="does not list"):
        read_refs(compact)
    doc["h5sidecar"]["layout"] = "sharded"
    (compact / ZMETADATA).write_text(json.dumps(doc))
    with pytest.raises(InvalidReferenceError, match="layout 'sharded'"):
        read_refs(compact)


def test_unknown_layout_is_a_value_error(small: tuple[Path, GranuleRefs], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout"):
        write_parquet(small[1], tmp_path / "x.parq", layout="flat")  # type: ignore[arg-type]


def test_layout_switch_on_s3_replaces_every_file(
    small: tuple[Path, GranuleRefs], s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    _, refs = small
    url = f"s3://{s3_bucket}/dest/small.h5.parq"
    opts = dict(s3_storage_options)
    write_refs(refs, url, storage_options=opts)
    s3.invalidate_cache()
    n_kerchunk = len(s3.find(url))
    assert n_kerchunk > 10
    write_refs(refs, url, storage_options=opts, layout="compact")
    s3.invalidate_cache()
    names = {p.rsplit(".parq/", 1)[1] for p in s3.find(url)}
    assert names == {ZMETADATA, MANIFESTS_FILE}  # the record files are gone
    back = read_refs(url, storage_options=opts)
    _same_manifests(back, refs)
    write_refs(refs, url, storage_options=opts, layout="kerchunk")
    s3.invalidate_cache()
    assert len(s3.find(url)) == n_kerchunk
    assert read_layout(url, storage_options=opts) == "kerchunk"


def test_lazily_opened_compact_sidecar_pickles(
    small: tuple[Path, GranuleRefs], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Dask worker unpickles the lazy sidecar and must still read the manifests file (not
    look for record files) even when it is over BULK_LOAD_BYTES."""
    import pickle

    _, refs = small
    compact = write_parquet(refs, tmp_path / "c.parq", layout="compact")
    monkeypatch.setattr(_lazy, "BULK_LOAD_BYTES", 0)
    back = pickle.loads(pickle.dumps(read_refs(compact)))
    _same_manifests(back, refs)
