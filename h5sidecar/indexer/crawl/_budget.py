"""Per-granule bounds of the indexer: time, HDF5 read calls and bytes.

A corrupt granule can make HDF5 walk metadata that loops, or claim lengths that never end; over a
network each such step is also a wait.  Every read HDF5 makes goes through the source's file
object (:mod:`h5sidecar.indexer.crawl._source_file`), which checks a :class:`Budget` there: past a bound
the read raises, h5py passes the error up unchanged, and the granule fails with a specific kind
(``timeout`` or ``limit_exceeded``) instead of running forever.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from h5sidecar.errors import GranuleLimitError, GranuleTimeoutError
from h5sidecar.settings import IndexSettings

__all__ = ["Budget"]


@dataclass(frozen=True, slots=True)
class Budget:
    """What one granule may cost (see the ``max_*`` fields of :class:`IndexSettings`).

    Attributes
    ----------
    url : str
        The granule (named in the errors).
    deadline : float or None
        ``time.monotonic()`` value past which reads raise :class:`GranuleTimeoutError`.
    max_reads, max_bytes : int
        Bounds of HDF5's read calls and bytes read (0: no bound).
    seconds : float
        The time limit the deadline came from (for the message).
    """

    url: str
    deadline: float | None
    max_reads: int
    max_bytes: int
    seconds: float

    @classmethod
    def start(cls, url: str, settings: IndexSettings) -> Budget:
        """A budget starting now, from ``settings``."""
        seconds = settings.max_granule_seconds
        deadline = time.monotonic() + seconds if seconds > 0 else None
        return cls(url, deadline, settings.max_hdf5_reads, settings.max_hdf5_read_bytes, seconds)

    def remaining(self) -> float | None:
        """Seconds left (``None``: no limit); raises once the deadline has passed."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise self.timeout()
        return left

    def timeout(self) -> GranuleTimeoutError:
        """The error raised when the time limit is reached."""
        return GranuleTimeoutError(
            f"indexing {self.url} took longer than {self.seconds:g} s (max_granule_seconds): "
            "the source is too slow or the file is corrupt; raise H5SIDECAR_MAX_GRANULE_SECONDS "
            "only for a file known to be sound"
        )

    def check(self, reads: int, nbytes: int) -> None:
        """Raise when ``reads`` HDF5 read calls or ``nbytes`` bytes, or the time, exceed a bound."""
        if self.max_reads and reads > self.max_reads:
            raise GranuleLimitError(
                f"HDF5 made more than {self.max_reads} reads of {self.url} (max_hdf5_reads): its "
                "metadata most likely loops (a corrupt file); check it with h5dump, re-stage it, "
                "or raise H5SIDECAR_MAX_HDF5_READS for a file known to be sound"
            )
        if self.max_bytes and nbytes > self.max_bytes:
            raise GranuleLimitError(
                f"HDF5 read more than {self.max_bytes} bytes of {self.url} "
                "(max_hdf5_read_bytes): its metadata most likely loops (a corrupt file); check "
                "it with h5dump, or raise H5SIDECAR_MAX_HDF5_READ_BYTES for a file known to be "
                "sound"
            )
        self.remaining()
