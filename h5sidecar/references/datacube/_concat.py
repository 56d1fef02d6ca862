"""Concatenate the references of many granules along one dimension (a datacube), columnar.

:func:`concat_refs` joins the chunk manifests of every array that has the dimension, with
vectorised NumPy on the code/offset/length grids and one merged URL table; chunks are never
moved or re-encoded, so the combined references read exactly the bytes the parts read.  It
refuses (:class:`~h5sidecar.errors.IncompatibleGranulesError`, naming the granule and the
variable) whatever would make a read misaligned or mis-decoded at the byte level: a part whose
length along the dimension is not a whole number of chunks (except the last), or metadata that
differs in anything but that length.  CF *attribute* safety (``scale_factor``, time units...) is
the caller's check (:mod:`h5sidecar.workflows`); attributes are the first part's.

:func:`inline_array` holds a whole array's values in the references (one uncompressed chunk),
so a cube's concat coordinate opens without reading any source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._manifest import INLINE, ChunkManifest
from h5sidecar.references._model import ArrayRefs, GranuleRefs, SourceInfo
from h5sidecar.references.datacube._url_column import UrlColumn, url_chunks

__all__ = [
    "check_shared_meta",
    "concat_manifests",
    "concat_meta",
    "concat_refs",
    "inline_array",
    "member_identities",
    "slice_manifest",
    "slice_refs",
]


def member_identities(parts: Sequence[GranuleRefs]) -> tuple[SourceInfo, ...]:
    """Every source object the parts read, once per URL, in order of first appearance.

    Raises
    ------
    IncompatibleGranulesError
        When two parts record different identities for the same URL (one of them is stale).
    """
    seen: dict[str, SourceInfo] = {}
    for part in parts:
        for m in part.members or (part.source,):
            if m.url in seen and seen[m.url] != m:
                raise IncompatibleGranulesError(
                    f"two sidecars describe {m.url} differently ({seen[m.url]} vs {m}); "
                    "one of them is stale: re-index the source"
                )
            seen.setdefault(m.url, m)
    return tuple(seen.values())


def concat_refs(
    parts: Sequence[GranuleRefs],
    dim: str,
    *,
    names: Sequence[str] | None = None,
    source: SourceInfo | None = None,
    extra: Mapping[str, Any] | None = None,
) -> GranuleRefs:
    """Concatenate ``parts`` (in order) along the dimension named ``dim``.

    Parameters
    ----------
    parts : sequence of GranuleRefs
        The granules, in concatenation order; all must have the same arrays.
    dim : str
        Dimension name.  Arrays with it are concatenated; arrays without it must have equal
        metadata in every part and are taken from the first.
    names : sequence of str, optional
        How errors name the parts (default: their source URLs).
    source : SourceInfo, optional
        The combined references' ``source`` (default: the first part's).
    extra : mapping, optional
        Provenance of the combined references.

    Returns
    -------
    GranuleRefs
        With ``members`` listing every part's source object; groups, skipped variables and
        attributes are the first part's.

    Raises
    ------
    IncompatibleGranulesError
        Arrays missing from a part, metadata that differs (other than the length along
        ``dim``), or a part (not the last) whose length along ``dim`` is not a multiple of
        the chunk length.
    """
    if not parts:
        raise ValueError("concat_refs needs at least one part")
    names = [p.source.url for p in parts] if names is None else list(names)
    first = parts[0]
    paths = list(first.arrays)
    for name, part in zip(names, parts, strict=True):
        if set(part.arrays) != set(paths):
            diff = sorted(set(part.arrays) ^ set(paths))
            raise IncompatibleGranulesError(
                f"{name} and {names[0]} hold different variables ({', '.join(diff)}); "
                "select common variables or combine only granules of one product"
            )
    arrays: dict[str, ArrayRefs] = {}
    like: list[UrlColumn] = []  # the arrays' merged URL columns, shared when equal
    for path in paths:
        per = [p.arrays[path] for p in parts]
        if dim in per[0].meta.dimension_names:
            arrays[path] = _concat_array(path, per, names, dim, like)
        else:
            check_shared_meta(path, [a.meta for a in per], names, dim)
            arrays[path] = per[0]
    return GranuleRefs(
        source=source or first.source,
        groups=first.groups,
        arrays=arrays,
        skipped=first.skipped,
        extra=dict(extra or {}),
        members=member_identities(parts),
    )


def _meta_diff(a: ArrayMeta, b: ArrayMeta) -> str:
    fields = ("shape", "chunks", "dtype", "fill_value", "filters", "compressor",
              "dimension_names", "attrs", "order")
    out = [f"{f}: {getattr(a, f)!r} vs {getattr(b, f)!r}" for f in fields
           if getattr(a, f) != getattr(b, f)]
    return "; ".join(out)


def check_shared_meta(path: str, metas: Sequence[ArrayMeta], names: Sequence[str],
                      dim: str) -> None:
    """Refuse an array without ``dim`` whose metadata differs between parts (it is taken
    from the first), as :func:`concat_refs` does."""
    for name, meta in zip(names[1:], metas[1:], strict=True):
        if meta != metas[0]:
            raise IncompatibleGranulesError(
                f"{path} has no {dim!r} dimension and differs between {names[0]} and "
                f"{name} ({_meta_diff(metas[0], meta)}); it cannot be shared"
            )


def concat_meta(path: str, metas: Sequence[ArrayMeta], names: Sequence[str],
                dim: str) -> ArrayMeta:
    """The metadata of ``path`` joined from the parts' ``metas`` along ``dim`` (the first's,
    its length the sum), refused as :func:`concat_refs` refuses: other dimensions, another
    encoding or shape, or a part but the last whose last chunk along ``dim`` is partial."""
    meta0 = metas[0]
    axis = meta0.dimension_names.index(dim)
    for name, m in zip(names, metas, strict=True):
        if m.dimension_names != meta0.dimension_names:
            raise IncompatibleGranulesError(
                f"{path} has dimensions {m.dimension_names} in {name} but "
                f"{meta0.dimension_names} in {names[0]}"
            )
        # everything but the length along `dim` and the attributes decides how bytes decode
        other = replace(m, shape=meta0.shape, attrs=meta0.attrs)
        if other != meta0:
            raise IncompatibleGranulesError(
                f"{path} is stored differently in {name} than in {names[0]} "
                f"({_meta_diff(meta0, replace(m, attrs=meta0.attrs))}); "
                "combine only granules stored alike"
            )
        rest = [s for i, s in enumerate(m.shape) if i != axis]
        if rest != [s for i, s in enumerate(meta0.shape) if i != axis]:
            raise IncompatibleGranulesError(
                f"{path} has shape {m.shape} in {name} but {meta0.shape} in {names[0]}: "
                f"only the {dim!r} dimension may differ"
            )
    step = meta0.chunks[axis]
    for name, m in zip(names[:-1], metas[:-1], strict=True):
        if m.shape[axis] % step:
            raise IncompatibleGranulesError(
                f"{path} in {name} has {m.shape[axis]} values along {dim!r}, not a "
                f"multiple of its chunk length {step}: its last chunk is partial, so the chunks "
                "of the next granule would be misaligned; combine it last or re-chunk it"
            )
    shape = list(meta0.shape)
    shape[axis] = sum(m.shape[axis] for m in metas)
    return replace(meta0, shape=tuple(shape))


def _concat_array(
    path: str, per: list[ArrayRefs], names: list[str], dim: str,
    like: list[UrlColumn] | None = None,
) -> ArrayRefs:
    meta = concat_meta(path, [a.meta for a in per], names, dim)
    axis = meta.dimension_names.index(dim)
    manifest = concat_manifests([a.manifest for a in per], axis, like)
    sums = [a.checksums for a in per]
    checksums: np.ndarray | None = None
    if all(s is not None for s in sums):
        checksums = np.concatenate([s for s in sums if s is not None], axis=axis)
    status: Literal["virtual", "inlined"] = (
        "virtual" if any(a.status == "virtual" for a in per) else "inlined"
    )
    return ArrayRefs(path=path, meta=meta, manifest=manifest, status=status,
                     note=per[0].note, checksums=checksums)


def concat_manifests(manifests: Sequence[ChunkManifest], axis: int,
                     like: list[UrlColumn] | None = None) -> ChunkManifest:
    """Join chunk manifests along ``axis`` of their chunk grids (one merged URL table;
    ``like``: see :func:`_merged_urls`)."""
    codes, offsets, lengths = [], [], []
    inline: dict[int, bytes] = {}
    grids = [m.grid_shape for m in manifests]
    total = list(grids[0])
    total[axis] = sum(g[axis] for g in grids)
    start = 0
    urls, remaps = _merged_urls(manifests, like)
    for m, grid, remap in zip(manifests, grids, remaps, strict=True):
        c = m.codes
        codes.append(np.where(c >= 0, remap[np.clip(c, 0, None)], c))
        offsets.append(m.offsets)
        lengths.append(m.lengths)
        if m.inline:
            flat = np.fromiter(m.inline, dtype=np.int64, count=len(m.inline))
            index = np.unravel_index(flat, grid)
            moved = list(index)
            moved[axis] = moved[axis] + start
            new = np.ravel_multi_index(tuple(moved), tuple(total))
            inline.update(zip(new.tolist(), m.inline.values(), strict=True))
        start += grid[axis]
    # the parts were checked when built, and joining them keeps what was checked (codes within
    # the merged table, inline chunks exactly at INLINE codes): not checked again, which at a
    # cube of a million members built sets and copies of a million inline chunks' indices
    return ChunkManifest.from_checked(
        urls=urls,
        codes=np.concatenate(codes, axis=axis),
        offsets=np.concatenate(offsets, axis=axis),
        lengths=np.concatenate(lengths, axis=axis),
        inline=inline,
    )


def _used_urls(urls: Sequence[str], used: np.ndarray) -> Sequence[str]:
    """``urls[used]`` (``used``: increasing): of a :class:`UrlColumn`, in Arrow, and when
    ``used`` is a run (a slice of a cube's members) a view of it, not a copy."""
    if not isinstance(urls, UrlColumn):
        return tuple(urls[i] for i in used.tolist())
    if used.size and int(used[-1]) - int(used[0]) + 1 == used.size:
        return urls[int(used[0]):int(used[-1]) + 1]
    return urls.take(used)


def _merged_urls(manifests: Sequence[ChunkManifest], like: list[UrlColumn] | None = None,
                 ) -> tuple[Sequence[str], list[np.ndarray]]:
    """One URL table for ``manifests`` and, for each, where its URLs are in it.

    Manifests whose URLs are a :class:`UrlColumn` (a cube's members') are merged in Arrow:
    a cube rewritten around a replaced member joins slices of a million members' URLs, which
    as Python strings and a ``str -> int`` dict were ~0.3 KB a member.  When the joined
    URLs list none twice (a cube's members in order: one comparison of neighbours) the table
    is their concatenation; else they are dictionary-encoded.  Tuples (granules' few URLs)
    are merged with a dict, in first-appearance order, as before.  ``like``: URL tables merged
    for other arrays (appended to): one equal to these URLs joined is returned itself (a
    cube's arrays list the same members: one table, not a copy of every URL an array).
    """
    if not any(isinstance(m.urls, UrlColumn) for m in manifests):
        table: dict[str, int] = {}
        remaps = [np.array([table.setdefault(u, len(table)) for u in m.urls] or [0], np.int32)
                  for m in manifests]
        return tuple(table), remaps
    joined = pa.chunked_array([c for m in manifests for c in url_chunks(m.urls)], pa.string())
    sizes = np.array([len(m.urls) for m in manifests], np.int64)
    merged = next((u for u in like or () if u.distinct and len(u) == len(joined)
                   and joined.equals(pa.chunked_array([u.arrow]))), None)
    if merged is None:
        merged = UrlColumn(joined.combine_chunks())
        if like is not None:
            like.append(merged)
    if merged.distinct:
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        return merged, [np.arange(a, a + n, dtype=np.int32) if n else np.zeros(1, np.int32)
                        for a, n in zip(starts.tolist(), sizes.tolist(), strict=True)]
    encoded = pc.dictionary_encode(merged.arrow)
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return UrlColumn(encoded.dictionary, distinct=True), [
        codes[a:b] if b > a else np.zeros(1, np.int32)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]


def slice_refs(
    refs: GranuleRefs, dim: str, start: int, stop: int, members: Sequence[SourceInfo]
) -> GranuleRefs:
    """The references of ``refs[dim=start:stop]`` (the inverse of :func:`concat_refs`).

    Arrays with ``dim`` are cut along it (``start`` and ``stop`` must fall on chunk
    boundaries, ``stop`` may be the array's end); arrays without it are kept whole.  Chunks are
    never moved, so the slice reads the bytes the whole did.  ``members`` are the slice's
    source objects (a cube's members in that range).

    Raises
    ------
    IncompatibleGranulesError
        When a bound does not fall on a chunk boundary of some array.
    """
    arrays: dict[str, ArrayRefs] = {}
    for path, arr in refs.arrays.items():
        meta = arr.meta
        if dim not in meta.dimension_names:
            arrays[path] = arr
            continue
        axis = meta.dimension_names.index(dim)
        step, n = meta.chunks[axis], meta.shape[axis]
        if start % step or (stop % step and stop != n) or not 0 <= start < stop <= n:
            raise IncompatibleGranulesError(
                f"{path}: [{start}:{stop}] along {dim!r} does not fall on its chunks of {step} "
                f"(length {n}); the cube cannot be cut there"
            )
        shape = list(meta.shape)
        shape[axis] = stop - start
        sums = arr.checksums
        take = slice(start // step, -(-stop // step))
        index = (slice(None),) * axis + (take,)
        arrays[path] = ArrayRefs(
            path=path, meta=replace(meta, shape=tuple(shape)),
            manifest=slice_manifest(arr.manifest, axis, take.start, take.stop),
            status=arr.status, note=arr.note,
            checksums=None if sums is None else np.ascontiguousarray(sums[index]),
        )  # fmt: skip
    return GranuleRefs(refs.source, refs.groups, arrays, refs.skipped, refs.extra,
                       tuple(members))


def slice_manifest(manifest: ChunkManifest, axis: int, first: int, stop: int) -> ChunkManifest:
    """Chunks ``first:stop`` of ``manifest`` along ``axis`` (URL table compacted)."""
    grid = manifest.grid_shape
    index = (slice(None),) * axis + (slice(first, stop),)
    codes = manifest.codes.reshape(grid)[index]
    used = np.unique(codes[codes >= 0])
    remap = np.full(len(manifest.urls) or 1, -1, dtype=np.int32)
    remap[used] = np.arange(used.size, dtype=np.int32)
    new_codes = np.where(codes >= 0, remap[np.clip(codes, 0, None)], codes)
    inline: dict[int, bytes] = {}
    if manifest.inline:
        flat = np.fromiter(manifest.inline, dtype=np.int64, count=len(manifest.inline))
        where = list(np.unravel_index(flat, grid))
        keep = (where[axis] >= first) & (where[axis] < stop)
        where[axis] = where[axis] - first
        sub = tuple(codes.shape)
        new: Any = np.ravel_multi_index(tuple(w[keep] for w in where), sub) if keep.any() else []
        data = [d for d, k in zip(manifest.inline.values(), keep, strict=True) if k]
        inline = dict(zip(np.asarray(new).tolist(), data, strict=True))
    return ChunkManifest.from_arrays(
        urls=_used_urls(manifest.urls, used),
        codes=np.ascontiguousarray(new_codes),
        offsets=np.ascontiguousarray(manifest.offsets.reshape(grid)[index]),
        lengths=np.ascontiguousarray(manifest.lengths.reshape(grid)[index]),
        inline=inline,
    )


def inline_array(arr: ArrayRefs, values: np.ndarray, note: str = "") -> ArrayRefs:
    """``arr`` with ``values`` (its raw, undecoded values) held inline as one uncompressed chunk.

    The metadata and attributes are kept (so CF decoding is unchanged); only the chunking and
    the codecs change.  Used for a cube's concat coordinate: opening it reads no source.
    """
    meta = arr.meta
    data = np.ascontiguousarray(values, dtype=meta.numpy_dtype)
    if data.shape != meta.shape or not data.size:
        raise ValueError(f"{arr.path}: values of shape {data.shape} for an array {meta.shape}")
    new_meta = replace(meta, chunks=meta.shape, filters=(), compressor=None, order="C")
    grid = new_meta.grid_shape
    manifest = ChunkManifest.from_arrays(
        urls=(),
        codes=np.full(grid, INLINE, dtype=np.int32),
        offsets=np.zeros(grid, dtype=np.uint64),
        lengths=np.full(grid, data.nbytes, dtype=np.uint64),
        inline={0: data.tobytes()},
    )
    return ArrayRefs(path=arr.path, meta=new_meta, manifest=manifest, status="inlined",
                     note=note or "materialized: the concatenated coordinate, held inline")
