"""The allow-list of source URLs: which objects the read path may fetch at all.

Sidecars are untrusted input: a reference may name any URL (``file:///etc/passwd``, another
bucket, an internal HTTP service).  Every URL is parsed by the package's one parser
(``parse_url(url, untrusted=True)``, :mod:`h5sidecar.sources._urls`) and its normalised form
compared with the allowed prefixes *before* any I/O; local paths are compared after resolving
symlinks and ``..`` so a path cannot climb out of an allowed root.
"""

from __future__ import annotations

from collections.abc import Iterable

from h5sidecar.errors import ForbiddenSourceError, InvalidReferenceError
from h5sidecar.sources._urls import S3_SCHEMES, SourceLocation, parse_url

__all__ = ["AllowList"]


def _normalized_prefix(prefix: str) -> str:
    """Normalised form of an allowed prefix, without a trailing slash."""
    stripped = prefix.rstrip("/")
    scheme, sep, rest = stripped.partition("://")
    if sep and scheme.lower() in S3_SCHEMES and "/" not in rest:
        return f"s3://{rest}"  # a whole bucket
    return parse_url(stripped or "/", untrusted=True).url.rstrip("/")


class AllowList:
    """Prefixes a fetcher may read from.

    A URL is allowed when its normalised form equals a prefix, or lies below it (the prefix
    followed by ``/``): ``s3://bucket/dir`` allows ``s3://bucket/dir/x.h5`` but not
    ``s3://bucket/dir2/x.h5``.  A bare bucket (``s3://bucket``) allows the whole bucket.

    Parameters
    ----------
    prefixes : iterable of str
        Allowed URL prefixes or exact source URLs.
    """

    def __init__(self, prefixes: Iterable[str]) -> None:
        self.prefixes: tuple[str, ...] = tuple(dict.fromkeys(prefixes))
        self._canon = tuple(_normalized_prefix(p) for p in self.prefixes)
        self._exact = frozenset(self._canon)  # O(1) for exact source URLs (a cube's members)

    def allows(self, url: str) -> bool:
        """True when ``url`` parses and lies under an allowed prefix."""
        try:
            canon = parse_url(url, untrusted=True).url
        except (ForbiddenSourceError, InvalidReferenceError):
            return False
        return canon in self._exact or any(canon.startswith(p + "/") for p in self._canon)

    def check(self, url: str) -> SourceLocation:
        """The parsed location of ``url``, or :class:`ForbiddenSourceError` (no I/O is done)."""
        loc = parse_url(url, untrusted=True)
        canon = loc.url
        if canon in self._exact or any(canon.startswith(p + "/") for p in self._canon):
            return loc
        allowed = ", ".join(self.prefixes) or "(none)"
        raise ForbiddenSourceError(
            f"refusing to read {url!r}: it is outside the allowed source prefixes [{allowed}]. "
            "If this source is trusted, add its prefix to ReadSettings.allowed_prefixes "
            "(H5SIDECAR_ALLOWED_PREFIXES) or pass it in `sources`."
        )

    def __repr__(self) -> str:
        return f"AllowList({list(self.prefixes)!r})"
