"""Unit tests of the columnar ChunkManifest and the model records."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import (
    INLINE,
    MISSING,
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    SourceInfo,
    chunk_grid_shape,
)


def _manifest() -> ChunkManifest:
    codes = np.array([[0, MISSING], [INLINE, 0]])
    offsets = np.array([[100, 0], [0, 300]])
    lengths = np.array([[50, 0], [0, 70]])
    return ChunkManifest.from_arrays(
        urls=["s3://b/g.h5"], codes=codes, offsets=offsets, lengths=lengths, inline={2: b"abc"}
    )


def test_manifest_counts_and_lookup() -> None:
    m = _manifest()
    assert m.grid_shape == (2, 2)
    assert (m.n_stored, m.n_inline, m.n_missing) == (2, 1, 1)
    assert m.stored_bytes == 120
    assert m.get((0, 0)) == ("s3://b/g.h5", 100, 50)
    assert m.get((0, 1)) is None
    assert m.get((1, 0)) == b"abc"
    assert dict(m.iter_refs())[(1, 1)] == ("s3://b/g.h5", 300, 70)


def test_manifest_is_immutable_and_pickles() -> None:
    m = _manifest()
    with pytest.raises(ValueError, match="read-only"):
        m.offsets[0, 0] = 1
    assert pickle.loads(pickle.dumps(m)) == m


@pytest.mark.parametrize(
    ("codes", "inline", "match"),
    [
        (np.array([1]), {}, "codes must lie"),
        (np.array([INLINE]), {}, "disagree"),
        (np.array([0]), {0: b"x"}, "disagree"),
    ],
)
def test_manifest_validation(codes: np.ndarray, inline: dict[int, bytes], match: str) -> None:
    with pytest.raises(InvalidReferenceError, match=match):
        ChunkManifest.from_arrays(
            urls=["u"], codes=codes, offsets=np.zeros(1), lengths=np.ones(1), inline=inline
        )


def test_grid_shape_edges() -> None:
    assert chunk_grid_shape((10, 0, 7), (5, 1, 3)) == (2, 0, 3)
    assert chunk_grid_shape((), ()) == ()
    with pytest.raises(InvalidReferenceError):
        chunk_grid_shape((4,), (0,))


def test_arrayrefs_rejects_grid_mismatch() -> None:
    meta = ArrayMeta(shape=(10,), chunks=(3,), dtype="<i4", dimension_names=("x",))
    with pytest.raises(InvalidReferenceError, match="does not match"):
        ArrayRefs("v", meta, ChunkManifest.empty((3,)))


def test_zarray_fill_value_policy() -> None:
    meta = ArrayMeta(shape=(4,), chunks=(2,), dtype="<i4", fill_value=-9, dimension_names=("x",))
    full = ChunkManifest.from_arrays(
        urls=["u"], codes=np.zeros(2), offsets=np.array([0, 8]), lengths=np.array([8, 8])
    )
    # every chunk allocated, no _FillValue attribute: don't make xarray mask -9
    assert ArrayRefs("v", meta, full).zarray_fill_value() is None
    # a missing chunk must read as -9
    assert ArrayRefs("v", meta, ChunkManifest.empty((2,), ("u",))).zarray_fill_value() == -9
    with_attr = ArrayMeta(
        shape=(4,), chunks=(2,), dtype="<i4", fill_value=-9, attrs={"_FillValue": -9},
        dimension_names=("x",),
    )
    assert ArrayRefs("v", with_attr, full).zarray_fill_value() == -9


def test_granule_fills_in_ancestor_groups() -> None:
    meta = ArrayMeta(shape=(), chunks=(), dtype="<f8")
    arr = ArrayRefs("a/b/c", meta, ChunkManifest.empty(()))
    g = GranuleRefs(SourceInfo("u", 1), {"": {"title": "t"}}, {"a/b/c": arr})
    assert set(g.groups) == {"", "a", "a/b"}
    zmeta = g.zmetadata()
    assert zmeta[".zattrs"] == {"title": "t"}
    assert zmeta["a/b/c/.zattrs"] == {"_ARRAY_DIMENSIONS": []}


def test_source_identity() -> None:
    a = SourceInfo("s3://b/k", 10, etag="abc", mtime=5.0)
    assert a.same_object(SourceInfo("s3://b/k", 10, etag="abc", mtime=9.0))
    assert not a.same_object(SourceInfo("s3://b/k", 10, etag="abd"))
    assert not a.same_object(SourceInfo("s3://b/k", 11, etag="abc"))
    assert SourceInfo.from_dict(a.to_dict()) == a
    with pytest.raises(InvalidReferenceError):
        SourceInfo.from_dict({"url": "x"})


def test_dask_token_is_cheap_and_tracks_the_source() -> None:
    from dask.base import tokenize

    meta = ArrayMeta(shape=(4,), chunks=(2,), dtype="<i4", dimension_names=("x",))
    arr = ArrayRefs("v", meta, ChunkManifest.empty((2,), ("u",)))
    a = GranuleRefs(SourceInfo("u", 8, etag="e1"), {}, {"v": arr})
    same = GranuleRefs(SourceInfo("u", 8, etag="e1"), {}, {"v": arr})
    changed = GranuleRefs(SourceInfo("u", 8, etag="e2"), {}, {"v": arr})
    other_meta = ArrayMeta(shape=(4,), chunks=(2,), dtype="<f4", dimension_names=("x",))
    retyped = GranuleRefs(
        SourceInfo("u", 8, etag="e1"), {}, {"v": ArrayRefs("v", other_meta, arr.manifest)}
    )
    assert tokenize(a) == tokenize(same)
    assert tokenize(a) != tokenize(changed)
    assert tokenize(a) != tokenize(retyped)
