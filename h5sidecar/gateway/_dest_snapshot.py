"""One look at DEST as the gateway serves it (:class:`DestSnapshot`): a listing of its sidecars,
or its record, with the sources allowed and the cubes served."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from h5sidecar.dest import RecordView

__all__ = ["DestSnapshot"]


@dataclass(frozen=True, slots=True)
class DestSnapshot:
    """One listing of DEST.

    Attributes
    ----------
    sidecars : dict
        Granule name (``"ATL03_x.h5"``, ``"2019/ATL03_y.h5"``) -> sidecar URL.
    cubes : dict
        Cube name -> URL of its references (the cubes given to the gateway).
    sources : tuple of str
        Source URLs recorded in the report for granules indexed successfully.
    report_found : bool
        Whether DEST has a run report (its record, or ``_report.json``).
    listed_at : float
        ``time.monotonic()`` of the listing.
    record : RecordView or None
        The record granules are looked up in (``sidecars`` is then empty: DEST is not listed).
    count : int or None
        Granules served (for a record: as last counted, None before the first count).
    names : tuple of str
        The keys of ``sidecars``, sorted (for paging).
    relist_on_miss : bool
        Whether a granule missing from it may have come since (a listing, or an object-store
        DEST's record cache), so that a miss is worth a refresh; a local record is current.
    """

    sidecars: Mapping[str, str]
    sources: tuple[str, ...]
    report_found: bool
    listed_at: float
    cubes: Mapping[str, str] = field(default_factory=dict)
    record: RecordView | None = None
    count: int | None = 0
    names: tuple[str, ...] = ()
    relist_on_miss: bool = True

    def url_of(self, name: str) -> str | None:
        """The references of ``name``: a cube's (cubes take precedence) or a granule's sidecar."""
        return self.cubes.get(name) or self.sidecars.get(name)
