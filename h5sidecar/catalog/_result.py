"""What ``h5sidecar catalog`` reports: the result of a run and the granules it left out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CatalogResult", "ItemError", "NoFootprint"]


@dataclass(frozen=True)
class ItemError:
    """A granule left out of the catalog: which, why, and what to do."""

    name: str
    sidecar: str
    kind: str
    message: str
    hint: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"name": self.name, "sidecar": self.sidecar, "kind": self.kind,
                "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class NoFootprint:
    """A granule catalogued without a geometry (spatial searches cannot find it), and why."""

    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class CatalogResult:
    """Outcome of :func:`build_catalog`.

    Attributes
    ----------
    catalog : str
        Path of the root ``catalog.json``.
    collection : str
        Path of the collection document.
    collection_id : str
    items : tuple of str
        Paths of the collection's item documents (empty when the JSON tree holds no items).
    errors : tuple of ItemError
        Granules left out.
    cubes : tuple of str
        Names of the datacubes given as collection assets.
    no_footprint : tuple of NoFootprint
        Items written without a geometry (neither coordinates nor ACDD bounds give one).
    added, updated, removed, unchanged : int
        Sidecars catalogued for the first time, catalogued again (changed since the last run),
        gone since the last run, and left as they were (not read).
    geoparquet : str
        Path of the collection's stac-geoparquet folder of parts (``""`` when not written).
    n_items : int
        Items in the collection.
    """

    catalog: str
    collection: str
    collection_id: str
    items: tuple[str, ...]
    errors: tuple[ItemError, ...] = field(default=())
    cubes: tuple[str, ...] = field(default=())
    no_footprint: tuple[NoFootprint, ...] = field(default=())
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    geoparquet: str = ""
    n_items: int = 0

    @property
    def ok(self) -> bool:
        """True when every granule got an item."""
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"catalog": self.catalog, "collection": self.collection,
                "collection_id": self.collection_id, "items": list(self.items),
                "errors": [e.to_dict() for e in self.errors], "cubes": list(self.cubes),
                "no_footprint": [n.to_dict() for n in self.no_footprint],
                "added": self.added, "updated": self.updated, "removed": self.removed,
                "unchanged": self.unchanged, "geoparquet": self.geoparquet,
                "n_items": self.n_items}
