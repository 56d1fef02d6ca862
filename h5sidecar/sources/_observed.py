"""What one read observed of its object, and how an attempt failed: the leaves every reader
(object stores, local files, web servers) shares, so that none of them imports another."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["ObservedIdentity", "SourceGoneError", "TransientReadError", "datetime_ns"]


class TransientReadError(Exception):
    """One attempt failed in a way a later attempt may not (internal)."""


class SourceGoneError(Exception):
    """The object is missing or no longer matches a precondition (internal)."""


@dataclass(frozen=True, slots=True)
class ObservedIdentity:
    """Size / ETag / mtime (a file's inode and change time) of the object as seen by the
    request that just read it."""

    size: int
    etag: str | None
    mtime: float | None
    mtime_ns: int | None = None
    inode: int | None = None
    ctime_ns: int | None = None


def datetime_ns(when: datetime) -> int:
    """POSIX nanoseconds of an aware ``datetime``, exactly (integer arithmetic, no float)."""
    delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1_000
