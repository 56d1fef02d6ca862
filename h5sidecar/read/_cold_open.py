"""The first open of a Parquet sidecar on an object store: one round trip instead of three.

Opening a sidecar through the process-wide cache needs its identity (the cache key: a HEAD of
``.zmetadata``), then ``.zmetadata`` (a GET), then -- when the first array is read -- the
all-arrays manifests file (another GET): three round trips in a row before the first data
request.  When this process holds no entry for the sidecar (a cold open), the three are sent
at once instead.  The manifests file is fetched up to ``BULK_LOAD_BYTES`` (a larger one is
read per array later, as before); an open that reads no data pays for that download (bounded
by the cap) in exchange for the round trip every reading open saves.

A concurrent HEAD and GET may see two versions of a sidecar rewritten in between, so the bytes
are checked against the identity before they are cached under it: their size must be the size
the HEAD saw, and when the ETag is an MD5 of the content (S3 objects written in one PUT) it must
be the bytes' MD5.  On a mismatch the open is retried once in order (HEAD, then GET); if the
sidecar changed again meanwhile, the bytes read are returned but not cached.  When the ETag
cannot be checked (other stores, encrypted objects) ``.zmetadata`` is fetched again after the
HEAD returned: the order the sequential open always had.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Mapping
from typing import Any, Literal

log = logging.getLogger("h5sidecar.read")

__all__ = ["open_cold"]

#: An ETag that is the hex MD5 of the object (a single-part S3 upload without KMS).
_MD5_ETAG = re.compile(r'"?([0-9a-fA-F]{32})"?')

Check = Literal["same", "changed", "unknown"]


def open_cold(path: str, options: Mapping[str, Any], cache: Any) -> tuple[tuple, Any] | None:
    """``(identity, refs)`` of the Parquet sidecar at ``path`` from one round of concurrent
    requests (identity, ``.zmetadata``, manifests file), cached in ``cache`` under the identity
    when the bytes are proven to be the version it names.

    Returns None when this does not apply -- a local or synchronous filesystem, a name ending
    in ``.json``, an entry of this sidecar already in ``cache``, no ``.zmetadata`` at ``path``
    -- and the caller opens the sequential way.
    """
    import fsspec

    from h5sidecar.credentials import fsspec_options
    from h5sidecar.read._sidecar_key import key_from_info, options_key
    from h5sidecar.references import parquet_refs

    fs, p = fsspec.core.url_to_fs(path, **fsspec_options(str(path), dict(options)))
    p = p.rstrip("/")
    if not getattr(fs, "async_impl", False) or p.endswith(".json"):
        return None  # local files cost no round trip; JSON is one object
    meta = f"{p}/.zmetadata"
    opts_key = options_key(options)
    if _holds(cache, (fs.protocol, p, opts_key), meta):
        return None  # warm: one HEAD, then (usually) a hit
    s3 = _get_carries_identity(fs)
    got = _run(fs, _first_round, fs, p, meta, s3=s3)
    if got is None or (s3 and not got[0].get(_FROM_GET)):
        return None  # no sidecar, or an S3 answer without an ETag: no HEAD to lean on
    info, zmeta, bulk = got
    check = _check(info, zmeta)
    if check == "unknown":
        # the GET may have been answered before the HEAD: read again, now that it returned
        from h5sidecar._compat.fsspec import run_sync

        zmeta2, bulk2 = run_sync(_gets, fs, p, meta, loop=fs.loop)
        if isinstance(zmeta2, BaseException):
            return None  # gone meanwhile (being rewritten?): the sequential open says what
        bulk = bulk if zmeta2 == zmeta else _usable(bulk2)
        zmeta, check = zmeta2, ("same" if _size_agrees(info, zmeta2) else "changed")
    if check == "changed":
        log.debug("%s changed while it was being opened; opening it again in order", meta)
        got = _run(fs, _ordered_round, fs, p, meta)
        if got is None:
            return None
        info, zmeta, bulk = got
        check = _check(info, zmeta)
        if check == "unknown":  # HEAD, then GET: as safe as the sequential open
            check = "same" if _size_agrees(info, zmeta) else "changed"
    identity = key_from_info(fs, meta, info, options)
    refs = parquet_refs(path, dict(options), zmeta, bulk, fs=fs, root=p)
    if check != "same":
        log.debug("%s changed again while it was being opened: not cached", meta)
        return identity, refs
    hit = cache.get(identity)  # another thread may have opened it meanwhile
    if hit is not None:
        return identity, hit
    cache.put(identity, refs, nbytes=len(zmeta) + len(bulk or b""))
    return identity, refs


def _holds(cache: Any, group: tuple, meta: str) -> bool:
    """Whether ``cache`` holds any version of the sidecar ``group`` names: in constant time
    when the cache counts its entries by sidecar (:data:`~h5sidecar.read._shared_caches.SIDECARS`
    does), else by a scan of its keys (a cache of the caller's own)."""
    if getattr(cache, "group", None) is not None:
        return bool(cache.has_group(group))
    protocol, p, opts_key = group
    return any(isinstance(k, tuple) and len(k) == 5 and k[0] == protocol and k[1] in (p, meta)
               and k[4] == opts_key for k in cache.key_snapshot())  # fmt: skip


def _check(info: Mapping[str, Any], data: bytes) -> Check:
    """Whether ``data`` is the object ``info`` describes: ``"changed"`` when provably not,
    ``"same"`` when provably so (``info`` came with the bytes, or its ETag is their MD5), else
    ``"unknown"``."""
    if not _size_agrees(info, data):
        return "changed"
    if info.get(_FROM_GET):
        return "same"
    etag = info.get("ETag") or info.get("etag")
    m = _MD5_ETAG.fullmatch(etag) if isinstance(etag, str) else None
    if m is None:
        return "unknown"
    digest = hashlib.md5(data, usedforsecurity=False).hexdigest()
    # a 32-digit ETag need not be an MD5 (stores derive ETags as they like): no proof either way
    return "same" if digest == m.group(1).lower() else "unknown"


def _size_agrees(info: Mapping[str, Any], data: bytes) -> bool:
    """False when ``info`` names a size and ``data`` has another (an HTTP server may send no
    length with a HEAD: then the size proves nothing)."""
    size = info.get("size")
    return size is None or size == len(data)


#: Marks an ``info`` taken from the GET response that carried the bytes.
_FROM_GET = "h5sidecar_from_get"


def _get_carries_identity(fs: Any) -> bool:
    """True for s3fs, whose GET answer carries the object's ETag and size: the identity then
    comes from the very response that carried the bytes, and no HEAD is sent."""
    from h5sidecar._compat.s3fs import get_object_available

    return get_object_available(fs)


async def _s3_get(fs: Any, path: str) -> tuple[dict[str, Any], bytes]:
    """``(info, bytes)`` of one whole-object GET through s3fs: ``info`` holds the ETag and
    size of the object those bytes are (what a HEAD answers), so the two cannot disagree."""
    from h5sidecar._compat.s3fs import s3_get_object

    resp = await s3_get_object(fs, path)
    try:
        data = await resp["Body"].read()
    finally:
        resp["Body"].close()
    if not resp.get("ETag"):
        return {"size": resp.get("ContentLength")}, data  # proves nothing: "unknown"
    return {"ETag": resp["ETag"], "size": resp.get("ContentLength"), "type": "file",
            _FROM_GET: True}, data  # fmt: skip


async def _gets(fs: Any, p: str, meta: str, *, s3: bool = False) -> list[Any]:
    """``[.zmetadata or (info, .zmetadata), manifests file]`` (exceptions returned)."""
    from h5sidecar.references import BULK_LOAD_BYTES, MANIFESTS_FILE

    return list(await asyncio.gather(
        # start=0: one GET, without the HEAD s3fs sends before a whole-object read
        _s3_get(fs, meta) if s3 else fs._cat_file(meta, start=0),
        fs._cat_file(f"{p}/{MANIFESTS_FILE}", start=0, end=BULK_LOAD_BYTES + 1),
        return_exceptions=True,
    ))  # fmt: skip


async def _first_round(fs: Any, p: str, meta: str, *, s3: bool) -> Any:
    """Identity and both files at once: two GETs on S3 (the identity comes with the bytes),
    else a HEAD beside them."""
    if s3:
        pair, bulk = await _gets(fs, p, meta, s3=True)
        if isinstance(pair, BaseException):
            return (pair, None, None)  # never an exception alone: fsspec's sync raises those
        return (pair[0], pair[1], bulk)
    info, (zmeta, bulk) = await asyncio.gather(fs._info(meta), _gets(fs, p, meta),
                                               return_exceptions=True)  # fmt: skip
    return (info, zmeta, bulk)


async def _ordered_round(fs: Any, p: str, meta: str) -> Any:
    """The HEAD, then both GETs once it returned."""
    try:
        info = await fs._info(meta)
    except Exception as exc:  # noqa: BLE001 - handed to _run, which sorts and raises
        return (exc, None, None)
    zmeta, bulk = await _gets(fs, p, meta)
    return (info, zmeta, bulk)


def _run(fs: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """``(info, .zmetadata, manifests file or None)`` from one round ``func`` run on ``fs``'s
    loop; None when there is no ``.zmetadata`` (not a Parquet sidecar, or one being rewritten:
    the sequential open then says which)."""
    from h5sidecar._compat.fsspec import run_sync

    info, zmeta, bulk = run_sync(func, *args, loop=fs.loop, **kwargs)
    for value in (info, zmeta):
        if isinstance(value, FileNotFoundError | NotADirectoryError):
            return None
        if isinstance(value, BaseException):
            raise value
    if not isinstance(info, Mapping) or info.get("type") == "directory":
        return None
    return info, zmeta, _usable(bulk)


def _usable(bulk: Any) -> bytes | None:
    """The fetched manifests file, or None when absent, unreadable or larger than a lazy open
    reads whole: the loader then fetches it (per array, or whole) when a manifest is needed,
    and reports its errors then."""
    from h5sidecar.references import BULK_LOAD_BYTES

    if isinstance(bulk, BaseException) or (bulk is not None and len(bulk) > BULK_LOAD_BYTES):
        return None
    return bulk
