"""zarr's ``async.concurrency`` is the user's to set: SidecarStore leaves it alone, and a wider
setting (the README's one explicit call) lets the store coalesce more chunks per request."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr

from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs
from tests._granules import read_h5, refs_for

ZARR_DEFAULT = 10
#: the value the README suggests: zarr.config.set({"async.concurrency": 128})
SUGGESTED = 128


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZARR_ASYNC__CONCURRENCY", raising=False)


def test_default_is_left_alone(small_refs: GranuleRefs) -> None:
    with zarr.config.set({"async.concurrency": ZARR_DEFAULT}):
        SidecarStore(small_refs, chunk_cache=None)
        SidecarStore(small_refs, chunk_cache=None, zarr_format=3)
        assert zarr.config.get("async.concurrency") == ZARR_DEFAULT


def test_user_choice_is_kept(small_refs: GranuleRefs) -> None:
    with zarr.config.set({"async.concurrency": 7}):
        SidecarStore(small_refs, chunk_cache=None)
        assert zarr.config.get("async.concurrency") == 7


@pytest.fixture(scope="module")
def many_chunks_h5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One gzip-compressed array of 64 chunks, written contiguously (they coalesce)."""
    path = tmp_path_factory.mktemp("conc") / "many_chunks.h5"
    values = np.random.default_rng(5).normal(size=640_000)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=values, chunks=(10_000,), compression="gzip")
    return path


def _read(refs: GranuleRefs, path: str, concurrency: int) -> tuple[np.ndarray, int]:
    with zarr.config.set({"async.concurrency": concurrency}):
        store = SidecarStore(refs, chunk_cache=None)
        data = zarr.open_group(store, mode="r", zarr_format=2)[path][...]
    return data, store.stats["requests"]


def test_raised_concurrency_reads_the_same_in_fewer_requests(many_chunks_h5: Path) -> None:
    refs = refs_for(many_chunks_h5)
    want = read_h5(many_chunks_h5, "x")
    wide, wide_requests = _read(refs, "x", SUGGESTED)
    narrow, narrow_requests = _read(refs, "x", ZARR_DEFAULT)
    np.testing.assert_array_equal(wide, want)
    np.testing.assert_array_equal(narrow, want)
    # zarr hands the store <= concurrency chunks at a time: wider batches coalesce more
    assert wide_requests < narrow_requests, (wide_requests, narrow_requests)
