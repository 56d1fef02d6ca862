"""The identity of a source object at index time (:class:`SourceInfo`): size, ETag, mtime,
and for a local file its inode and change time.

It is what the freshness guard compares with the object a reader is about to read, so a replaced
source is a :class:`~h5sidecar.errors.StaleReferenceError`, never another file's bytes.  Size and
mtime alone miss a file replaced by one of the same size whose mtime was set back (``os.replace``
then ``os.utime``, a restore from backup, ``cp -p``, a sync tool that keeps mtimes): the inode
changes when the file is replaced, and the change time (``st_ctime_ns``, which no user call can
set) moves when it is rewritten in place or its mtime set.
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
    inode : int or None
        ``st_ino`` of a local file (None for object stores and web sources).
    ctime_ns : int or None
        ``st_ctime_ns`` of a local file: the last change of its content *or* metadata (mtime
        set, mode, links).
    device : int or None
        ``st_dev`` of a local file.  Recorded for diagnosis, never compared: one network file
        system has another device number on every machine that mounts it (and after a reboot).
    """

    url: str
    size: int
    etag: str | None = None
    mtime: float | None = None
    mtime_ns: int | None = None
    inode: int | None = None
    ctime_ns: int | None = None
    device: int | None = None

    def __post_init__(self) -> None:
        if self.mtime_ns is not None:
            object.__setattr__(self, "mtime_ns", int(self.mtime_ns))
            if self.mtime is None:
                object.__setattr__(self, "mtime", self.mtime_ns / 1e9)

    @property
    def key(self) -> tuple[Any, ...]:
        """Every field, hashable: what caches of this object's bytes are keyed by, so that a
        replaced object (whichever field tells) never hits them."""
        return (self.url, self.size, self.etag, self.mtime, self.mtime_ns, self.inode,
                self.ctime_ns, self.device)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the file fields only when known, so older readers see no change)."""
        out = {"url": self.url, "size": self.size, "etag": self.etag, "mtime": self.mtime}
        for name in _OPTIONAL_INTS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourceInfo:
        """Inverse of :meth:`to_dict` (validating).

        A negative size is refused: an unknown size would turn the freshness guard off for
        this source without a word (only sidecars written by other tools, which record no
        identity at all, are read unguarded).
        """
        try:
            ints = {name: _optional_int(d, name) for name in _OPTIONAL_INTS}
            info = cls(
                url=str(d["url"]),
                size=int(d["size"]),
                etag=None if d.get("etag") is None else str(d["etag"]),
                mtime=None if d.get("mtime") is None else float(d["mtime"]),
                **ints,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidReferenceError(f"malformed source identity {dict(d)!r}: {exc}") from exc
        if info.size < 0:
            raise InvalidReferenceError(
                f"source identity {dict(d)!r} records size {info.size}: a sidecar must record "
                "the size of its source (the freshness guard compares it); re-index the granule"
            )
        return info

    def same_object(self, other: SourceInfo) -> bool:
        """True when ``other`` describes the same bytes.

        Sizes must be equal; then the ETags decide when both sides have one (content identity);
        else a local file's inode and change time must be equal where both sides have them
        (a sidecar written before they were recorded has neither), and the modification
        times, compared *exactly*: integer nanoseconds when both sides have them, else the
        float seconds to within their representation error (1 us).  When one side's time has
        whole-second precision only (an HTTP ``Last-Modified`` header), both are compared at
        whole seconds -- the store cannot tell finer.  With no time and no ETag on one side,
        the size alone decides.
        """
        if self.size != other.size:
            return False
        if self.etag is not None and other.etag is not None:
            return self.etag == other.etag
        for name in ("inode", "ctime_ns"):  # not the device: see the class docstring
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is not None and theirs is not None and mine != theirs:
                return False
        if self.mtime_ns is not None and other.mtime_ns is not None:
            return self.mtime_ns == other.mtime_ns
        if self.mtime is not None and other.mtime is not None:
            a, b = self.mtime, other.mtime
            if a.is_integer() != b.is_integer():
                return math.floor(a) == math.floor(b)
            return abs(a - b) <= _FLOAT_MTIME_TOLERANCE
        return True


#: The integer fields :meth:`SourceInfo.to_dict` writes only when known.
_OPTIONAL_INTS = ("mtime_ns", "inode", "ctime_ns", "device")


def _optional_int(d: Mapping[str, Any], name: str) -> int | None:
    """``d[name]`` as an int (JSON integers, or their decimal strings), None when absent."""
    value = d.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


#: A float of POSIX seconds carries ~0.24 us of rounding error at today's timestamps: two floats
#: derived from the same nanosecond time differ by less than this.
_FLOAT_MTIME_TOLERANCE = 1e-6
