"""kerchunk JSON v1 references: ``GranuleRefs`` <-> ``{"version": 1, "refs": {...}}``.

Layout written (what fsspec's ``ReferenceFileSystem`` and kerchunk read)::

    {"version": 1,
     "refs": {".zmetadata": "{\\"zarr_consolidated_format\\":1,\\"metadata\\":{...}}",
              ".zgroup": "{\\"zarr_format\\":2}", ".zattrs": "{...}",
              "gt1l/heights/h_ph/.zarray": "{...}", ...,
              "gt1l/heights/h_ph/0": ["s3://bucket/granule.h5", 4016, 29312],   # byte range
              "gt1l/heights/h_ph/1": "base64:eJzt...",                          # inline chunk
              ...},                                     # missing chunks have no key
     "h5sidecar": {...}}                                # our extras (see _extras.py)

Metadata values are JSON *strings*, as kerchunk writes them.  Inline chunks are the raw text when
the bytes are ASCII (kerchunk does the same) and otherwise ``"base64:"`` + base64.  The writer
builds the chunk entries of a whole array with pyarrow string kernels, never a dict per chunk.
"""

from __future__ import annotations

import base64
import gc
import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ujson

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._assemble import ChunkColumns, assemble, build_metas
from h5sidecar.references._extras import Extras, build_extras, parse_extras
from h5sidecar.references._extras_versions import EXTRAS_KEY
from h5sidecar.references._keys import chunk_names, ints_as_text, parse_chunk_names
from h5sidecar.references._manifest import INLINE, MISSING, ChunkManifest
from h5sidecar.references._model import ArrayRefs, GranuleRefs
from h5sidecar.references._zmeta import ZarrNodes, split_metadata

__all__ = [
    "decode_inline",
    "encode_inline",
    "encode_json",
    "few_chunks_manifest",
    "from_kerchunk",
    "json_default",
    "to_kerchunk",
]

#: Keys holding metadata documents rather than chunks.
_META_SUFFIXES = (".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json")
#: Chunks formatted per pyarrow call: bounds the text buffer (~100 bytes a chunk).
_BLOCK = 1 << 20


def _dumps(obj: Any) -> str:
    return ujson.dumps(obj, escape_forward_slashes=False, ensure_ascii=False, default=json_default)


def json_default(obj: Any) -> Any:
    """Encode numpy scalars and arrays that slipped into attributes as plain JSON values."""
    if isinstance(obj, (np.generic, np.ndarray)):
        return obj.tolist()
    raise TypeError(
        f"{type(obj).__name__} value {obj!r} is not JSON-serialisable; attributes and provenance "
        "must hold JSON values (str, numbers, bools, None, lists, dicts)"
    )


def encode_inline(data: bytes) -> str:
    """kerchunk's encoding of inline bytes: ASCII as is, anything else ``"base64:..."``."""
    if data.isascii() and not data.startswith(b"base64:"):
        return data.decode("ascii")
    return "base64:" + base64.b64encode(data).decode("ascii")


def decode_inline(text: str) -> bytes:
    """Inverse of :func:`encode_inline` (and of what fsspec does with string references)."""
    if text.startswith("base64:"):
        try:
            return base64.b64decode(text[7:], validate=True)
        except ValueError as exc:
            raise InvalidReferenceError(f"inline chunk is not valid base64: {exc}") from exc
    return text.encode("utf-8")


def metadata_refs(refs: GranuleRefs) -> dict[str, str]:
    """``.zmetadata`` plus every ``.zgroup/.zattrs/.zarray`` document, as JSON strings."""
    zmeta = refs.zmetadata()
    out = {".zmetadata": _dumps({"zarr_consolidated_format": 1, "metadata": zmeta})}
    out.update((k, _dumps(v)) for k, v in zmeta.items())
    return out


def to_kerchunk(refs: GranuleRefs) -> dict[str, Any]:
    """The kerchunk v1 reference dict of ``refs`` (what ``ReferenceFileSystem(fo=...)`` takes).

    Parameters
    ----------
    refs : GranuleRefs

    Returns
    -------
    dict
        ``{"version": 1, "refs": {key: str | [url, offset, length]}, "h5sidecar": extras}``;
        metadata values are JSON strings, inline chunks ASCII text or ``"base64:..."``, missing
        chunks absent.  Plain readers ignore the ``"h5sidecar"`` key.
    """
    out: dict[str, Any] = metadata_refs(refs)
    for path, arr in refs.arrays.items():
        m = arr.manifest
        flat, stored = _stored(arr)
        if flat.size:
            keys = pc.binary_join_element_wise(f"{path}/", chunk_names(m.grid_shape, flat), "")
            urls = np.asarray(m.urls, dtype=object)[m.codes.reshape(-1)[flat]].tolist()
            triples = zip(urls, stored[0].tolist(), stored[1].tolist(), strict=True)
            out.update(zip(keys.to_pylist(), map(list, triples), strict=True))
        out.update(_inline_refs(path, arr))
    return {"version": 1, "refs": out, EXTRAS_KEY: build_extras(refs, checksums="inline")}


def _stored(arr: ArrayRefs) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Flat indices, offsets and lengths of the byte-range chunks of one array."""
    m = arr.manifest
    flat = np.flatnonzero(m.codes.reshape(-1) >= 0)
    return flat, (m.offsets.reshape(-1)[flat], m.lengths.reshape(-1)[flat])


def _inline_refs(path: str, arr: ArrayRefs) -> Iterator[tuple[str, str]]:
    inline = arr.manifest.inline
    if not inline:
        return
    flat = np.sort(np.fromiter(inline, dtype=np.int64, count=len(inline)))
    names = chunk_names(arr.manifest.grid_shape, flat).to_pylist()
    for name, index in zip(names, flat.tolist(), strict=True):
        yield f"{path}/{name}", encode_inline(inline[index])


def encode_json(refs: GranuleRefs) -> bytes:
    """The kerchunk v1 JSON document of ``refs`` as UTF-8 bytes (see module docstring)."""
    head = _dumps({"version": 1, "refs": metadata_refs(refs)})
    pieces: list[bytes | memoryview] = [head[:-2].encode("utf-8")]  # reopen the refs object
    for path, arr in refs.arrays.items():
        pieces.extend(_chunk_text(path, arr))
        inline = dict(_inline_refs(path, arr))
        if inline:
            pieces.append(b"," + _dumps(inline)[1:-1].encode("utf-8"))
    tail = _dumps(build_extras(refs, checksums="inline"))
    pieces.append(f'}},"{EXTRAS_KEY}":{tail}}}'.encode())
    return b"".join(pieces)


def _chunk_text(path: str, arr: ArrayRefs) -> Iterator[memoryview]:
    """``,"path/i.j":["url",offset,length]`` for every byte-range chunk, built in bulk."""
    m = arr.manifest
    flat, (offsets, lengths) = _stored(arr)
    prefix = ',"' + _dumps(f"{path}/")[1:-1]
    url_text = pa.array([_dumps(u) for u in m.urls], type=pa.string())
    codes = m.codes.reshape(-1)
    for start in range(0, flat.size, _BLOCK):
        sl = slice(start, start + _BLOCK)
        block_urls: Any = (
            url_text[0] if len(m.urls) == 1 else url_text.take(pa.array(codes[flat[sl]]))
        )
        text = pc.binary_join_element_wise(
            prefix,
            chunk_names(m.grid_shape, flat[sl]),
            '":[',
            block_urls,
            ",",
            ints_as_text(offsets[sl]),
            ",",
            ints_as_text(lengths[sl]),
            "]",
            "",
        )
        yield _string_data(text)


def _string_data(arr: pa.StringArray) -> memoryview:
    """The concatenated UTF-8 bytes of a string array (no per-element copies)."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
    data = arr.buffers()[2]
    if data is None:
        return memoryview(b"")
    return memoryview(data)[offsets[arr.offset] : offsets[arr.offset + len(arr)]]


# -- reading --------------------------------------------------------------------------------
def decode_json(data: bytes | str) -> GranuleRefs:
    """Parse kerchunk JSON text (ours or kerchunk's) into :class:`GranuleRefs`."""
    return from_kerchunk(load_json(data))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a sidecar is parsed and picked apart.

    Parsing a JSON sidecar allocates one container per chunk reference (hundreds of thousands
    for a large granule); each allocation burst can trigger collections that scan the whole
    heap of a busy process (a Dask worker) -- measured: median 92 ms instead of 48 ms to open a
    large granule's named arrays.  The parsed document holds no reference cycles and is freed
    by reference counting, so nothing is lost by not collecting meanwhile.  The collector's
    state is restored as found (left off if the caller had turned it off).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def load_json(data: bytes | str) -> Any:
    """The parsed JSON text of a sidecar (``InvalidReferenceError`` when it is not JSON)."""
    try:
        return ujson.loads(data)
    except ValueError as exc:
        raise InvalidReferenceError(
            f"the sidecar is not valid JSON ({exc}); it may be truncated: re-create it"
        ) from exc


def from_kerchunk(obj: Mapping[str, Any]) -> GranuleRefs:
    """Build :class:`GranuleRefs` from a kerchunk reference dict (version 1, or 0 without one).

    Sidecars without our extras get ``SourceInfo(url=<first chunk URL>, size=-1)``.

    Raises
    ------
    InvalidReferenceError
        On anything malformed: wrong types, unknown keys, bad chunk keys or byte ranges,
        whole-object references, inconsistent extras.
    """
    return assemble_parts(split_kerchunk(obj))


def assemble_parts(parts: KerchunkParts) -> GranuleRefs:
    """Validate every array's chunk references and assemble :class:`GranuleRefs`."""
    chunks = {}
    for path, (names, values) in parts.entries.items():
        if path not in parts.metas:
            raise InvalidReferenceError(
                f"reference {path + '/' if path else ''}{names[0]!r} belongs to no array "
                "(no .zarray); re-create the sidecar"
            )
        flat = parse_chunk_names(names, parts.metas[path].grid_shape, path)
        chunks[path] = chunk_columns(path, flat, values, parts.templates)
    return assemble(parts.nodes, parts.metas, chunks, parts.extras)


class KerchunkParts(NamedTuple):
    """A kerchunk reference dict split up, before any chunk reference is validated."""

    nodes: ZarrNodes
    metas: dict[str, ArrayMeta]
    #: array path -> (chunk names, reference values), as parsed
    entries: dict[str, tuple[list[str], list[Any]]]
    extras: Extras | None
    templates: dict[str, Any]


def split_kerchunk(obj: Mapping[str, Any]) -> KerchunkParts:
    """Metadata (parsed and checked), extras and the raw chunk references of each array."""
    refs = _refs_of(obj)
    templates = obj.get("templates") or {}
    if not isinstance(templates, dict):
        raise InvalidReferenceError("'templates' must be an object of name -> URL")
    meta: dict[str, Any] = {}
    entries: dict[str, tuple[list[str], list[Any]]] = defaultdict(lambda: ([], []))
    for key, value in refs.items():
        if not isinstance(key, str):
            raise InvalidReferenceError(f"reference key {key!r} is not a string")
        if key.endswith(_META_SUFFIXES):
            meta[key] = _document(key, value)
        else:
            parent, _, name = key.rpartition("/")
            names, values = entries[parent]
            names.append(name)
            values.append(value)
    consolidated = meta.pop(".zmetadata", None)
    if consolidated is not None:
        inner = consolidated.get("metadata")
        if not isinstance(inner, dict):
            raise InvalidReferenceError(".zmetadata lacks its 'metadata' object")
        meta = {**inner, **meta}  # the individual keys are what plain readers serve
    nodes = split_metadata(meta)
    extras = parse_extras(obj[EXTRAS_KEY]) if EXTRAS_KEY in obj else None
    metas = build_metas(nodes, extras)
    return KerchunkParts(nodes, metas, dict(entries), extras, templates)


def _refs_of(obj: Any) -> Mapping[str, Any]:
    if not isinstance(obj, dict):
        raise InvalidReferenceError("a kerchunk sidecar must be a JSON object")
    version = obj.get("version")
    if version is None and "refs" not in obj:
        return {k: v for k, v in obj.items() if k != EXTRAS_KEY}  # version 0: refs at the top
    if version != 1:
        raise InvalidReferenceError(
            f"kerchunk reference version {version!r} is not supported (expected 1)"
        )
    if obj.get("gen"):
        raise InvalidReferenceError(
            "'gen' (generated) references are not supported; expand them with kerchunk first"
        )
    refs = obj.get("refs")
    if not isinstance(refs, dict):
        raise InvalidReferenceError("a kerchunk v1 sidecar needs a 'refs' object")
    return refs


def _document(key: str, value: Any) -> Any:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise InvalidReferenceError(f"{key!r} must be a JSON document, got {type(value).__name__}")
    try:
        return ujson.loads(decode_inline(value))
    except ValueError as exc:
        raise InvalidReferenceError(f"{key!r} is not valid JSON: {exc}") from exc


def chunk_columns(
    path: str, flat: np.ndarray, values: list[Any], templates: Mapping[str, Any]
) -> ChunkColumns:
    """Split one array's reference values into byte ranges and inline chunks (bulk, not per key)."""
    is_list = np.fromiter((type(v) is list for v in values), dtype=bool, count=len(values))
    ranges = list(itertools.compress(values, is_list))
    if any(n != 3 for n in set(map(len, ranges))):
        bad = next(v for v in ranges if len(v) != 3)
        if len(bad) == 1:
            raise InvalidReferenceError(
                f"{path}: whole-object reference {bad!r} cannot be expressed as a byte range; "
                "re-create the references with offsets and lengths"
            )
        raise InvalidReferenceError(f"{path}: chunk reference {bad!r} is not [url, offset, length]")
    inline: dict[int, bytes] = {}
    for i in np.flatnonzero(~is_list).tolist():
        if type(values[i]) is not str:
            raise InvalidReferenceError(
                f"{path}: chunk reference {values[i]!r} is neither [url, offset, length] nor a string"
            )
        inline[int(flat[i])] = decode_inline(values[i])
    urls, offsets, lengths = zip(*ranges, strict=True) if ranges else ((), (), ())
    if templates:
        urls = tuple(_render(u, templates) for u in urls)
    try:
        url_arr = pa.array(urls, type=pa.string())
        off_arr = np.asarray(offsets)
        len_arr = np.asarray(lengths)
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        raise InvalidReferenceError(f"{path}: malformed chunk reference ({exc})") from exc
    return ChunkColumns(
        flat=flat[is_list], urls=url_arr, offsets=off_arr, lengths=len_arr, inline=inline
    )


#: Up to this many chunk references, :func:`few_chunks_manifest` builds a JSON sidecar's
#: manifest in plain Python: the general path's ~25 NumPy and Arrow calls (~0.4 ms) are most of
#: a one-chunk array's cost, paid for every array of every member in a datacube build.
FEW_CHUNKS = 8
_MAX_INT64 = 2**63 - 1


def few_chunks_manifest(
    grid_shape: tuple[int, ...],
    names: list[str],
    values: list[Any],
    url_order: tuple[str, ...] | None,
) -> ChunkManifest | None:
    """The manifest of at most :data:`FEW_CHUNKS` references (``[url, offset, length]`` or an
    inline chunk's text), with every check of the general path (``parse_chunk_names``,
    ``chunk_columns``, :func:`build_manifest`, ``ChunkManifest.from_arrays``), or ``None`` for
    anything else: more chunks, or a reference one of those checks would refuse (the general
    path then builds it, or raises naming what is wrong)."""
    if not 0 < len(names) <= FEW_CHUNKS:
        return None
    grid = grid_shape or (1,)
    rank = len(grid)
    position: dict[str, int] = (
        {} if url_order is None else {u: i for i, u in enumerate(url_order)}
    )
    rows: dict[int, tuple[int, int, int]] = {}
    inline: dict[int, bytes] = {}
    for name, value in zip(names, values, strict=True):
        parts = name.split(".")
        if len(parts) != rank or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        flat = 0
        for p, size in zip(parts, grid, strict=True):
            i = int(p)
            if i >= size:
                return None
            flat = flat * size + i
        if flat in rows or flat in inline:
            return None
        if type(value) is str:
            try:
                inline[flat] = decode_inline(value)
            except InvalidReferenceError:
                return None
            continue
        if type(value) is not list or len(value) != 3:
            return None
        url, offset, length = value
        if (type(url) is not str or type(offset) is not int or type(length) is not int
                or not 0 <= offset <= _MAX_INT64 or not 0 < length <= _MAX_INT64):  # fmt: skip
            return None
        code = position.get(url)
        if code is None:
            if url_order is not None:
                return None
            code = position[url] = len(position)
        rows[flat] = (code, offset, length)
    n = int(np.prod(grid_shape, dtype=np.int64))
    codes = np.full(n, MISSING, dtype=np.int32)
    offsets = np.zeros(n, dtype=np.uint64)
    lengths = np.zeros(n, dtype=np.uint64)
    for flat, (code, offset, length) in rows.items():
        codes[flat], offsets[flat], lengths[flat] = code, offset, length
    for flat in inline:
        codes[flat] = INLINE
    return ChunkManifest.from_checked(
        urls=tuple(position) if url_order is None else tuple(url_order),
        codes=codes.reshape(grid_shape),
        offsets=offsets.reshape(grid_shape),
        lengths=lengths.reshape(grid_shape),
        inline=inline,
    )


def _render(url: Any, templates: Mapping[str, Any]) -> Any:
    """kerchunk's simple templates: ``"{{name}}"`` -> ``templates[name]``."""
    if not isinstance(url, str) or "{{" not in url:
        return url
    try:
        return url.replace("{{", "{").replace("}}", "}").format(**templates)
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidReferenceError(f"URL template {url!r} cannot be rendered ({exc})") from exc
