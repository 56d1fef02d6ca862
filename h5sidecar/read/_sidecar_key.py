"""The cache key of a sidecar: where it is, which version (size + ETag/mtime), read how."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["key_from_info", "options_key", "sidecar_group"]


def options_key(options: Mapping[str, Any]) -> str:
    """The storage options as part of a cache key, without secrets (keys are visible in reprs
    and debuggers)."""
    from h5sidecar.credentials import scrub_credentials

    return repr(sorted(scrub_credentials(options).items(), key=lambda kv: str(kv[0])))


def key_from_info(fs: Any, p: str, info: Mapping[str, Any],
                       options: Mapping[str, Any]) -> tuple:  # fmt: skip
    """The identity (:func:`~h5sidecar.read._sidecar_open.sidecar_identity`) of the object ``p`` of
    ``fs`` from its ``info`` (no I/O): ``(protocol, path, size, ETag or mtime, options)``."""
    stamp = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified")
    return (fs.protocol, p, info.get("size"), str(stamp), options_key(options))


def sidecar_group(key: Any) -> tuple | None:
    """The sidecar a cache key names, whatever its version: ``(protocol, path, options)``
    (the path without ``/.zmetadata``); None for keys of another form."""
    if not (isinstance(key, tuple) and len(key) == 5 and isinstance(key[1], str)):
        return None
    return (key[0], key[1].removesuffix("/.zmetadata"), key[4])
