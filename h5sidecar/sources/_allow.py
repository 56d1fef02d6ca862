"""The allow-list of source URLs: which objects the read path may fetch at all.

Sidecars are untrusted input: a reference may name any URL (``file:///etc/passwd``, another
bucket, an internal HTTP service).  Every URL is parsed into a :class:`Location` and compared with
the allowed prefixes *before* any I/O; local paths are compared after resolving symlinks and
``..`` so a path cannot climb out of an allowed root.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import unquote, urlsplit

from h5sidecar.errors import ForbiddenSourceError, InvalidReferenceError

__all__ = ["AllowList", "Location", "parse_location"]

Scheme = Literal["local", "s3"]


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed source URL.

    Attributes
    ----------
    scheme : str
        ``"local"`` for files, ``"s3"`` for S3 objects (``s3a://`` included).
    authority : str
        The bucket (empty for local files).
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


#: NUL and other control characters never appear in a real object key or path.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@lru_cache(maxsize=4096)
def parse_location(url: str) -> Location:
    """Parse a source URL: ``s3://bucket/key``, ``/abs/path`` or ``file:///abs/path``.

    Local paths are resolved (symlinks, ``..``) so they are compared where they really point.

    Raises
    ------
    ForbiddenSourceError
        For relative paths, other schemes, remote file URLs and ``.``/``..`` key segments.
    InvalidReferenceError
        For URLs holding NUL or other control characters (a corrupt or planted sidecar).
    """
    if _CONTROL.search(url):
        raise InvalidReferenceError(
            f"source URL {url!r} contains a NUL or control character; the sidecar is corrupt: "
            "re-index the granule"
        )
    if url.startswith("/"):
        return Location("local", "", os.path.realpath(url))
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if sep and scheme == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ForbiddenSourceError(
                f"refusing {url!r}: file URLs must name an absolute local path (file:///...)"
            )
        return Location("local", "", os.path.realpath(unquote(parts.path)))
    if not sep or scheme not in ("s3", "s3a"):
        raise ForbiddenSourceError(
            f"refusing {url!r}: sources are read only from absolute local paths and s3:// URLs; "
            "re-index the granule from such a location"
        )
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise ForbiddenSourceError(f"refusing {url!r}: expected s3://bucket/key")
    if any(seg in (".", "..") for seg in key.split("/")):
        raise ForbiddenSourceError(f"refusing {url!r}: '.' and '..' key segments are not allowed")
    return Location("s3", bucket, key)


def _prefix_canonical(prefix: str) -> str:
    """Canonical form of an allowed prefix, without a trailing slash."""
    stripped = prefix.rstrip("/")
    scheme, sep, rest = stripped.partition("://")
    if sep and scheme.lower() in ("s3", "s3a") and "/" not in rest:
        return f"s3://{rest}"  # a whole bucket
    return parse_location(stripped or "/").canonical.rstrip("/")


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
        except (ForbiddenSourceError, InvalidReferenceError):
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
