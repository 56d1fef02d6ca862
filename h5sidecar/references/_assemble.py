"""Rebuild :class:`GranuleRefs` from what a sidecar holds: metadata, chunk columns and extras.

Both readers reduce a sidecar to the same three things -- the Zarr v2 metadata documents, one
:class:`ChunkColumns` per array, and the optional extras block -- and :func:`assemble` turns
them into the validated model.  Sidecars written by kerchunk itself carry no extras: their
source identity is then the first chunk URL with ``size=-1`` (unknown), so the freshness guard
cannot vouch for them until they are re-indexed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._extras import ArrayExtras, Extras, decode_checksums
from h5sidecar.references._manifest import INLINE, MISSING, ChunkManifest
from h5sidecar.references._model import ArrayRefs, GranuleRefs, SourceInfo
from h5sidecar.references._zmeta import KEEP, ZarrNodes, array_meta
from h5sidecar.references.datacube._member_table import MemberTable, positions

__all__ = ["UNKNOWN_SIZE", "ChunkColumns", "assemble", "build_manifest", "build_metas"]

#: ``SourceInfo.size`` of a sidecar without our extras (written by kerchunk or by hand).
UNKNOWN_SIZE = -1


@dataclass
class ChunkColumns:
    """The chunk references of one array as read from a sidecar, before validation.

    ``flat``/``urls``/``offsets``/``lengths`` describe the byte-range chunks (flat C-order
    index, URL, offset, length); ``inline`` maps flat index -> bytes held in the sidecar.
    """

    flat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    urls: pa.Array = field(default_factory=lambda: pa.array([], type=pa.string()))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    inline: dict[int, bytes] = field(default_factory=dict)


def build_metas(nodes: ZarrNodes, extras: Extras | None) -> dict[str, ArrayMeta]:
    """Every array's :class:`ArrayMeta`, in the extras' order (then the metadata's).

    Raises
    ------
    InvalidReferenceError
        When a ``.zarray`` is not valid Zarr v2 or the extras name arrays the metadata lacks.
    """
    per_array = extras.arrays if extras else {}
    unknown = set(per_array) - set(nodes.arrays)
    if unknown:
        raise InvalidReferenceError(
            f"the extras describe {min(unknown)!r}, which has no .zarray; "
            "the sidecar is inconsistent: re-create it"
        )
    order = [p for p in per_array if p in nodes.arrays]
    order += [p for p in nodes.arrays if p not in per_array]
    metas: dict[str, ArrayMeta] = {}
    for path in order:
        zarray, zattrs = nodes.arrays[path]
        fill = per_array[path].fill_value if path in per_array else KEEP
        try:
            metas[path] = array_meta(path, zarray, zattrs, fill)
        except InvalidReferenceError:
            raise
        except (TypeError, ValueError) as exc:
            raise InvalidReferenceError(f"{path}/.zarray is not valid Zarr v2: {exc}") from exc
    return metas


def assemble(
    nodes: ZarrNodes,
    metas: Mapping[str, ArrayMeta],
    chunks: Mapping[str, ChunkColumns],
    extras: Extras | None,
    side_checksums: Mapping[str, np.ndarray] | None = None,
) -> GranuleRefs:
    """Validate and combine the parts of a sidecar into :class:`GranuleRefs`.

    Raises
    ------
    InvalidReferenceError
        When chunks belong to no array, byte ranges are negative, empty or beyond the source
        object, or checksums do not fit the grid.
    """
    stray = set(chunks) - set(metas)
    if stray:
        raise InvalidReferenceError(
            f"chunk references for {min(stray)!r}, which has no .zarray; re-create the sidecar"
        )
    per_array = extras.arrays if extras else {}
    source = extras.source if extras else _unknown_source(chunks)
    arrays: dict[str, ArrayRefs] = {}
    known = known_sizes(extras) if extras else {source.url: source.size}
    member_urls: Sequence[str] = ()
    for path, meta in metas.items():
        ax = per_array.get(path, ArrayExtras())
        order: Sequence[str] | None = ax.urls
        if ax.from_members and extras is not None:  # a cube's array of every member's chunks
            order = member_urls = member_urls or extras.member_urls()
        manifest = build_manifest(path, meta.grid_shape, chunks.get(path, ChunkColumns()), order)
        _check_within_source(path, manifest, known)
        status = ax.status if path in per_array else _guess_status(manifest)
        arrays[path] = ArrayRefs(
            path=path,
            meta=meta,
            manifest=manifest,
            status=status,
            note=ax.note,
            checksums=_checksums(path, ax, meta.grid_shape, side_checksums or {}),
        )
    return GranuleRefs(
        source=source,
        groups=nodes.groups,
        arrays=arrays,
        skipped=extras.skipped if extras else (),
        extra=extras.extra if extras else {},
        members=extras.members if extras else (),
    )


def build_manifest(
    path: str,
    grid_shape: tuple[int, ...],
    cols: ChunkColumns,
    url_order: Sequence[str] | None,
) -> ChunkManifest:
    """Scatter chunk columns into a :class:`ChunkManifest` over ``grid_shape``."""
    offsets = np.asarray(cols.offsets)
    lengths = np.asarray(cols.lengths)
    if offsets.size and (offsets.dtype.kind not in "iu" or lengths.dtype.kind not in "iu"):
        raise InvalidReferenceError(f"{path}: chunk offsets and lengths must be integers")
    if np.any(offsets < 0) or np.any(lengths <= 0):
        bad = int(np.argmax((offsets < 0) | (lengths <= 0)))
        raise InvalidReferenceError(
            f"{path}: chunk reference with offset {int(offsets[bad])} and length "
            f"{int(lengths[bad])}; offsets must be >= 0 and lengths > 0: re-create the sidecar"
        )
    inline_flat = np.fromiter(cols.inline, np.int64, len(cols.inline))
    if inline_flat.size and np.isin(inline_flat, cols.flat).any():
        raise InvalidReferenceError(f"{path}: a chunk is both inline and a byte range")
    encoded = cols.urls.dictionary_encode() if len(cols.urls) else None
    found = [] if encoded is None else encoded.dictionary.to_pylist()
    if None in found or (encoded is not None and encoded.indices.null_count):
        raise InvalidReferenceError(f"{path}: a chunk reference has no URL")
    urls = tuple(found) if url_order is None else tuple(url_order)
    position = {u: i for i, u in enumerate(urls)}
    if any(u not in position for u in found):
        raise InvalidReferenceError(
            f"{path}: chunk URL {next(u for u in found if u not in position)!r} is not among "
            "the array's URLs in the extras; the sidecar is inconsistent: re-create it"
        )
    n = int(np.prod(grid_shape, dtype=np.int64))
    codes = np.full(n, MISSING, dtype=np.int32)
    out_offsets = np.zeros(n, dtype=np.uint64)
    out_lengths = np.zeros(n, dtype=np.uint64)
    if encoded is not None:
        remap = np.asarray([position[u] for u in found], dtype=np.int32)
        codes[cols.flat] = remap[encoded.indices.to_numpy(zero_copy_only=False)]
        out_offsets[cols.flat] = offsets
        out_lengths[cols.flat] = lengths
    codes[list(cols.inline)] = INLINE
    return ChunkManifest.from_arrays(
        urls=urls,
        codes=codes.reshape(grid_shape),
        offsets=out_offsets.reshape(grid_shape),
        lengths=out_lengths.reshape(grid_shape),
        inline=cols.inline,
    )


def known_sizes(extras: Extras) -> dict[str, int]:
    """URL -> recorded size of every object the references may read (source + members; -1
    when unknown): a cube's from its member table's columns, making no member's identity
    (checking every chunk of a cube's manifests against its member's size needs no more)."""
    if isinstance(extras.members, MemberTable):
        members = extras.members
        sizes = dict(zip(members.urls.to_pylist(), members.table.column("size").to_pylist(),
                         strict=True))
    else:
        sizes = {m.url: m.size for m in extras.members}
    sizes.setdefault(extras.source.url, extras.source.size)
    return sizes


def url_sizes(urls: pa.Array, extras: Extras) -> np.ndarray:
    """The recorded size of each of ``urls`` (-1: unknown, or no member's nor the source's),
    as :func:`known_sizes` maps them, without a Python string or dict entry a URL: a cube's
    chunk URLs are placed among its members' in Arrow (:func:`positions`)."""
    out = np.full(len(urls), -1, np.int64)
    members = extras.members
    hit = np.zeros(len(urls), bool)
    if isinstance(members, MemberTable):
        # the two columns alone (a cube's members in files: not every column read)
        at = positions(urls, members.checked_urls())
        hit = at >= 0
        size = members.column_only("size")
        assert size is not None  # (an identity column)
        sizes = size.fill_null(-1).to_numpy()
        out[hit] = sizes[at[hit]]
    elif members:
        known = {m.url: m.size for m in members}
        for i, u in enumerate(urls.to_pylist()):
            if u in known:
                out[i], hit[i] = known[u], True
    if extras.source.url and len(urls):
        source = pc.equal(urls, extras.source.url).fill_null(False).to_numpy(zero_copy_only=False)
        out[source & ~hit] = extras.source.size
    return out


#: Manifests up to this many chunks are checked against their source's size in plain Python.
_FEW_CHUNKS = 64


def _check_within_source(path: str, manifest: ChunkManifest, known: Mapping[str, int]) -> None:
    """A chunk ending past the end of its (known-size) source means the sidecar is corrupt
    (``known``: URL -> recorded size, -1 when unknown: :func:`known_sizes`)."""
    sizes = [known.get(u, -1) for u in manifest.urls]
    if all(s < 0 for s in sizes):
        return
    codes = manifest.codes.reshape(-1)
    if codes.size <= _FEW_CHUNKS:  # NumPy's per-call cost is most of it for a few chunks
        far = [0] * len(sizes)  # per URL: the furthest chunk end
        for c, o, n in zip(codes.tolist(), manifest.offsets.reshape(-1).tolist(),
                           manifest.lengths.reshape(-1).tolist(), strict=True):  # fmt: skip
            if c >= 0 and o + n > far[c]:
                far[c] = o + n
        ends = far
    else:
        stored = codes >= 0
        found = np.zeros(len(sizes), dtype=np.uint64)
        np.maximum.at(
            found,
            codes[stored],
            manifest.offsets.reshape(-1)[stored] + manifest.lengths.reshape(-1)[stored],
        )
        ends = found.tolist()
    for i, (end, size) in enumerate(zip(ends, sizes, strict=True)):
        if size >= 0 and end > size:
            raise InvalidReferenceError(
                f"{path}: a chunk ends at byte {end}, past the end of {manifest.urls[i]} "
                f"({size} bytes); the sidecar does not describe this object: re-index it"
            )


def _guess_status(manifest: ChunkManifest) -> Any:
    return "inlined" if manifest.n_inline and not manifest.n_stored else "virtual"


def _unknown_source(chunks: Mapping[str, ChunkColumns]) -> SourceInfo:
    for cols in chunks.values():
        if len(cols.urls):
            return SourceInfo(url=str(cols.urls[0].as_py()), size=UNKNOWN_SIZE)
    return SourceInfo(url="", size=UNKNOWN_SIZE)


def _checksums(
    path: str, ax: ArrayExtras, grid_shape: tuple[int, ...], side: Mapping[str, np.ndarray]
) -> np.ndarray | None:
    if ax.checksums is None:
        return None
    if ax.checksums != "file":
        return decode_checksums(ax.checksums, grid_shape, path)
    n = int(np.prod(grid_shape, dtype=np.int64))
    if path not in side and n == 0:
        return np.zeros(grid_shape, dtype=np.uint64)  # an empty grid has no rows in the file
    if path not in side:
        raise InvalidReferenceError(
            f"{path}: the extras say its checksums are in the side file, which lacks them; "
            "re-create the sidecar"
        )
    values = side[path]
    if values.size != n:
        raise InvalidReferenceError(f"{path}: checksums do not match the chunk grid")
    return values.reshape(grid_shape)
