"""What this process last saw of each source: the one identity check every reader shares.

Each reader holds its own :class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher`, and a fetcher that
confirmed its sources within ``revalidate_seconds`` serves cached chunks without asking again.
Alone, that lets readers of one process disagree: a reader that just fetched from a replaced
file refuses it, while another keeps serving the old file's cached chunks until its window
ends.  So every identity a fetcher observes (in a response, a ``stat`` or a HEAD) is noted
here, and every fetcher compares the latest one with its sidecar before it serves a cached
chunk: once any reader has seen a source change, none serves its old bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from h5sidecar.references import SourceInfo

__all__ = ["SEEN", "SeenSources"]


class SeenSources:
    """Canonical source URL -> the identity last observed, for the most recent URLs.

    Parameters
    ----------
    max_entries : int
        How many URLs are remembered (least recently noted forgotten first).  A forgotten URL
        costs nothing but the sharing: each reader still checks its sources itself.
    """

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._latest: OrderedDict[str, SourceInfo] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, url: str, seen: SourceInfo) -> None:
        """Remember ``seen`` as what ``url`` is now."""
        with self._lock:
            self._latest[url] = seen
            self._latest.move_to_end(url)
            while len(self._latest) > self.max_entries:
                self._latest.popitem(last=False)

    def latest(self, url: str) -> SourceInfo | None:
        """What ``url`` was last seen to be, or None."""
        with self._lock:
            return self._latest.get(url)

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._latest.clear()


#: The process-wide record (about 200 bytes a URL: 100,000 URLs are ~20 MB at most).
SEEN = SeenSources(100_000)
