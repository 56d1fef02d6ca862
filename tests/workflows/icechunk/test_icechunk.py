"""Sidecar references written into Icechunk repositories (``write_icechunk``).

Every value read back through icechunk + zarr / xarray is compared with h5py (raw) and with
xarray + h5netcdf on the file (CF-decoded); a replaced source must raise, never read.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  (filters for the h5py oracle)
import numpy as np
import pytest
import xarray as xr
import zarr

from h5sidecar.errors import ErrorKind, InvalidReferenceError, UnsupportedFeatureError
from h5sidecar.indexer import index_granule
from h5sidecar.references import GranuleRefs, Skipped, read_refs, write_json, write_parquet
from h5sidecar.sample import write_atl03_like, write_netcdf_like
from h5sidecar.workflows import open_icechunk, write_icechunk
from h5sidecar.workflows.checks._dimcheck import outer_lengths
from h5sidecar.workflows.icechunk._icechunk_repo import container_prefixes
from tests._matrix import Tally, compare_group, groups_of, truth
from tests.indexer._compare import h5_dataset, h5_read

icechunk = pytest.importorskip("icechunk")

# zarr flags the numcodecs codecs of HDF5 filters as outside the Zarr v3 spec (they are ours)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Numcodecs codecs are not in the Zarr version 3 specification"
)

#: A few diverse corpus files: CF packing, groups, bounds, L2P swaths, external raw data,
#: compound (left out), enums.
CORPUS_FILES = (
    "fsspec__kerchunk/tests/air.nc",
    "NCAS-CMS__pyfive/data/h5netcdf_test.hdf5",
    "nasa__harmony-opendap-subsetter/data/GPM_3IMERGHH_bounds.nc4",
    "podaac__l2ss-py/cut/SS_VIIRS_NPP-NAVO-L2P-v3.0.nc",
    "nasa__harmony-opendap-subsetter/data/ABoVE_TVPRM_bbox.nc4",
    "wrwilliams__hdf5/testfiles/h5repack_ext.h5",
    "jamesmudd__jhdf/hdf5/compound_datasets_latest.hdf5",
    "jamesmudd__jhdf/hdf5/test_enum_datasets_latest.hdf5",
)


def _netcdf(path: Path, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_netcdf_like(path, seed=seed)


def _store(repo: Any, snapshot: str | None = None) -> Any:
    if snapshot is not None:
        return repo.readonly_session(snapshot_id=snapshot).store
    return repo.readonly_session("main").store


def _as_text(a: np.ndarray) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in a.ravel().tolist()]


def assert_raw_equal(refs: GranuleRefs, source: Path, store: Any, left_out: list[Skipped]) -> int:
    """Every written array equals what h5py reads from the file; returns how many were read."""
    out = {s.path for s in left_out}
    root = zarr.open_group(store, mode="r")
    n = 0
    with h5py.File(source, "r") as f:
        for path in refs.arrays:
            if path in out:
                assert path not in root, f"{path} was left out but is in the repository"
                continue
            got, want = np.asarray(root[path][...]), np.asarray(h5_read(h5_dataset(f, path)))
            assert got.shape == want.shape, path
            if got.dtype.kind in "OTUS" or want.dtype.kind in "OUS":
                assert _as_text(got) == _as_text(want), path
            else:
                assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"), path
            n += 1
    return n


def assert_decoded_equal(
    refs: GranuleRefs, source: Path, store: Any, left_out: list[Skipped]
) -> Tally:
    """Every group, CF-decoded by xarray from the repository, equals xarray + h5netcdf.

    Variables skipped by the indexer or left out of the repository may be absent, no other.
    """
    tally = Tally()
    absent = [p for p, status, _ in refs.iter_variables() if status == "skipped"]
    skipped = {p.rpartition("/")[2] for p in [*absent, *(s.path for s in left_out)]}

    def opener(group: str) -> Any:
        return lambda: xr.open_zarr(store, group=group or None, consolidated=False)

    truths = [(g, truth(source, g)) for g in groups_of(source)]
    for group, pair in truths:
        if pair is not None:
            # the one renaming allowed: a name with another length in an ancestor group
            lengths = outer_lengths({g: p[0] for g, p in truths if p is not None}, group)
            compare_group(opener(group), pair, f"{source.name}/{group}", tally, skipped,
                          lengths=lengths)  # fmt: skip
    assert not tally.differ, tally.differ
    return tally


def _write(refs: GranuleRefs, repo: Path, **kw: Any) -> tuple[str, list[Skipped]]:
    left_out: list[Skipped] = []
    return write_icechunk(refs, repo, left_out=left_out, **kw), left_out


# -- samples --------------------------------------------------------------------------------------
def test_netcdf_sample_round_trips_raw_and_decoded(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "src" / "grid.nc")
    refs = index_granule(str(src))
    snapshot, left_out = _write(refs, tmp_path / "repo")
    assert left_out == [] and isinstance(snapshot, str)
    repo = open_icechunk(tmp_path / "repo")
    store = _store(repo)
    assert assert_raw_equal(refs, src, store, left_out) == len(refs.arrays)
    tally = assert_decoded_equal(refs, src, store, left_out)
    assert tally.counts["equal"] + tally.counts["widened"] >= len(refs.arrays)
    assert tally.counts["refused"] == 0, tally.refused
    ds = xr.open_zarr(store, consolidated=False)
    assert ds["pr"].attrs["units"] and ds["pr"].dims == ("time", "lat", "lon")
    # one container, exactly the source's directory
    assert set(repo.config.virtual_chunk_containers) == {f"{(tmp_path / 'src').as_uri()}/"}


@pytest.mark.slow
def test_atl03_sample_round_trips(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    src = write_atl03_like(tmp_path / "src" / "atl03.h5", photons=3000)
    refs = index_granule(str(src))
    _, left_out = _write(refs, tmp_path / "repo")
    store = _store(open_icechunk(tmp_path / "repo"))
    assert assert_raw_equal(refs, src, store, left_out) >= len(refs.arrays) - len(left_out) > 50
    assert_decoded_equal(refs, src, store, left_out)


@pytest.mark.parametrize("name", CORPUS_FILES)
def test_corpus_files_round_trip(tmp_path: Path, corpus_dir: Path, name: str) -> None:
    src = corpus_dir / "files" / name
    refs = index_granule(str(src))
    _, left_out = _write(refs, tmp_path / "repo")
    for s in left_out:
        assert s.kind == ErrorKind.UNSUPPORTED_DTYPE and "structured" in s.reason
        assert isinstance(refs.arrays[s.path].meta.dtype, list)
    store = _store(open_icechunk(tmp_path / "repo"))
    assert_raw_equal(refs, src, store, left_out)
    assert_decoded_equal(refs, src, store, left_out)


def test_compound_arrays_are_left_out_with_a_record(tmp_path: Path, corpus_dir: Path) -> None:
    src = corpus_dir / "files" / "jamesmudd__jhdf/hdf5/compound_datasets_latest.hdf5"
    refs = index_granule(str(src))
    compound = sorted(p for p, a in refs.arrays.items() if isinstance(a.meta.dtype, list))
    assert compound
    snapshot, left_out = _write(refs, tmp_path / "repo")
    assert sorted(s.path for s in left_out) == compound
    repo = open_icechunk(tmp_path / "repo")
    root = zarr.open_group(_store(repo), mode="r")
    assert not any(p in root for p in compound)
    # the record travels with the commit
    (info,) = [s for s in repo.ancestry(branch="main") if s.id == snapshot]
    assert sorted(d["path"] for d in info.metadata["h5sidecar"]["left_out"]) == compound


# -- safety ---------------------------------------------------------------------------------------
def test_replaced_source_raises_instead_of_reading(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "src" / "grid.nc")
    refs = index_granule(str(src))
    _write(refs, tmp_path / "repo")
    store = _store(open_icechunk(tmp_path / "repo"))
    before = np.asarray(zarr.open_group(store, mode="r")["pr"][...])
    # the same path, other bytes of the same size (a re-processed granule); its mtime is later
    # than the indexed one by more than Icechunk's one-second resolution
    _netcdf(tmp_path / "other.nc", seed=1)
    shutil.copyfile(tmp_path / "other.nc", src)
    st = os.stat(src)
    os.utime(src, ns=(st.st_atime_ns, refs.source.mtime_ns + 2_000_000_000))
    fresh = zarr.open_group(_store(open_icechunk(tmp_path / "repo")), mode="r")
    with pytest.raises(icechunk.IcechunkError, match="checksum"):
        fresh["pr"][...]
    with h5py.File(src) as f:
        assert not np.array_equal(f["pr"][()], before)  # reading it would have been wrong


def test_unauthorized_or_outside_container_is_refused(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "src" / "grid.nc")
    refs = index_granule(str(src))
    _write(refs, tmp_path / "repo")
    storage = icechunk.local_filesystem_storage(str(tmp_path / "repo"))
    # a reader that does not authorize the container cannot read virtual chunks
    plain = icechunk.Repository.open(storage)
    with pytest.raises(icechunk.IcechunkError):
        zarr.open_group(_store(plain), mode="r")["pr"][...]
    # a reference outside the source prefix is refused when written
    outside = _netcdf(tmp_path / "elsewhere" / "x.nc")
    session = open_icechunk(tmp_path / "repo").writable_session("main")
    with pytest.raises(icechunk.IcechunkError):
        session.store.set_virtual_ref("pr/c/0/0/0", outside.as_uri(), offset=0, length=8)


def test_an_existing_repository_gains_a_container_for_new_sources(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "a" / "grid.nc")
    refs = index_granule(str(src))
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(
        f"{(tmp_path / 'a').as_uri()}/", icechunk.local_filesystem_store(str(tmp_path / "a"))))
    repo = icechunk.Repository.create(
        icechunk.local_filesystem_storage(str(tmp_path / "repo")), config=config)
    moved = _netcdf(tmp_path / "b" / "grid.nc")
    arr = refs.arrays["pr"]
    bad = GranuleRefs(refs.source, refs.groups,
                      {"pr": type(arr)(arr.path, arr.meta, arr.manifest.with_urls((str(moved),)))},
                      extra=refs.extra)  # fmt: skip
    # the writer adds a container for the new prefix; an explicit foreign Repository keeps its
    # own containers and gets the new one saved in its config
    write_icechunk(bad, repo, sources={str(moved): index_granule(str(moved)).source})
    again = open_icechunk(tmp_path / "repo")
    assert set(again.config.virtual_chunk_containers) == {
        f"{(tmp_path / 'a').as_uri()}/", f"{(tmp_path / 'b').as_uri()}/"}


def test_container_prefixes_are_tight() -> None:
    assert container_prefixes(["s3://b/x/2024/a.h5", "s3://b/x/2025/b.h5", "s3://c/k.h5"]) == [
        "s3://b/x/", "s3://c/"]
    assert container_prefixes(["file:///d/g/a.nc", "file:///d/g/b.nc"]) == ["file:///d/g/"]


def test_source_without_identity_is_refused(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "src" / "grid.nc")
    refs = index_granule(str(src))
    first = write_icechunk(refs, tmp_path / "repo")
    bare = type(refs.source)(url=refs.source.url, size=refs.source.size)
    with pytest.raises(InvalidReferenceError, match="neither an ETag nor a modification time"):
        write_icechunk(refs, tmp_path / "repo", sources={refs.source.url: bare})
    assert open_icechunk(tmp_path / "repo").lookup_branch("main") == first  # nothing committed


# -- history --------------------------------------------------------------------------------------
def test_second_write_is_a_new_commit_with_time_travel(tmp_path: Path) -> None:
    one = _netcdf(tmp_path / "src" / "one.nc", seed=0)
    two = _netcdf(tmp_path / "src" / "two.nc", seed=1)
    first = write_icechunk(index_granule(str(one)), tmp_path / "repo", message="day one")
    second = write_icechunk(index_granule(str(two)), tmp_path / "repo", message="day two")
    repo = open_icechunk(tmp_path / "repo")
    history = [(s.id, s.message) for s in repo.ancestry(branch="main")]
    assert history[:2] == [(second, "day two"), (first, "day one")]
    with h5py.File(one) as f1, h5py.File(two) as f2:
        old = zarr.open_group(_store(repo, first), mode="r")["pr"][...]
        new = zarr.open_group(_store(repo), mode="r")["pr"][...]
        np.testing.assert_array_equal(old, f1["pr"][()])
        np.testing.assert_array_equal(new, f2["pr"][()])
        assert not np.array_equal(old, new)


def test_other_branch(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "src" / "grid.nc")
    refs = index_granule(str(src))
    main = write_icechunk(refs, tmp_path / "repo")
    dev = write_icechunk(refs, tmp_path / "repo", branch="dev")
    repo = open_icechunk(tmp_path / "repo")
    assert repo.lookup_branch("main") == main and repo.lookup_branch("dev") == dev != main


# -- S3 -------------------------------------------------------------------------------------------
def test_s3_sources_and_repository(
    tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    src = _netcdf(tmp_path / "grid.nc")
    s3.put(str(src), f"{s3_bucket}/data/2024/grid.nc")
    refs = index_granule(f"s3://{s3_bucket}/data/2024/grid.nc", storage_options=s3_storage_options)
    assert refs.source.etag
    repo_url = f"s3://{s3_bucket}/cubes/grid.icechunk"
    _, left_out = _write(refs, repo_url, storage_options=s3_storage_options)  # type: ignore[arg-type]
    repo = open_icechunk(repo_url, storage_options=s3_storage_options)
    assert set(repo.config.virtual_chunk_containers) == {f"s3://{s3_bucket}/data/2024/"}
    store = _store(repo)
    assert assert_raw_equal(refs, src, store, left_out) == len(refs.arrays)
    assert_decoded_equal(refs, src, store, left_out)
    # replaced object: another ETag -> Icechunk refuses the chunk
    _netcdf(tmp_path / "other.nc", seed=1)
    s3.put(str(tmp_path / "other.nc"), f"{s3_bucket}/data/2024/grid.nc")
    fresh = _store(open_icechunk(repo_url, storage_options=s3_storage_options))
    with pytest.raises(icechunk.IcechunkError, match="checksum"):
        zarr.open_group(fresh, mode="r")["pr"][...]


def test_a_rewrite_drops_arrays_no_longer_referenced(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "src" / "grid.nc")
    refs = index_granule(str(src))
    first = write_icechunk(refs, tmp_path / "repo")
    only_pr = GranuleRefs(refs.source, refs.groups, {"pr": refs.arrays["pr"]}, extra=refs.extra)
    write_icechunk(only_pr, tmp_path / "repo")
    repo = open_icechunk(tmp_path / "repo")
    now = zarr.open_group(_store(repo), mode="r")
    assert sorted(now.array_keys()) == ["pr"]
    assert "tas" in zarr.open_group(_store(repo, first), mode="r")  # history keeps it


def test_paths_needing_percent_encoding_are_refused(tmp_path: Path) -> None:
    src = _netcdf(tmp_path / "with space" / "grid.nc")
    with pytest.raises(UnsupportedFeatureError, match="percent-encoding"):
        write_icechunk(index_granule(str(src)), tmp_path / "repo")


def test_non_finite_attributes_are_spelled_as_zarr_v3_strings(tmp_path: Path) -> None:
    # icechunk refuses the bare NaN of non-strict JSON ("bad metadata")
    src = tmp_path / "src" / "nan.h5"
    src.parent.mkdir()
    with h5py.File(src, "w") as f:
        f.attrs["offset"] = np.nan
        d = f.create_dataset("x", data=np.arange(6.0), chunks=(2,))
        d.attrs["valid_max"] = np.inf
        d.attrs["bounds"] = np.array([-np.inf, 1.5])
    refs = index_granule(str(src))
    _, left_out = _write(refs, tmp_path / "repo")
    store = _store(open_icechunk(tmp_path / "repo"))
    assert assert_raw_equal(refs, src, store, left_out) == 1
    root = zarr.open_group(store, mode="r")
    assert root.attrs["offset"] == "NaN"
    assert root["x"].attrs["valid_max"] == "Infinity"
    assert root["x"].attrs["bounds"] == ["-Infinity", 1.5]


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_from_a_persisted_sidecar(tmp_path: Path, fmt: str) -> None:
    # what `cube --format icechunk` starts from: sidecars read back (Parquet arrays load lazily)
    (tmp_path / "src").mkdir()
    src = write_atl03_like(tmp_path / "src" / "atl03.h5", photons=2000)
    indexed = index_granule(str(src))
    write = write_parquet if fmt == "parquet" else write_json
    refs = read_refs(write(indexed, tmp_path / f"atl03.h5.{fmt}"))
    _, left_out = _write(refs, tmp_path / "repo")
    store = _store(open_icechunk(tmp_path / "repo"))
    assert assert_raw_equal(refs, src, store, left_out) == len(refs.arrays) - len(left_out)
