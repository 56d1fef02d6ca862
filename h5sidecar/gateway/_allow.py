"""The allow-list of source URLs: which objects the read path may fetch at all.

Sidecars are untrusted input: a reference may name any URL (``file:///etc/passwd``, another
bucket, an internal HTTP service).  Every URL is parsed into a :class:`Location` and compared with
the allowed prefixes *before* any I/O; local paths are compared after resolving symlinks and
``..`` so a path cannot climb out of an allowed root.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

from h5sidecar.errors import ForbiddenSourceError

__all__ = ["AllowList", "Location", "parse_location"]

Scheme = Literal["local", "s3", "gs", "az", "http", "https"]
_REMOTE = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "gcs": "gs",
    "az": "az",
    "abfs": "az",
    "http": "http",
    "https": "https",
}


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed source URL.

    Attributes
    ----------
    scheme : str
        ``"local"`` for files, else the (canonical) URL scheme.
    authority : str
        Bucket / container / ``host[:port]`` (empty for local files).
    path : str
        Key inside the bucket (no leading slash) or, for local files, the resolved absolute path.
    """

    scheme: Scheme
    authority: str
    path: str

    @property
    def canonical(self) -> str:
        """The URL in the form prefixes are compared in (local files: a plain absolute path)."""
        if self.scheme == "local":
            return self.path
        return f"{self.scheme}://{self.authority}/{self.path}"


@lru_cache(maxsize=4096)
def parse_location(url: str) -> Location:
    """Parse a source URL (``s3://b/k``, ``/abs/path``, ``file:///abs/path``, ``https://h/p``).

    Raises
    ------
    ForbiddenSourceError
        For relative paths, unknown schemes and paths with ``.``/``..`` segments in remote URLs.
    """
    if url.startswith("/"):
        return Location("local", "", os.path.realpath(url))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ForbiddenSourceError(
                f"refusing {url!r}: file URLs must be absolute local paths (file:///...)"
            )
        return Location("local", "", os.path.realpath(parts.path))
    if scheme not in _REMOTE:
        raise ForbiddenSourceError(
            f"refusing {url!r}: only absolute local paths and s3://, gs://, az://, http(s):// "
            "URLs are read; re-index with an absolute path or a supported URL"
        )
    key = parts.path.lstrip("/")
    if parts.query or parts.fragment:
        raise ForbiddenSourceError(f"refusing {url!r}: source URLs may not carry a query string")
    if any(seg in (".", "..") for seg in key.split("/")):
        raise ForbiddenSourceError(f"refusing {url!r}: '.' and '..' segments are not allowed")
    if not parts.netloc:
        raise ForbiddenSourceError(f"refusing {url!r}: no bucket or host")
    return Location(
        _REMOTE[scheme], parts.netloc.lower() if scheme.startswith("http") else parts.netloc, key
    )  # type: ignore[arg-type]


def _prefix_canonical(prefix: str) -> str:
    """Canonical form of an allowed prefix, without a trailing slash."""
    return parse_location(prefix.rstrip("/") or "/").canonical.rstrip("/")


class AllowList:
    """Prefixes a fetcher may read from.

    A URL is allowed when its canonical form equals a prefix, or lies below it (the prefix
    followed by ``/``): ``s3://bucket/dir`` allows ``s3://bucket/dir/x.h5`` but not
    ``s3://bucket/dir2/x.h5``.  A bare bucket (``s3://bucket``) allows the whole bucket.

    Parameters
    ----------
    prefixes : iterable of str
        Allowed URL prefixes or exact source URLs.
    """

    def __init__(self, prefixes: Iterable[str]) -> None:
        self.prefixes: tuple[str, ...] = tuple(dict.fromkeys(prefixes))
        self._canon = tuple(_prefix_canonical(p) for p in self.prefixes)

    def allows(self, url: str) -> bool:
        """True when ``url`` parses and lies under an allowed prefix."""
        try:
            canon = parse_location(url).canonical
        except ForbiddenSourceError:
            return False
        return any(canon == p or canon.startswith(p + "/") for p in self._canon)

    def check(self, url: str) -> Location:
        """The parsed location of ``url``, or :class:`ForbiddenSourceError` (no I/O is done)."""
        loc = parse_location(url)
        canon = loc.canonical
        if any(canon == p or canon.startswith(p + "/") for p in self._canon):
            return loc
        allowed = ", ".join(self.prefixes) or "(none)"
        raise ForbiddenSourceError(
            f"refusing to read {url!r}: it is outside the allowed source prefixes [{allowed}]. "
            "If this source is trusted, add its prefix to ReadSettings.allowed_prefixes "
            "(H5SIDECAR_ALLOWED_PREFIXES) or pass it in `sources`."
        )

    def __repr__(self) -> str:
        return f"AllowList({list(self.prefixes)!r})"
