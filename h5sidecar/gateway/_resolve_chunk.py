"""Which bytes a chunk key of a granule's view stands for: a stored chunk, a virtual shard
(:mod:`~h5sidecar.gateway._shard`) or a virtual re-chunked chunk
(:mod:`~h5sidecar.gateway._rechunk_view`).

No I/O and no caches: :meth:`h5sidecar.gateway.core.Gateway.resolve` answers metadata
documents itself and hands chunk keys here once the array's manifest is loaded.
"""

from __future__ import annotations

from h5sidecar.errors import NotIndexedError
from h5sidecar.gateway._http_rules import etag_of
from h5sidecar.gateway._rechunk_view import virtual_layout
from h5sidecar.gateway._shard import shard_layout
from h5sidecar.gateway._views import GranuleEntry, Resolved, View
from h5sidecar.read import GranuleKeys

__all__ = ["chunk_resolved", "missing_key"]


def chunk_resolved(name: str, entry: GranuleEntry, keys: GranuleKeys, key: str, view: View,
                   max_response_bytes: int) -> Resolved:
    """What chunk ``key`` of granule ``name`` holds in ``view``: inline bytes or byte runs to
    fetch (``keys`` is the entry's key space for the view, its array's manifest loaded).

    Raises
    ------
    NotIndexedError
        No such chunk key (chunks that are not stored are absent: Zarr reads the fill value).
    """
    fetcher = entry.fetcher
    sid = entry.source_id
    if view.rechunk is not None:
        handled, layout = virtual_layout(keys, key, view.rechunk, max_response_bytes)
        if handled:  # a virtual chunk of a plain array (others are served as stored)
            if layout is None:
                raise missing_key(name, key, view)
            etag = etag_of(sid, view.name, key,
                           *(len(r) if isinstance(r, bytes) else r for r in layout.refs))
            return Resolved(name, key, view, "chunk", layout.size, etag, layout=layout,
                            fetcher=fetcher, source_id=sid)  # fmt: skip
    if view.shard:
        found = entry.split_shard_key(key)
        # scalars and structured types are served unsharded (see _shard.sharded_array_doc)
        if found is not None and found[1] and not isinstance(found[0].meta.dtype, list):
            arr, index = found
            layout = shard_layout(arr, index, view.shard)
            if layout is not None:
                etag = etag_of(sid, view.name, key, layout.index)
                return Resolved(name, key, view, "shard", layout.size, etag, layout=layout,
                                fetcher=fetcher, source_id=sid)  # fmt: skip
            raise missing_key(name, key, view)
    ref = keys.resolve(key)
    if ref is None or keys.split_chunk_key(key) is None:
        raise missing_key(name, key, view, note=entry.unsupported_reason(view.zarr_format, key))
    if isinstance(ref, bytes):
        return Resolved(name, key, view, "chunk", len(ref), etag_of(sid, key, ref), data=ref)
    return Resolved(name, key, view, "chunk", ref[2], etag_of(sid, view.name, key, *ref),
                    ref=ref, fetcher=fetcher, source_id=sid)  # fmt: skip


def missing_key(name: str, key: str, view: View, *, note: str = "") -> NotIndexedError:
    """The 404 of a key that ``view`` of granule ``name`` does not hold (``note``: why)."""
    hint = note or (
        "metadata documents are listed in the consolidated metadata; chunks that are not "
        "stored read as the fill value"
    )
    return NotIndexedError(f"no key {key!r} in granule {name!r} ({view.name} view): {hint}")
