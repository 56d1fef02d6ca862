"""The freshness guard of the fetch executor: is each source still the object its sidecar describes?

A chunk reference is a byte range of one particular object: if the object was replaced since it
was indexed, the same range holds other bytes.  So before a byte is served, the identity a
response (or a HEAD/``stat``) showed -- size and ETag or mtime, a file's inode and change time
-- is compared with the one recorded at index time; a mismatch is a
:class:`~h5sidecar.errors.StaleReferenceError`.  A source that matched is trusted for
``settings.revalidate_seconds``, after which a cached chunk of it is served only once the source
is asked again.  The I/O of those checks stays with
:class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher`; this module holds what it compares.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from h5sidecar.errors import StaleReferenceError
from h5sidecar.references import SourceInfo
from h5sidecar.settings import ReadSettings
from h5sidecar.sources._allow import AllowList, SourceIndex
from h5sidecar.sources._seen import SEEN
from h5sidecar.sources._stats import FetchStats
from h5sidecar.sources.stores._backends import ObservedIdentity
from h5sidecar.sources.stores._urls import SourceLocation

__all__ = ["FreshnessGuard"]


class FreshnessGuard:
    """The identities a fetcher's sources were indexed with, and when each last matched.

    Parameters
    ----------
    settings : ReadSettings
        ``check_freshness`` (off: nothing is compared) and ``revalidate_seconds``.
    known : SourceIndex
        The identities recorded at index time, by canonical URL.
    stats : FetchStats
        The fetcher's counters (``freshness_checks``: sources confirmed the first time).
    """

    def __init__(self, settings: ReadSettings, known: SourceIndex, stats: FetchStats) -> None:
        self.settings = settings
        self.known = known
        self.stats = stats
        self._confirmed: set[str] = set()
        # canonical URL -> time.monotonic() when the source was last seen to match its sidecar
        self._confirmed_at: dict[str, float] = {}

    def due(self, urls: Iterable[str], allow_list: AllowList) -> list[SourceLocation]:
        """The sources of ``urls`` to ask again before their cached chunks are served: those
        not confirmed within ``revalidate_seconds``; no I/O.

        Raises
        ------
        ForbiddenSourceError
            A URL is outside ``allow_list``.
        StaleReferenceError
            Another reader of this process already saw a source change.
        """
        now = time.monotonic()
        window = self.settings.revalidate_seconds
        due = []
        for url in dict.fromkeys(urls):
            loc = allow_list.check(url)
            info = self.known.get(loc.url)
            if info is None:
                continue
            latest = SEEN.latest(loc.url)  # another reader of this process may have seen more
            if latest is not None and not info.same_object(latest):
                raise self.stale(loc, f"it is now {_describe(latest)} but was "
                                      f"{_describe(info)} when indexed")  # fmt: skip
            seen_at = self._confirmed_at.get(loc.url)
            if seen_at is None or now - seen_at >= window:
                due.append(loc)
        return due

    def check(self, loc: SourceLocation, seen: ObservedIdentity) -> None:
        """Compare what a response or a ``stat`` showed of ``loc`` with its sidecar's record.

        Raises
        ------
        StaleReferenceError
            The source is not the object it was when indexed.
        """
        if not self.settings.check_freshness:
            return
        info = self.known.get(loc.url)
        if info is None:
            return  # allowed by prefix but not described by any sidecar: nothing to compare
        now = SourceInfo(url=info.url, size=seen.size, etag=seen.etag, mtime=seen.mtime,
                         mtime_ns=seen.mtime_ns, inode=seen.inode, ctime_ns=seen.ctime_ns)  # fmt: skip
        SEEN.note(loc.url, now)  # so that every reader of this process compares with it
        if not info.same_object(now):
            raise self.stale(
                loc,
                f"it is now {_describe(now)} but was {_describe(info)} when indexed",
            )
        self._confirmed_at[loc.url] = time.monotonic()
        if loc.url not in self._confirmed:
            self._confirmed.add(loc.url)
            self.stats.add(freshness_checks=1)

    def stale(self, loc: SourceLocation, why: str) -> StaleReferenceError:
        """The error that says ``loc`` changed since its sidecar was written (``why``)."""
        info = self.known.get(loc.url)
        name = info.url if info is not None else loc.url
        return StaleReferenceError(
            f"granule {name} changed since its sidecar was written ({why}); its references no "
            "longer point at the right bytes: re-index it (h5sidecar index) and read the new "
            "sidecar",
            url=name,
        )


def _describe(info: SourceInfo) -> str:
    bits = [f"{info.size} bytes"]
    if info.etag is not None:
        bits.append(f"ETag {info.etag}")
    if info.mtime is not None:
        bits.append(f"mtime {info.mtime:.6f}")
    if info.inode is not None:
        bits.append(f"inode {info.inode}")
    if info.ctime_ns is not None:
        bits.append(f"ctime {info.ctime_ns / 1e9:.6f}")
    return ", ".join(bits)
