"""The Zarr key space of one granule: which keys exist and what each one resolves to.

Shared by the zarr store, the fsspec filesystem and the HTTP gateway.  A key resolves to

* ``bytes`` -- a metadata document (synthesized once) or an inline chunk held in the sidecar;
* a ``(url, offset, length)`` triple -- a chunk stored in a source object;
* ``None`` -- no such key (including chunks never written: readers use the fill value).

Keys are the Zarr v2 keys (``.zmetadata``, ``g/.zgroup``, ``g/v/.zarray``, ``g/v/0.3``) or, for
``zarr_format=3``, ``zarr.json`` documents with the *same* chunk keys (the v3 metadata uses the
``v2`` chunk key encoding, see :mod:`h5sidecar.read.zarr._v3_metadata`).  Nothing here holds one Python
object per chunk: chunk keys are parsed on lookup and generated from the manifest arrays when
listing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Literal

import numpy as np
import ujson

from h5sidecar.read.zarr._v3_metadata import consolidated_metadata_v3
from h5sidecar.references import MISSING, ArrayRefs, GranuleRefs

__all__ = ["ChunkRef", "GranuleKeys", "Resolved"]

ChunkRef = tuple[str, int, int]
Resolved = bytes | ChunkRef | None

ZarrFormat = Literal[2, 3]


def _dumps(obj: object) -> bytes:
    # Same options as the JSON sidecar writer, so documents match a JSON sidecar byte for byte.
    return ujson.dumps(obj, escape_forward_slashes=False, ensure_ascii=False).encode("utf-8")


def _v2_documents(refs: GranuleRefs) -> dict[str, bytes]:
    zmeta = refs.zmetadata()
    docs = {".zmetadata": _dumps({"zarr_consolidated_format": 1, "metadata": zmeta})}
    docs.update((k, _dumps(v)) for k, v in zmeta.items())
    return docs


def _v3_documents(refs: GranuleRefs, unsupported: dict[str, str]) -> dict[str, bytes]:
    nodes = consolidated_metadata_v3(refs, unsupported=unsupported)
    return {(f"{p}/zarr.json" if p else "zarr.json"): _dumps(doc) for p, doc in nodes.items()}


def _load_manifest(arr: ArrayRefs) -> None:
    arr.manifest  # noqa: B018 - the access loads it (blocking I/O, run in a thread)


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


class GranuleKeys:
    """Key lookup and listing over one :class:`~h5sidecar.references.GranuleRefs`.

    Parameters
    ----------
    refs : GranuleRefs
    zarr_format : 2 or 3
        Which metadata documents exist (chunk keys are the same in both).
    """

    def __init__(self, refs: GranuleRefs, zarr_format: ZarrFormat = 2) -> None:
        if zarr_format not in (2, 3):
            raise ValueError(f"zarr_format must be 2 or 3, got {zarr_format!r}")
        self.refs = refs
        self.zarr_format: ZarrFormat = zarr_format
        #: arrays left out of this view, with why (v3 cannot express some data types)
        self.unsupported: dict[str, str] = {}
        self.documents: dict[str, bytes] = (
            _v2_documents(refs) if zarr_format == 2 else _v3_documents(refs, self.unsupported)
        )
        self.arrays = {p: a for p, a in refs.arrays.items() if p not in self.unsupported}
        # directory listing of every node: metadata file names + child node names
        self._entries: dict[str, set[str]] = {g: set() for g in refs.groups}
        for path in self.arrays:
            self._entries[path] = set()
        for key in self.documents:
            node, _, name = key.rpartition("/")
            self._entries.setdefault(node, set()).add(name)
        for node in list(self._entries):
            if node:
                parent, _, name = node.rpartition("/")
                self._entries.setdefault(parent, set()).add(name)

    # -- lookup -----------------------------------------------------------------------------
    def split_chunk_key(self, key: str) -> tuple[ArrayRefs, tuple[int, ...]] | None:
        """``(array, chunk index)`` of a chunk key, or ``None`` when ``key`` is not one."""
        path, _, name = key.rpartition("/")
        arr = self.arrays.get(path)
        if arr is None or not name:
            return None
        grid = arr.meta.grid_shape  # not the manifest's: a lazy array's may not be loaded yet
        parts = name.split(".")
        if not grid:
            return (arr, ()) if name == "0" else None
        if len(parts) != len(grid) or not all(p.isdigit() and p.isascii() for p in parts):
            return None
        index = tuple(int(p) for p in parts)
        # "01" and "1" must not both name chunk 1: only canonical decimal spellings exist
        if any(str(i) != p for i, p in zip(index, parts, strict=True)):
            return None
        if any(i >= g for i, g in zip(index, grid, strict=True)):
            return None
        return arr, index

    def unloaded(self, keys: list[str]) -> list[ArrayRefs]:
        """Arrays whose manifest ``keys`` need and which is not in memory yet (lazy sidecars)."""
        out: dict[str, ArrayRefs] = {}
        for key in keys:
            if key in self.documents:
                continue
            path = key.rpartition("/")[0]
            arr = self.arrays.get(path)
            if arr is not None and path not in out and not arr.manifest_loaded:
                out[path] = arr
        return list(out.values())

    async def load_manifests(self, keys: list[str]) -> None:
        """Load, in threads, the manifests ``keys`` need that are not in memory yet.

        Async callers await this before :meth:`resolve`: a lazily opened Parquet sidecar
        fetches an array's record files on the first request of one of its chunks, and doing
        that inline would block the event loop (or deadlock, on fsspec's own loop).
        """
        pending = self.unloaded(keys)
        if pending:
            await asyncio.gather(*(asyncio.to_thread(_load_manifest, a) for a in pending))

    def resolve(self, key: str) -> Resolved:
        """What ``key`` holds: document/inline ``bytes``, a ``(url, offset, length)``, or None."""
        doc = self.documents.get(key)
        if doc is not None:
            return doc
        found = self.split_chunk_key(key)
        if found is None:
            return None
        arr, index = found
        return arr.manifest.get(index)

    def size(self, key: str) -> int | None:
        """Byte size of the value of ``key`` (``None`` if absent) without fetching anything."""
        ref = self.resolve(key)
        if ref is None:
            return None
        return len(ref) if isinstance(ref, bytes) else ref[2]

    def is_node(self, path: str) -> bool:
        """True for a group or array path (``""`` is the root group)."""
        return path in self._entries

    def is_array(self, path: str) -> bool:
        """True for an array path."""
        return path in self.arrays

    # -- listing ----------------------------------------------------------------------------
    def chunk_names(self, arr: ArrayRefs) -> Iterator[str]:
        """Names (``"i.j"``) of the chunks of ``arr`` that exist (stored or inline)."""
        codes = arr.manifest.codes
        if codes.ndim == 0:
            if int(codes) != MISSING:
                yield "0"
            return
        present = np.argwhere(codes != MISSING)
        for row in present.tolist():
            yield ".".join(map(str, row))

    def all_keys(self) -> Iterator[str]:
        """Every key: metadata documents, then the existing chunks of every array."""
        yield from self.documents
        for path, arr in self.arrays.items():
            for name in self.chunk_names(arr):
                yield f"{path}/{name}"

    def keys_with_prefix(self, prefix: str) -> Iterator[str]:
        """Every key that starts with ``prefix`` (plain string prefix, as zarr defines it)."""
        if not prefix:
            yield from self.all_keys()
            return
        for key in self.documents:
            if key.startswith(prefix):
                yield key
        for path, arr in self.arrays.items():
            base = f"{path}/"
            if base.startswith(prefix):
                for name in self.chunk_names(arr):
                    yield base + name
            elif prefix.startswith(base):
                rest = prefix[len(base) :]
                for name in self.chunk_names(arr):
                    if name.startswith(rest):
                        yield base + name

    def list_dir(self, prefix: str) -> Iterator[str]:
        """Names directly under ``prefix`` (a node path, with or without a trailing ``/``)."""
        node = prefix.rstrip("/")
        entries = self._entries.get(node)
        if entries is None:
            return
        yield from sorted(entries)
        arr = self.arrays.get(node)
        if arr is not None:
            yield from self.chunk_names(arr)
