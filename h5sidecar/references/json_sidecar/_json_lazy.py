"""JSON sidecars parsed lazily: every array's metadata now, its chunk references on first use.

Parsing the JSON text itself is cheap (ujson: a few ms for a sidecar of a thousand arrays);
what costs is turning each array's chunk references into a validated
:class:`~h5sidecar.references.ChunkManifest` (chunk-name parsing, URL encoding, range checks:
~0.2 ms an array, so ~0.25 s for an ATL03 granule).  An analysis that reads three variables of
six beams needs 18 of those 935 manifests.  :func:`lazy_from_kerchunk` builds each array as a
:class:`~h5sidecar.references._lazy_refs.LazyArrayRefs` whose manifest is built, from the parsed
references kept in memory, the first time it is used -- as Parquet sidecars already load
their record files on first use.

Only sidecars written by h5sidecar qualify (their extras give every array's status and URL
table without looking at the chunks); others are read eagerly.  What is validated up front:
the extras, every ``.zarray``, that every chunk reference belongs to an array, and that no
URL holds control characters; each array's chunk references are validated when its manifest is
built (an :class:`~h5sidecar.errors.InvalidReferenceError` then, as for a lazy Parquet sidecar).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._assemble import ChunkColumns, build_manifest, known_sizes
from h5sidecar.references._assemble import _check_within_source as check_within_source
from h5sidecar.references._assemble import _checksums as array_checksums
from h5sidecar.references._extras import ArrayExtras, Extras
from h5sidecar.references._keys import parse_chunk_names
from h5sidecar.references._lazy_refs import LazyArrayRefs
from h5sidecar.references._manifest import ChunkManifest
from h5sidecar.references._model import GranuleRefs
from h5sidecar.references._zmeta import ZarrNodes
from h5sidecar.references.json_sidecar._kerchunk_json import (
    assemble_parts,
    chunk_columns,
    few_chunks_manifest,
    load_json,
    split_kerchunk,
)

__all__ = ["JsonManifests", "decode_json_lazy", "lazy_from_kerchunk"]

#: NUL and other control characters never appear in a real object key or path.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Memory charged per chunk reference not yet built into a manifest (a parsed
#: ``[url, offset, length]`` list and its key: Python objects, ~200 bytes).
_RAW_BYTES_PER_REF = 200

Entries = dict[str, tuple[list[str], list[Any]]]


class JsonManifests:
    """Builds the manifests of a parsed JSON sidecar's arrays on first use; thread-safe.

    Parameters
    ----------
    entries : dict
        Array path -> (chunk names, reference values) as parsed from the JSON.
    metas : mapping
        Array path -> :class:`ArrayMeta`.
    extras : Extras
        The sidecar's extras (source identity and every array's URL table).
    templates : mapping
        kerchunk URL templates.
    """

    def __init__(
        self,
        entries: Entries,
        metas: Mapping[str, ArrayMeta],
        extras: Extras,
        templates: Mapping[str, Any],
    ) -> None:
        self._entries = entries
        self._metas = dict(metas)
        self._extras = extras
        self._templates = dict(templates)
        self._known = known_sizes(extras)
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[str, tuple[ChunkManifest, np.ndarray | None]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # built manifests travel as built (their raw references are gone), the rest raw
        with self._lock:
            state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
            state["_entries"] = dict(self._entries)
            state["_loaded"] = dict(self._loaded)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- ManifestLoader ---------------------------------------------------------------------
    def urls(self, path: str) -> tuple[str, ...]:
        """The URLs of ``path``'s manifest, from the extras (no parsing)."""
        return self._extras.arrays[path].urls or ()

    def is_loaded(self, path: str) -> bool:
        """True when ``path``'s manifest has been built."""
        return path in self._loaded

    def resident_nbytes(self, path: str) -> int:
        """Bytes held for ``path``: its manifest once built, else an estimate of its parsed
        references (so a byte-bounded cache of sidecars charges unbuilt arrays too)."""
        hit = self._loaded.get(path)
        if hit is not None:
            return hit[0].nbytes + (0 if hit[1] is None else hit[1].nbytes)
        raw = self._entries.get(path)
        return 0 if raw is None else _RAW_BYTES_PER_REF * len(raw[0])

    def load(self, path: str) -> tuple[ChunkManifest, np.ndarray | None]:
        """``(manifest, checksums)`` of ``path``, built once from the parsed references.

        Raises
        ------
        InvalidReferenceError
            When the array's chunk references are malformed or inconsistent.
        """
        hit = self._loaded.get(path)
        if hit is not None:
            return hit
        with self._lock:  # one builder per sidecar: builds are short and share the raw dict
            hit = self._loaded.get(path)
            if hit is None:
                hit = self._loaded[path] = self._build(path)
                self._entries.pop(path, None)  # the manifest replaces the parsed references
            return hit

    def _build(self, path: str) -> tuple[ChunkManifest, np.ndarray | None]:
        meta = self._metas[path]
        ax = self._extras.arrays.get(path, ArrayExtras())
        names, values = self._entries.get(path, ([], []))
        manifest = None if self._templates else few_chunks_manifest(meta.grid_shape, names,
                                                                    values, ax.urls)
        if manifest is None:
            if names:
                flat = parse_chunk_names(names, meta.grid_shape, path)
                cols = chunk_columns(path, flat, values, self._templates)
            else:
                cols = ChunkColumns()
            manifest = build_manifest(path, meta.grid_shape, cols, ax.urls)
        check_within_source(path, manifest, self._known)
        return manifest, array_checksums(path, ax, meta.grid_shape, {})


def decode_json_lazy(data: bytes | str) -> GranuleRefs:
    """Parse a JSON sidecar; written by h5sidecar, its manifests are built on first use (else
    it is read whole, as :func:`~h5sidecar.references.json_sidecar._kerchunk_json.decode_json` does).

    Raises
    ------
    InvalidReferenceError
        When the sidecar is malformed (see the module docstring for what is checked when).
    """
    parts = split_kerchunk(load_json(data))
    if parts.extras is not None:
        refs = lazy_from_kerchunk(parts.nodes, parts.metas, parts.entries, parts.extras,
                                  parts.templates)
        if refs is not None:
            return refs
    return assemble_parts(parts)


def lazy_from_kerchunk(
    nodes: ZarrNodes,
    metas: Mapping[str, ArrayMeta],
    entries: Entries,
    extras: Extras,
    templates: Mapping[str, Any],
) -> GranuleRefs | None:
    """:class:`GranuleRefs` whose arrays build their manifests on first use, or ``None`` when
    the sidecar does not qualify (an array without extras or without a URL table in them).

    Raises
    ------
    InvalidReferenceError
        For chunk references of no array and URLs with control characters.
    """
    if any(
        path not in extras.arrays or extras.arrays[path].urls is None for path in metas
    ):
        return None
    stray = set(entries) - set(metas)
    if stray:
        path = min(stray)
        raise InvalidReferenceError(
            f"reference {path + '/' if path else ''}{entries[path][0][0]!r} belongs to no "
            "array (no .zarray); re-create the sidecar"
        )
    for url in {extras.source.url, *(u for a in extras.arrays.values() for u in a.urls or ())}:
        if _CONTROL.search(url):
            raise InvalidReferenceError(
                f"source URL {url!r} of the sidecar contains a NUL or control character; the "
                "sidecar is corrupt: re-index the granule"
            )
    loader = JsonManifests(entries, metas, extras, templates)
    arrays = {
        path: LazyArrayRefs(
            path,
            meta,
            loader,
            status=extras.arrays[path].status,
            note=extras.arrays[path].note,
            zarray_fill=nodes.arrays[path][0].get("fill_value"),
        )
        for path, meta in metas.items()
    }
    return GranuleRefs(
        source=extras.source,
        groups=nodes.groups,
        arrays=arrays,
        skipped=extras.skipped,
        extra=extras.extra,
        members=extras.members,
    )
