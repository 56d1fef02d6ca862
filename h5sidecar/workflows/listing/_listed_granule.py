"""One object to index (what listings, URL lists and the batch workflow pass around)."""

from __future__ import annotations

from dataclasses import dataclass

from h5sidecar.references import SourceInfo

__all__ = ["Granule"]


@dataclass(frozen=True, slots=True)
class Granule:
    """One object to index.

    Attributes
    ----------
    url : str
        Normalised URL (absolute local path or ``s3://bucket/key``).
    name : str
        Path relative to the listing root (``"2019/ATL03_x.h5"``); the sidecar is named after it.
    identity : SourceInfo
        Size and ETag/mtime seen by the listing (what change detection compares).
    """

    url: str
    name: str
    identity: SourceInfo
