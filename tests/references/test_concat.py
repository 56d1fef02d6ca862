"""concat_refs: columnar concatenation never changes which bytes a chunk reads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5sidecar.errors import IncompatibleGranulesError, InvalidReferenceError
from h5sidecar.references import (
    INLINE,
    MISSING,
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    SourceInfo,
    concat_refs,
    inline_array,
    read_refs,
    slice_refs,
    write_json,
    write_parquet,
)

CHUNK = (2, 3)


def _part(rng: np.random.Generator, i: int, steps: int, *, urls: int = 1) -> GranuleRefs:
    """A granule with ``time``-dependent ``v`` (random stored/missing/inline chunks) and ``lat``."""
    src = SourceInfo(url=f"s3://bucket/day{i}.h5", size=10**6, etag=f"e{i}")
    url_list = (src.url, *(f"s3://bucket/day{i}.ext{k}" for k in range(1, urls)))
    grid = (-(-steps // CHUNK[0]), 2)
    codes = rng.integers(-2, len(url_list), size=grid).astype(np.int32)
    offsets = rng.integers(0, 10**5, size=grid).astype(np.uint64)
    lengths = rng.integers(1, 1000, size=grid).astype(np.uint64)
    flat = np.flatnonzero(codes.reshape(-1) == INLINE)
    inline = {int(k): f"day{i}-chunk{k}".encode() for k in flat}
    man = ChunkManifest.from_arrays(urls=url_list, codes=codes, offsets=offsets,
                                    lengths=lengths, inline=inline)
    meta = ArrayMeta(shape=(steps, 5), chunks=CHUNK, dtype="<i2", fill_value=-1,
                     dimension_names=("time", "x"), attrs={"scale_factor": 0.5})
    lat_meta = ArrayMeta(shape=(5,), chunks=(5,), dtype="<f4", dimension_names=("x",))
    lat = ArrayRefs("lat", lat_meta, ChunkManifest.from_arrays(
        urls=(src.url,), codes=np.zeros(1, np.int32), offsets=np.array([7], np.uint64),
        lengths=np.array([20], np.uint64)))
    return GranuleRefs(src, {"": {"title": f"day {i}"}}, {
        "v": ArrayRefs("v", meta, man), "lat": lat})


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 5), last=st.integers(1, 6),
       urls=st.integers(1, 3))
def test_concat_never_changes_bytes(seed: int, n: int, last: int, urls: int) -> None:
    rng = np.random.default_rng(seed)
    steps = [2 * int(rng.integers(1, 4)) for _ in range(n - 1)] + [last]
    parts = [_part(rng, i, s, urls=urls) for i, s in enumerate(steps)]
    cube = concat_refs(parts, "time")
    v = cube.arrays["v"]
    assert v.meta.shape == (sum(steps), 5)
    assert cube.arrays["lat"] == parts[0].arrays["lat"]
    assert [m.url for m in cube.members] == [p.source.url for p in parts]
    row = 0
    for part in parts:
        pm = part.arrays["v"].manifest
        for idx in np.ndindex(pm.grid_shape):
            assert v.manifest.get((row + idx[0], idx[1])) == pm.get(idx)
        row += pm.grid_shape[0]
    assert row == v.manifest.grid_shape[0]


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_members_round_trip(tmp_path, fmt: str) -> None:
    rng = np.random.default_rng(1)
    cube = concat_refs([_part(rng, i, 4) for i in range(3)], "time")
    dest = tmp_path / f"cube.{fmt}"
    (write_json if fmt == "json" else write_parquet)(cube, dest)
    back = read_refs(dest)
    assert back.members == cube.members
    assert back.identity_of("s3://bucket/day2.h5").etag == "e2"
    assert back.arrays["v"].manifest == cube.arrays["v"].manifest


def test_partial_chunk_before_the_end_is_refused() -> None:
    rng = np.random.default_rng(2)
    parts = [_part(rng, 0, 4), _part(rng, 1, 3), _part(rng, 2, 4)]
    with pytest.raises(IncompatibleGranulesError, match=r"v in s3://bucket/day1.h5 has 3 values"):
        concat_refs(parts, "time")
    concat_refs(parts[:2], "time")  # the partial granule may come last


def test_differently_stored_variable_is_refused() -> None:
    rng = np.random.default_rng(3)
    a, b = _part(rng, 0, 4), _part(rng, 1, 4)
    arr = b.arrays["v"]
    other = ArrayMeta(shape=arr.meta.shape, chunks=arr.meta.chunks, dtype="<i4",
                      fill_value=-1, dimension_names=("time", "x"))
    b2 = GranuleRefs(b.source, b.groups, {**b.arrays, "v": ArrayRefs("v", other, arr.manifest)})
    with pytest.raises(IncompatibleGranulesError, match=r"day1.h5.*dtype: '<i2' vs '<i4'"):
        concat_refs([a, b2], "time")
    lat = b.arrays["lat"]
    moved = ArrayRefs("lat", lat.meta, lat.manifest.with_urls(("s3://elsewhere/x.h5",)))
    b3 = GranuleRefs(b.source, b.groups, {**b.arrays, "lat": moved})
    assert concat_refs([a, b3], "time").arrays["lat"] == a.arrays["lat"]  # first part's
    meta = ArrayMeta(shape=(5,), chunks=(5,), dtype="<f8", dimension_names=("x",))
    b4 = GranuleRefs(b.source, b.groups, {**b.arrays, "lat": ArrayRefs("lat", meta, lat.manifest)})
    with pytest.raises(IncompatibleGranulesError, match=r"lat has no 'time' dimension"):
        concat_refs([a, b4], "time")


def test_conflicting_member_identities_are_refused() -> None:
    rng = np.random.default_rng(4)
    a = _part(rng, 0, 4)
    b = _part(rng, 1, 4)
    stale = GranuleRefs(SourceInfo(a.source.url, 5), b.groups, b.arrays)
    with pytest.raises(IncompatibleGranulesError, match="stale"):
        concat_refs([a, stale], "time")


def test_inline_array_holds_values() -> None:
    rng = np.random.default_rng(5)
    arr = _part(rng, 0, 4).arrays["v"]
    values = np.arange(20, dtype="<i2").reshape(4, 5)
    held = inline_array(arr, values)
    assert held.manifest.n_inline == 1 and held.manifest.n_stored == 0
    assert held.meta.attrs == arr.meta.attrs and held.meta.filters == ()
    assert np.array_equal(np.frombuffer(held.manifest.get((0, 0)), "<i2").reshape(4, 5), values)
    assert MISSING not in held.manifest.codes


def test_members_survive_pickling_and_tokens_see_them() -> None:
    import pickle

    from dask.base import tokenize

    rng = np.random.default_rng(6)
    parts = [_part(rng, i, 2) for i in range(2)]
    cube = concat_refs(parts, "time")
    back = pickle.loads(pickle.dumps(cube))
    assert back == cube and back.members == cube.members
    assert back.identity_of("s3://bucket/day1.h5").etag == "e1"
    assert back.identity_of("s3://elsewhere.h5") == cube.source  # not a member: the source
    other = GranuleRefs(cube.source, cube.groups, cube.arrays, cube.skipped, cube.extra,
                        (cube.members[0], SourceInfo("s3://bucket/day1.h5", 10**6, "changed")))
    assert other != cube and tokenize(other) != tokenize(cube)
    with pytest.raises(InvalidReferenceError, match="more than once"):
        GranuleRefs(cube.source, cube.groups, cube.arrays, members=cube.members * 2)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 5), last=st.integers(1, 6),
       urls=st.integers(1, 3), data=st.data())
def test_slices_concatenate_back_to_the_whole(seed: int, n: int, last: int, urls: int,
                                              data: st.DataObject) -> None:
    """Cutting a cube at a member boundary and joining the pieces gives the same references
    (each chunk's URL, offset, length and inline bytes), URL tables compacted."""
    rng = np.random.default_rng(seed)
    steps = [2 * int(rng.integers(1, 4)) for _ in range(n - 1)] + [last]
    parts = [_part(rng, i, s, urls=urls) for i, s in enumerate(steps)]
    cube = concat_refs(parts, "time")
    cut = data.draw(st.integers(1, n - 1))
    at = sum(steps[:cut])
    head = slice_refs(cube, "time", 0, at, cube.members[:cut])
    tail = slice_refs(cube, "time", at, sum(steps), cube.members[cut:])
    assert head.members == cube.members[:cut] and head.arrays["lat"] is cube.arrays["lat"]
    for piece, members in ((head, parts[:cut]), (tail, parts[cut:])):
        man = piece.arrays["v"].manifest
        used = {ref[0] for _, ref in man.iter_refs() if isinstance(ref, tuple)}
        assert set(man.urls) == used  # compacted: no URL of another member, none unused
        assert used <= {u for p in members for u in p.arrays["v"].manifest.urls}
    again = concat_refs([head, tail], "time").arrays["v"]
    whole = cube.arrays["v"]
    assert again.meta == whole.meta
    assert list(again.manifest.iter_refs()) == list(whole.manifest.iter_refs())


def test_slices_must_fall_on_chunks() -> None:
    rng = np.random.default_rng(0)
    cube = concat_refs([_part(rng, 0, 4), _part(rng, 1, 4)], "time")
    with pytest.raises(IncompatibleGranulesError, match=r"v: \[1:8\] along 'time' does not fall"):
        slice_refs(cube, "time", 1, 8, cube.members)


def test_join_of_many_inline_chunks_is_not_checked_again() -> None:
    """Joined manifests are valid by construction: checking them again built sets and copies
    of every inline chunk's index (~340 bytes a chunk at the join of a cube's pieces; ~140
    now), and what the join gives passes every check."""
    import tracemalloc

    from h5sidecar.references.datacube._concat import concat_manifests

    n = 20_000
    one = [ChunkManifest.from_arrays(urls=("a.h5",) if i % 2 else (),
                                     codes=np.array([0 if i % 2 else INLINE], np.int32),
                                     offsets=np.array([8 * i], np.uint64),
                                     lengths=np.array([16], np.uint64),
                                     inline={} if i % 2 else {0: bytes([i % 256]) * 16})
           for i in range(2 * n)]
    pieces = [concat_manifests(one[i:i + 2000], 0) for i in range(0, 2 * n, 2000)]
    tracemalloc.start()
    try:
        joined = concat_manifests(pieces, 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    checked = ChunkManifest.from_arrays(urls=joined.urls, codes=joined.codes,
                                        offsets=joined.offsets, lengths=joined.lengths,
                                        inline=joined.inline)
    assert checked == joined and joined.n_inline == n and joined.n_stored == n
    assert joined.get((2 * n - 2,)) == bytes([(2 * n - 2) % 256]) * 16
    assert joined.get((2 * n - 1,)) == ("a.h5", 8 * (2 * n - 1), 16)
    print(f"{peak / n:.0f} bytes an inline chunk")  # shown with -s
    assert peak < 200 * n, f"{peak / n:.0f} bytes an inline chunk"
