"""Reading one granule's (or cube's) sidecar into the gateway's :class:`GranuleEntry`: its
identity checked against the cached entry, the references parsed in a thread, the store's
failures said as the gateway's errors, and the sources its fetcher may read.

Kept apart from :mod:`h5sidecar.gateway.core` (which finds granules and caches entries) so
that each holds one concern.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from h5sidecar.errors import H5SidecarError, NotIndexedError, SourceReadError
from h5sidecar.gateway._views import GranuleEntry
from h5sidecar.read import is_cube, load_refs, sidecar_identity
from h5sidecar.references import GranuleRefs
from h5sidecar.settings import ReadSettings

__all__ = ["load_entry"]

log = logging.getLogger("h5sidecar.gateway")


async def load_entry(name: str, url: str, source: str | None, cached: GranuleEntry | None, *,
                     is_cube_name: bool, read: ReadSettings, allowed: tuple[str, ...],
                     storage_options: dict[str, Any], max_bytes: int) -> GranuleEntry:
    """The entry of ``name`` whose sidecar is ``url`` (``source``: its recorded source, allowed
    even outside the runs' roots): ``cached`` itself when its sidecar did not change.

    ``is_cube_name``: served as a cube (it must be one); ``allowed``: the gateway's
    allow-list prefixes; ``max_bytes``: the sidecar cache's size (an entry larger is logged).

    Raises
    ------
    NotIndexedError
        The sidecar is missing or not references, or a cube is given as a granule's sidecar.
    SourceReadError
        The store holding DEST failed.
    """
    try:
        identity = await asyncio.to_thread(sidecar_identity, url, storage_options)
        if cached is not None and cached.identity == identity:
            cached.checked_at = time.monotonic()
            return cached
        refs: GranuleRefs = await asyncio.to_thread(load_refs, url, storage_options, cache=None)
    except NotIndexedError as exc:
        if not is_cube_name:
            raise
        raise NotIndexedError(
            f"the cube {name!r} ({url}) is not kerchunk JSON or Parquet references ({exc}); "
            "serve a cube written by `h5sidecar cube --format parquet|json` (an Icechunk "
            "repository is read with icechunk itself)"
        ) from exc
    except H5SidecarError:
        raise
    except OSError as exc:  # the store holding DEST failed (network, permissions)
        raise SourceReadError(
            f"reading the sidecar of {name!r} failed: {exc}. Check that DEST is reachable "
            "with the gateway's storage options and credentials, then retry."
        ) from exc
    if is_cube_name and not is_cube(refs):
        raise NotIndexedError(
            f"{url}, given as the cube {name!r}, is one granule's sidecar, not a cube: "
            "build a cube with `h5sidecar cube DEST -o CUBE`, or serve the granule from DEST"
        )
    if is_cube(refs):
        # the fetcher allows exactly the cube's members (and companion files beside them);
        # the gateway checks its own allow-list first, as for granules
        read = dataclasses.replace(read, allowed_prefixes=())
    elif allowed or source:
        # the granule's recorded source is allowed even outside the runs' roots
        extra = (source,) if source else ()
        read = dataclasses.replace(read, allowed_prefixes=(*allowed, *extra))
    entry = await asyncio.to_thread(GranuleEntry, name, url, identity, refs, read,
                                    storage_options)  # fmt: skip
    if entry.nbytes > max_bytes:
        # served, but parsed again for every request: say how to fix it
        log.warning("the sidecar of %s (~%d bytes parsed) does not fit the sidecar cache "
                    "(%d bytes, half of H5SIDECAR_CACHE_BYTES): raise the cache", name,
                    entry.nbytes, max_bytes)  # fmt: skip
    return entry
