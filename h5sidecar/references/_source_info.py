"""The identity of a source object at index time (:class:`SourceInfo`): size, ETag, mtime.

It is what the freshness guard compares with the object a reader is about to read, so a replaced
source is a :class:`~h5sidecar.errors.StaleReferenceError`, never another file's bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from h5sidecar.errors import InvalidReferenceError

__all__ = ["SourceInfo"]


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """Identity of the source object at index time: what the freshness guard compares.

    Attributes
    ----------
    url : str
        Full URL of the granule (``s3://bucket/key``, ``file:///abs/path`` or a plain path).
    size : int
        Object size in bytes.
    etag : str or None
        S3 ETag (quotes stripped) when the store has one.
    mtime : float or None
        Last-modified time as POSIX seconds (for display; comparisons prefer ``mtime_ns``).
    mtime_ns : int or None
        Last-modified time as integer POSIX nanoseconds, exactly as the store gave it
        (``st_mtime_ns`` of a file; an object store's ``Last-Modified``).  Persisted as a JSON
        integer, which round-trips exactly where a float of seconds does not.
    """

    url: str
    size: int
    etag: str | None = None
    mtime: float | None = None
    mtime_ns: int | None = None

    def __post_init__(self) -> None:
        if self.mtime_ns is not None:
            object.__setattr__(self, "mtime_ns", int(self.mtime_ns))
            if self.mtime is None:
                object.__setattr__(self, "mtime", self.mtime_ns / 1e9)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {"url": self.url, "size": self.size, "etag": self.etag, "mtime": self.mtime}
        if self.mtime_ns is not None:
            out["mtime_ns"] = self.mtime_ns
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourceInfo:
        """Inverse of :meth:`to_dict` (validating)."""
        try:
            ns = d.get("mtime_ns")
            if ns is not None and (isinstance(ns, bool) or not isinstance(ns, int | str)):
                raise TypeError(f"mtime_ns must be an integer, got {ns!r}")
            return cls(
                url=str(d["url"]),
                size=int(d["size"]),
                etag=None if d.get("etag") is None else str(d["etag"]),
                mtime=None if d.get("mtime") is None else float(d["mtime"]),
                mtime_ns=None if ns is None else int(ns),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidReferenceError(f"malformed source identity {dict(d)!r}: {exc}") from exc

    def same_object(self, other: SourceInfo) -> bool:
        """True when ``other`` describes the same bytes.

        Sizes must be equal; then the ETags decide when both sides have one (content identity);
        else the modification times, compared *exactly*: integer nanoseconds when both sides
        have them, else the float seconds to within their representation error (1 us).  When
        one side's time has whole-second precision only (an HTTP ``Last-Modified`` header), both
        are compared at whole seconds -- the store cannot tell finer.  With no time and no ETag
        on one side, the size alone decides.
        """
        if self.size != other.size:
            return False
        if self.etag is not None and other.etag is not None:
            return self.etag == other.etag
        if self.mtime_ns is not None and other.mtime_ns is not None:
            return self.mtime_ns == other.mtime_ns
        if self.mtime is not None and other.mtime is not None:
            a, b = self.mtime, other.mtime
            if a.is_integer() != b.is_integer():
                return math.floor(a) == math.floor(b)
            return abs(a - b) <= _FLOAT_MTIME_TOLERANCE
        return True


#: A float of POSIX seconds carries ~0.24 us of rounding error at today's timestamps: two floats
#: derived from the same nanosecond time differ by less than this.
_FLOAT_MTIME_TOLERANCE = 1e-6
