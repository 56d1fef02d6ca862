"""The allow-list of source URLs: which objects the read path may fetch at all.

Sidecars are untrusted input: a reference may name any URL (``file:///etc/passwd``, another
bucket, an internal HTTP service).  Every URL is parsed by the package's one parser
(``parse_url(url, untrusted=True)``, :mod:`h5sidecar.sources._urls`) and its normalised form
compared with the allowed prefixes *before* any I/O; local paths are compared after resolving
symlinks and ``..`` so a path cannot climb out of an allowed root.

A datacube's reader allows exactly its member granules' URLs: tens of thousands of prefixes,
of which a read touches a few.  Normalising them all up front cost ~20 us each (0.2 s of a
cube's open at 10,000 members), so a list built with ``lazy=True`` normalises its prefixes
only when a URL is not found among them as given (see :meth:`AllowList.check`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from h5sidecar.errors import ForbiddenSourceError, InvalidReferenceError
from h5sidecar.references import SourceInfo
from h5sidecar.sources._urls import S3_SCHEMES, SourceLocation, parse_url

__all__ = ["AllowList", "SourceIndex"]

log = logging.getLogger("h5sidecar.fetch")


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
    lazy : bool
        Normalise the prefixes on first need instead of now (a prefix that does not parse is
        then never allowed, instead of refused here): for the many exact URLs of a cube's
        members, of which a read asks for a few.
    """

    def __init__(self, prefixes: Iterable[str], *, lazy: bool = False) -> None:
        self.prefixes: tuple[str, ...] = tuple(dict.fromkeys(prefixes))
        self._given = frozenset(self.prefixes)
        self._canon: tuple[str, ...] | None = None
        self._exact: frozenset[str] = frozenset()
        self._lazy = lazy
        if not lazy:
            self._normalize()

    def _normalize(self) -> tuple[str, ...]:
        if self._canon is None:
            canon = []
            for p in self.prefixes:
                try:
                    canon.append(_normalized_prefix(p))
                except (ForbiddenSourceError, InvalidReferenceError):
                    if not self._lazy:
                        raise  # a prefix the caller gave: refused at once, as it is wrong
                    # a member's URL: allows nothing (a read of it is refused by check)
            self._exact = frozenset(canon)  # O(1) for exact source URLs (a cube's members)
            self._canon = tuple(canon)
        return self._canon

    def _allowed(self, canon: str) -> bool:
        # fast path: the normalised URL is one of the prefixes as given, and normalising that
        # prefix gives it back, so it is also among the normalised prefixes
        if canon in self._given and _normalized_prefix(canon) == canon:
            return True
        prefixes = self._normalize()
        return canon in self._exact or any(canon.startswith(p + "/") for p in prefixes)

    def allows(self, url: str) -> bool:
        """True when ``url`` parses and lies under an allowed prefix."""
        try:
            return self._allowed(parse_url(url, untrusted=True).url)
        except (ForbiddenSourceError, InvalidReferenceError):
            return False

    def check(self, url: str) -> SourceLocation:
        """The parsed location of ``url``, or :class:`ForbiddenSourceError` (no I/O is done)."""
        loc = parse_url(url, untrusted=True)
        if self._allowed(loc.url):
            return loc
        allowed = ", ".join(self.prefixes) or "(none)"
        raise ForbiddenSourceError(
            f"refusing to read {url!r}: it is outside the allowed source prefixes [{allowed}]. "
            "If this source is trusted, add its prefix to ReadSettings.allowed_prefixes "
            "(H5SIDECAR_ALLOWED_PREFIXES) or pass it in `sources`."
        )

    def __repr__(self) -> str:
        return f"AllowList({list(self.prefixes)!r})"


class SourceIndex:
    """Normalised URL -> the identity recorded for it, for the freshness guard.

    Looked up by the normalised URL of what is read.  A source whose URL as recorded is
    already that normalised form (every URL an indexer writes) is found without normalising
    the others; only a miss normalises them all, once.  A source whose URL does not parse is
    left out (reading it is refused by the allow-list anyway).
    """

    def __init__(self, sources: Iterable[SourceInfo]) -> None:
        self._sources = tuple(sources)
        self._given = {s.url: s for s in self._sources}
        self._all: dict[str, SourceInfo] | None = None

    def get(self, canon: str) -> SourceInfo | None:
        """The identity of the source at normalised URL ``canon``, or None."""
        info = self._given.get(canon)
        if info is not None and _canonical(canon) == canon:
            return info
        if self._all is None:
            known = {}
            for s in self._sources:
                try:
                    known[parse_url(s.url, untrusted=True).url] = s
                except (ForbiddenSourceError, InvalidReferenceError) as exc:
                    log.debug("source %r cannot be read: %s", s.url, exc)
            self._all = known
        return self._all.get(canon)

    def __contains__(self, canon: object) -> bool:
        return isinstance(canon, str) and self.get(canon) is not None


def _canonical(url: str) -> str | None:
    try:
        return parse_url(url, untrusted=True).url
    except (ForbiddenSourceError, InvalidReferenceError):
        return None
