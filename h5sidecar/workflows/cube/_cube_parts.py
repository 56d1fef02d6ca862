"""Where a cube's parts are: ``OUT`` itself, or ``OUT-0``, ``OUT-1``, ... of a split.

A split build writes ``OUT-0``, ``OUT-1``, ... (:func:`~h5sidecar.workflows.cube._cube_build.cube_paths`); an
append that splits off a new encoding adds the next index after the existing parts, so a
single cube ``OUT`` may be followed by ``OUT-1``, ``OUT-2``, ...
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidRequestError
from h5sidecar.references import GranuleRefs, SourceInfo
from h5sidecar.workflows.cube._cube_build import cube_paths

__all__ = ["Granule", "Part", "existing_parts", "part_path"]


@dataclass
class Part:
    """One existing cube: where it is, its record, members and inline coordinates."""

    path: str
    record: dict[str, Any]
    members: tuple[SourceInfo, ...]
    coordinate: np.ndarray
    shared: dict[str, np.ndarray]
    coord_attrs: Mapping[str, Any]
    refs: GranuleRefs | None = None  # kerchunk formats: the cube's references
    new: list[Granule] = field(default_factory=list)
    replaced: dict[str, Granule] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return list(self.record["encoding"])

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.record["lengths"])]).astype(int)


@dataclass
class Granule:
    """A new or replacing granule: its references (subset), name, item and coordinate."""

    refs: GranuleRefs
    item: Any
    stamp: tuple[str, str] | None
    values: np.ndarray = field(default_factory=lambda: np.empty(0))


def part_path(out: str, i: int) -> str:
    """Path of split cube ``i`` (``OUT-i``); see :func:`~h5sidecar.workflows.cube._cube_build.cube_paths`."""
    return cube_paths(out, i + 2)[i]


def _exists(path: str, format: str, opts: Mapping[str, Any]) -> bool:
    if format == "icechunk":
        import icechunk as ic

        from h5sidecar.workflows.icechunk._icechunk_repo import _storage

        return bool(ic.Repository.exists(_storage(path, opts)))
    import fsspec

    fs, p = fsspec.core.url_to_fs(path, **opts)
    return bool(fs.exists(p))


def existing_parts(out: str, format: str, opts: Mapping[str, Any]) -> list[str]:
    """The cubes at ``out``: ``out`` itself (then ``OUT-1``, ... added by split appends), or
    ``OUT-0``, ``OUT-1``, ... (a split build)."""
    whole = _exists(out, format, opts)
    if whole and _exists(part_path(out, 0), format, opts):
        raise InvalidRequestError(
            f"both {out} and {part_path(out, 0)} exist: which cubes to append to is ambiguous; "
            "remove the one no longer wanted"
        )
    found, i = ([out], 1) if whole else ([], 0)
    while _exists(part_path(out, i), format, opts):
        found.append(part_path(out, i))
        i += 1
    return found
