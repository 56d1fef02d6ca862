"""Sidecar references written into an Icechunk repository as virtual chunk references.

:func:`write_icechunk` turns any :class:`~h5sidecar.references.GranuleRefs` (one granule, or a
datacube whose manifests point into many objects) into one commit of an Icechunk repository:

* every group with its attributes, every array with the Zarr v3 metadata the sidecar's v3 views
  serve (:func:`h5sidecar.read.zarr._v3_metadata.array_metadata_v3`: same data type, codecs, fill value and
  ``_FillValue`` encoding), except the chunk key encoding, which is Icechunk's own (``c/i/j``);
* every stored chunk as a virtual reference (URL, offset, length), with the source's identity as
  Icechunk's checksum (the ETag, else the last-modified time), so Icechunk refuses to serve a
  chunk of a replaced source; chunks held inside the sidecar as real chunks; missing chunks
  absent (they read as the fill value);
* one virtual chunk container per source prefix (the tightest common directory of the sources
  in each bucket, or on the local disk), authorized for the write; readers authorize it again
  (:func:`~h5sidecar.workflows.open_icechunk`), and Icechunk refuses references outside every
  container.

Arrays Zarr v3 cannot represent without changing values are left out, each with a
:class:`~h5sidecar.references.Skipped` record (logged, added to ``left_out`` and to the
commit's metadata), never written wrongly.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from h5sidecar.errors import (
    ErrorKind,
    InvalidReferenceError,
    UnsupportedFeatureError,
    require_extra,
)
from h5sidecar.references import GranuleRefs, Skipped, SourceInfo
from h5sidecar.sources import normalize_url
from h5sidecar.workflows.icechunk._icechunk_repo import container_prefixes, open_repository

if TYPE_CHECKING:
    import icechunk

__all__ = ["write_icechunk"]

log = logging.getLogger("h5sidecar.workflows")

#: Icechunk's chunk keys (``array/c/0/1``); sidecars' v2 keys (``0.1``) are not Icechunk keys.
_ICECHUNK_KEYS: dict[str, Any] = {"name": "default", "configuration": {"separator": "/"}}

#: Chunks handed to one ``set_virtual_refs`` call (bounds the per-chunk spec objects alive).
_BATCH = 65_536

#: Characters a location may hold unencoded (RFC 3986 path characters).
_URL_SAFE = "/:@!$&'()*+,;=-._~"


def write_icechunk(
    refs: GranuleRefs,
    repo: str | os.PathLike[str] | icechunk.Storage | icechunk.Repository,
    *,
    branch: str = "main",
    message: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    sources: Mapping[str, SourceInfo] | None = None,
    left_out: list[Skipped] | None = None,
) -> str:
    """Write ``refs`` as one commit of an Icechunk repository; return the snapshot id.

    The branch then holds exactly ``refs``: nodes of an earlier commit are replaced (their
    history stays readable by snapshot id).  Created when missing, ``branch`` starts at
    ``main``'s tip.  Nothing is committed when an error is raised.

    Parameters
    ----------
    refs : GranuleRefs
        The references (any number of source URLs).
    repo : str, path-like, icechunk.Storage or icechunk.Repository
        A local directory or ``s3://bucket/prefix`` (created when absent), or Icechunk's own.
    branch : str
        Branch to commit on.
    message : str, optional
        Commit message (default names the source).
    storage_options : mapping, optional
        S3 options as the rest of h5sidecar takes them (``endpoint_url``, ``key``, ``secret``,
        ``token``, ``anon``, ``client_kwargs={"region_name": ...}``), used for an ``s3://``
        repository and for reading S3 sources; ``http://`` endpoints are allowed.
    sources : mapping, optional
        URL -> :class:`~h5sidecar.references.SourceInfo` of every source the manifests name
        (default: ``refs.source``; other objects are identified at write time, one HEAD or
        stat each).  The identity becomes Icechunk's checksum.
    left_out : list, optional
        Receives a :class:`~h5sidecar.references.Skipped` for each array left out.

    Returns
    -------
    str
        The snapshot id of the commit.

    Raises
    ------
    InvalidReferenceError
        When a source has no identity (no ETag and no modification time) or a reference falls
        outside the configured containers.
    """
    require_extra("icechunk", "icechunk", feature="write_icechunk")
    identities = _identities(refs, sources, storage_options)
    prefixes = container_prefixes(identities)
    repository = open_repository(repo, prefixes, storage_options)
    if branch not in repository.list_branches():
        repository.create_branch(branch, repository.lookup_branch("main"))
    session = repository.writable_session(branch)
    skipped: list[Skipped] = []
    docs = _node_documents(refs, skipped)
    from h5sidecar._compat.fsspec import run_sync

    run_sync(_write, session.store, refs, docs, identities)
    for s in skipped:
        log.warning("icechunk: %s left out (%s): %s", s.path, s.kind, s.reason)
    if left_out is not None:
        left_out.extend(skipped)
    metadata = {
        "h5sidecar": {
            "source": refs.source.to_dict(),
            "left_out": [s.to_dict() for s in skipped],
            "skipped": [s.to_dict() for s in refs.skipped],
            # what an append to a cube reads back (members, the cube's record)
            "extra": dict(refs.extra),
            "members": [m.to_dict() for m in refs.members],
        }
    }
    text = message or f"h5sidecar: references of {refs.source.url}"
    return str(session.commit(text, metadata=metadata))


# -- sources and their identities ------------------------------------------------------------------
def _location(url: str) -> str:
    """Icechunk's spelling of a source URL: ``s3://bucket/key`` or ``file:///abs/path``."""
    norm = normalize_url(url)
    if "://" in norm and not norm.startswith("s3://"):
        raise UnsupportedFeatureError(
            f"{url}: Icechunk virtual references support S3 and local sources only"
        )
    loc = norm if norm.startswith("s3://") else "file://" + norm
    if quote(loc, safe=_URL_SAFE) != loc:
        # icechunk 1.1 matches containers against percent-encoded locations inconsistently
        # (written, then "no virtual chunk container can handle" on read): refuse up front
        raise UnsupportedFeatureError(
            f"{url}: Icechunk cannot reference paths that need percent-encoding (spaces, "
            "non-ASCII, '%'); move or link the files to a plain path"
        )
    return loc


def _identities(
    refs: GranuleRefs,
    sources: Mapping[str, SourceInfo] | None,
    storage_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Icechunk location -> checksum (ETag str or datetime) of every referenced source.

    Identities come from ``sources`` (default: the granule's own, taken when it was indexed).
    Other objects the manifests name (external raw data, virtual dataset sources) are identified
    now, with one HEAD / stat each.
    """
    from h5sidecar.sources import source_identity

    known = {_location(u): s for u, s in (sources or {refs.source.url: refs.source}).items()}
    out: dict[str, Any] = {}
    for arr in refs.arrays.values():
        for url in arr.urls:  # lazy arrays answer without loading their manifest
            loc = _location(url)
            if loc in out:
                continue
            info = known.get(loc) or source_identity(url, storage_options)
            checksum = _checksum(info)
            if checksum is None:
                raise InvalidReferenceError(
                    f"{url}: its store gives neither an ETag nor a modification time, so Icechunk "
                    "could not detect its replacement; pass sources={url: SourceInfo(...)} "
                    "with one"
                )
            out[loc] = checksum
    return out


def _checksum(info: SourceInfo) -> str | dt.datetime | None:
    """The ETag, else the modification time rounded *up* to whole seconds.

    Icechunk keeps last-modified checksums in whole seconds and refuses objects modified after
    it; rounding down would refuse the unchanged source itself.  So a replacement within the
    same second as the indexed version is not detected (ETags have no such gap).
    """
    if info.etag:
        return info.etag
    if info.mtime_ns is not None:
        seconds = -(-int(info.mtime_ns) // 1_000_000_000)
        return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return None


# -- nodes and chunks -----------------------------------------------------------------------------
def _representable(arr: Any) -> str:
    """Why Icechunk + Zarr v3 cannot carry ``arr`` faithfully, or ``""``."""
    if isinstance(arr.meta.dtype, list) or arr.meta.numpy_dtype.fields is not None:
        return ("structured (compound) type: Zarr v3 has no specified structured data type, and "
                "zarr cannot keep the byte order of its fields; read it through the sidecar")  # fmt: skip
    return ""


def _node_documents(refs: GranuleRefs, skipped: list[Skipped]) -> dict[str, dict[str, Any]]:
    """Node path -> ``zarr.json`` document of every group and representable array."""
    from h5sidecar.read import array_metadata_v3, group_metadata_v3

    docs = {g: group_metadata_v3(attrs) for g, attrs in refs.groups.items()}
    for path, arr in refs.arrays.items():
        reason = _representable(arr)
        if not reason:
            try:
                doc = array_metadata_v3(arr.meta, fill_value=arr.zarray_fill_value(), path=path)
            except UnsupportedFeatureError as exc:
                reason = str(exc)
        if reason:
            skipped.append(Skipped(path, ErrorKind.UNSUPPORTED_DTYPE, reason))
            continue
        docs[path] = {**doc, "chunk_key_encoding": _ICECHUNK_KEYS}
    return {path: _strict_json(doc) for path, doc in docs.items()}


_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _strict_json(obj: Any) -> Any:
    """``obj`` with non-finite floats spelled ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``.

    Icechunk parses ``zarr.json`` as strict JSON and refuses the bare ``NaN`` zarr would write
    ("bad metadata"); Zarr v3 spells special floats as these strings.
    """
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else _NON_FINITE[obj]
    if isinstance(obj, dict):
        return {k: _strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict_json(v) for v in obj]
    return obj


async def _write(
    store: Any, refs: GranuleRefs, docs: dict[str, dict[str, Any]], identities: dict[str, Any]
) -> None:
    from zarr.buffer import default_buffer_prototype

    from h5sidecar._compat.zarr import validate_array_v3_metadata

    buffer = default_buffer_prototype().buffer
    await store.clear()  # the branch holds exactly ``refs`` (the history keeps the rest)
    for path, doc in docs.items():
        if doc["node_type"] == "array":
            validate_array_v3_metadata(doc)  # zarr validates what it will have to read
        key = f"{path}/zarr.json" if path else "zarr.json"
        await store.set(key, buffer.from_bytes(json.dumps(doc, allow_nan=False).encode()))
    for path, arr in refs.arrays.items():
        if path not in docs:
            continue
        manifest = arr.manifest
        await _set_virtual(store, path, manifest, identities)
        # chunks held in the sidecar become real chunks of the repository
        await asyncio.gather(*(
            store.set(_chunk_key(path, flat, manifest.grid_shape), buffer.from_bytes(data))
            for flat, data in manifest.inline.items()
        ))  # fmt: skip


def _chunk_key(path: str, flat: int, grid: tuple[int, ...]) -> str:
    """Icechunk's key of the chunk at C-order position ``flat`` (``path/c`` for scalars)."""
    index = np.unravel_index(flat, grid) if grid else ()
    return "/".join([path, "c", *(str(int(i)) for i in index)])


async def _set_virtual(
    store: Any, path: str, manifest: Any, identities: dict[str, Any],
    origin: tuple[int, ...] | None = None,
) -> None:
    """Every stored chunk of one array as virtual references, ``_BATCH`` chunks per call.

    ``origin``: chunk index of the manifest's first chunk in the array (an appended slab).
    """
    import icechunk as ic

    codes = manifest.codes.reshape(manifest.grid_shape or (1,))
    where = np.nonzero(codes >= 0)
    if not where[0].size:
        return
    locs = [_location(u) for u in manifest.urls]
    etag = [identities[u] if isinstance(identities[u], str) else None for u in locs]
    when = [identities[u] if isinstance(identities[u], dt.datetime) else None for u in locs]
    stacked = np.stack(where, axis=1)[:, : len(manifest.grid_shape)]
    index = (stacked + np.asarray(origin, dtype=stacked.dtype) if origin else stacked).tolist()
    code = codes[where].tolist()
    offset = manifest.offsets.reshape(codes.shape)[where].tolist()
    length = manifest.lengths.reshape(codes.shape)[where].tolist()
    for start in range(0, len(code), _BATCH):
        stop = start + _BATCH
        rows = zip(index[start:stop], code[start:stop], offset[start:stop],
                   length[start:stop], strict=True)  # fmt: skip
        specs = [
            ic.VirtualChunkSpec(i, locs[c], o, n, etag_checksum=etag[c],
                                last_updated_at_checksum=when[c])
            for i, c, o, n in rows
        ]
        failed = await store.set_virtual_refs_async(path, specs, validate_containers=True)
        if failed:
            raise InvalidReferenceError(
                f"{path}: {len(failed)} chunk reference(s) (first {failed[0]}) lie outside the "
                "repository's virtual chunk containers; Icechunk would not read them"
            )
