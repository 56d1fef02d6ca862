"""The gateway's first look at DEST, taken in a thread as it starts (:class:`Warming`).

An object-store DEST whose record cache on this machine is empty (the first command here, or
``--record-cache off``) is served only once its record is loaded into SQLite: about 12-25 s at
1,000,000 recorded granules, which no request should wait for.  So the gateway listens at
once, the first look runs in a thread of its own (never on the event loop), and until it is
taken a request that needs DEST's record is answered 503 with ``Retry-After``, never 404 (a
granule not known yet may exist); in the first moments of a load (:data:`WAIT_SECONDS`) it
waits instead, so that a small DEST, loaded by then, is answered as before.  ``/healthz``
answers at once meanwhile ("warming", with the parts and rows loaded so far).  A failed first
look (an unreadable or damaged record, no permission) is reported as "degraded" with its
reason and tried again after a backoff, not on every request.  Later refreshes are not this class's business: they read only the
parts written since (a fraction of a second at 1,000,000 granules) and never answer 503.

Why a granule is not served from its sidecar before the record is loaded (its path in DEST is
known from its name): the gateway reads only sources the record allows (the runs' roots, and
each recorded granule's own source), and a sidecar is untrusted (see the security page).
Before the record is loaded the gateway knows neither, nor whether the record still holds the
granule (a sidecar left behind by a pruned granule, or written by anyone who may write to
DEST, is not served on an object store); answering from the sidecar would serve what the
gateway refuses once warm.  A local DEST is ready at once: its record is read in place.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

from h5sidecar.errors import H5SidecarError
from h5sidecar.gateway._dest import DestIndex, DestSnapshot
from h5sidecar.gateway._http_rules import RecordUnavailableError, WarmingError

__all__ = ["Warming"]

log = logging.getLogger("h5sidecar.gateway")

#: Seconds from the start of a load during which a request waits for it rather than get 503.
WAIT_SECONDS = 2.0
#: ``Retry-After`` (seconds) of a request answered 503 while the record loads.
RETRY_AFTER = 5
#: Seconds before the first look is tried again after a failure, doubled after each, at most.
FIRST_BACKOFF, MAX_BACKOFF = 2.0, 60.0
#: How often a waiting request checks whether the first look is taken (seconds).
_POLL = 0.02


class Warming:
    """The first snapshot of ``dest``, taken in a background thread.

    Parameters
    ----------
    dest : DestIndex
        DEST as the gateway serves it; its ``fill`` says how far its record cache's first fill
        got.

    Attributes
    ----------
    wait_seconds : float
        For how long after a load starts a request waits for it rather than get
        :class:`WarmingError`.
    first_backoff : float
        Seconds before a failed first snapshot is tried again (doubled after each failure, at
        most :data:`MAX_BACKOFF`).
    """

    def __init__(self, dest: DestIndex) -> None:
        self.dest = dest
        self.wait_seconds = WAIT_SECONDS
        self.first_backoff = FIRST_BACKOFF
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._snap: DestSnapshot | None = None
        self._since = time.time()
        self._error = ""  # why the last attempt failed ("": none did)
        self._failures = 0
        self._next_try = 0.0  # time.monotonic() before which a failed look is not retried
        self._began = 0.0  # time.monotonic() when the current (or last) attempt began

    def start(self) -> None:
        """Take the first snapshot in a thread, unless it is taken, being taken, or failed
        less than the backoff ago."""
        with self._lock:
            if self._snap is not None or self._running() or time.monotonic() < self._next_try:
                return
            if self._failures == 0:
                self._since = time.time()
            self._began = time.monotonic()
            self._thread = threading.Thread(target=self._take, name="h5sidecar-warming",
                                            daemon=True)  # fmt: skip
            self._thread.start()

    def _running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _take(self) -> None:
        started = time.monotonic()
        try:
            snap = self.dest.snapshot(max_age=0)
        except Exception as exc:
            if not isinstance(exc, H5SidecarError):
                log.warning("loading DEST %s failed unexpectedly", self.dest.dest, exc_info=True)
            with self._lock:
                self._error = str(exc) if isinstance(exc, H5SidecarError) else (
                    f"{type(exc).__name__}: {exc}")  # fmt: skip
                wait = min(self.first_backoff * 2.0**self._failures, MAX_BACKOFF)
                self._failures += 1
                self._next_try = time.monotonic() + wait
            log.warning("the gateway cannot serve DEST %s: %s (tried again in %.0f s)",
                        self.dest.dest, self._error, wait)  # fmt: skip
            return
        with self._lock:
            self._snap, self._error, self._failures = snap, "", 0
        log.info("DEST %s loaded in %.1f s: serving", self.dest.dest, time.monotonic() - started)

    @property
    def snapshot(self) -> DestSnapshot | None:
        """The first snapshot, once taken."""
        return self._snap

    async def first(self) -> DestSnapshot:
        """The first snapshot (its load started if need be), waited for only in the first
        :attr:`wait_seconds` of a load.

        Raises
        ------
        WarmingError
            It is still being taken: retry after ``Retry-After``.
        RecordUnavailableError
            Taking it failed; it is tried again after ``Retry-After``.
        """
        self.start()
        deadline = self._began + self.wait_seconds
        while self._snap is None and self._running() and time.monotonic() < deadline:
            await asyncio.sleep(_POLL)  # the event loop serves others meanwhile
        if self._snap is not None:
            return self._snap
        raise self._not_ready()

    def _not_ready(self) -> WarmingError:
        if self._error and not self._running():
            retry = max(1, math.ceil(self._next_try - time.monotonic()))
            return RecordUnavailableError(
                f"the gateway cannot load the record of DEST {self.dest.dest}: "
                f"{self._error.rstrip('.')}. "
                f"It tries again in {retry} s; /healthz says when it serves.", retry_after=retry)
        return WarmingError(f"the gateway is loading the record of DEST {self.dest.dest} "
                            f"({self._progress()}); retry in a few seconds",
                            retry_after=RETRY_AFTER)  # fmt: skip

    def _progress(self) -> str:
        fill, seconds = self.dest.fill, time.time() - self._since
        if fill.started is None or fill.started < self._since:  # not a record cache's fill
            return f"for {seconds:.0f} s"
        if fill.parts is None:
            return f"listing its parts, for {seconds:.0f} s"
        return (f"{fill.parts_done} of {fill.parts} parts, {fill.rows:,} rows so far, "
                f"for {seconds:.0f} s")

    def health(self) -> dict[str, Any] | None:
        """``/healthz``'s body while the first snapshot is not taken (None once it is):
        ``{"status": "warming", ...}`` with the progress, or ``{"status": "degraded",
        "reason": ...}`` after a failure; never waits."""
        if self._snap is not None:
            return None
        self.start()  # a failed look is tried again once its backoff is over
        if isinstance(exc := self._not_ready(), RecordUnavailableError):
            return {"status": "degraded", "reason": str(exc), "retry_after": exc.retry_after}
        fill = self.dest.fill
        out: dict[str, Any] = {"status": "warming", "message": str(exc),
                               "since": datetime.fromtimestamp(self._since, UTC).isoformat(),
                               "seconds": round(time.time() - self._since, 1)}  # fmt: skip
        if fill.started is not None and fill.started >= self._since:
            out.update(parts=fill.parts, parts_done=fill.parts_done, rows=fill.rows)
        if self._error:
            out["last_error"] = self._error  # a retry runs: what the previous attempt said
        return out
