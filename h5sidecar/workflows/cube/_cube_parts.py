"""Where a cube's parts are: ``OUT`` itself, or ``OUT-0``, ``OUT-1``, ... of a split.

A split build writes ``OUT-0``, ``OUT-1``, ... (:func:`~h5sidecar.workflows.cube._cube_build.cube_paths`); an
append that splits off a new encoding adds the next index after the existing parts, so a
single cube ``OUT`` may be followed by ``OUT-1``, ``OUT-2``, ...
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import InvalidReferenceError, InvalidRequestError
from h5sidecar.references import GranuleRefs, MemberTable, first_rows
from h5sidecar.workflows.cube._cube_build import cube_paths
from h5sidecar.workflows.cube._cube_columns import COLUMNS

__all__ = ["Granule", "Part", "existing_parts", "part_path"]


@dataclass
class Part:
    """One existing cube: where it is, its record, members and inline coordinates.

    A Parquet cube's record holds no per-member lists (``per_member: "columns"``): its
    members' lengths and sidecars are columns of ``members``, read through :attr:`lengths`,
    :meth:`sidecar_columns` and (the rewrite of a whole cube only) :meth:`sidecar_map`.
    Other cubes' records hold them as lists (``record["lengths"]``, ``record["sidecars"]``
    as a mapping member URL -> ``[path, stamp]``).
    """

    path: str
    record: dict[str, Any]
    members: MemberTable
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
    def in_columns(self) -> bool:
        """Whether the per-member lists are member columns (a Parquet cube's record)."""
        return self.record.get("per_member") == COLUMNS

    @cached_property
    def lengths(self) -> np.ndarray:
        """Each member's length along the concat dimension (of a Parquet cube's members
        files, that column alone is read)."""
        if not self.in_columns:
            return np.asarray(self.record["lengths"], np.int64)
        column = self.members.column_only("length")
        assert column is not None  # checked by read_record
        out = column.to_numpy()
        if int(out.sum()) != self.coordinate.size:
            raise InvalidReferenceError(
                f"{self.path}: its members' lengths add up to {int(out.sum())} steps, its "
                f"coordinate holds {self.coordinate.size}; the cube was damaged: build it again")
        return out

    @cached_property
    def starts(self) -> np.ndarray:
        """Each member's first step along the concat dimension, then the cube's length."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(int)

    def sidecar_columns(self, full: bool = True) -> tuple[Any, Any, Any]:
        """Member URLs, their sidecars' full paths (None unless ``full``) and recorded stamps,
        aligned (null: a member given as references); for a Parquet cube straight from its
        member columns, chunked as read (one chunk a members file)."""
        block = self.record["sidecars"]
        if self.in_columns:
            rel, stamps = self.members.column("sidecar"), self.members.column("stamp")
            assert rel is not None and stamps is not None  # checked by read_record
            paths = (pc.binary_join_element_wise(pa.scalar(block["root"], pa.string()), rel, "")
                     if full else None)
            return self.members.urls, paths, stamps
        # a JSON or Icechunk cube's record: URL -> [path, stamp] (lists held already)
        return (pa.array(list(block), pa.string()),
                pa.array([s[0] for s in block.values()], pa.string()),
                pa.array([s[1] for s in block.values()], pa.string()))

    def sidecar_rows(self, paths: pa.Array) -> np.ndarray:
        """The row of the member whose sidecar each of ``paths`` is (-1: none): for a Parquet
        cube, the paths below the record's root compared with the members' relative ones (no
        full path made a member)."""
        if not self.in_columns:
            return first_rows(self.sidecar_columns()[1], paths)
        root = str(self.record["sidecars"]["root"])
        under = pc.fill_null(pc.starts_with(paths, root), False)
        below = pc.if_else(under, pc.utf8_slice_codeunits(paths, len(root)),
                           pa.scalar(None, pa.string()))
        # (a cube in several members files: only those whose range may hold one are read)
        return self.members.rows_of("sidecar", below)

    def url_stamps(self, rows: np.ndarray) -> tuple[pa.Array, pa.Array]:
        """The URL and recorded sidecar stamp of the members at ``rows`` (a Parquet cube's:
        read from the members files holding them only)."""
        if self.in_columns:
            got = self.members.take(rows, ["url", "stamp"])
            return got.column("url").combine_chunks(), got.column("stamp").combine_chunks()
        urls, _, stamps = self.sidecar_columns(full=False)
        at = pa.array(np.asarray(rows, np.int64))
        return urls.take(at), stamps.take(at)

    def sidecar_map(self) -> dict[str, list[str]]:
        """Member URL -> ``[sidecar path, stamp]`` of every member with a sidecar (O(members)
        objects: for the rewrite of a whole cube)."""
        if not self.in_columns:
            return {u: list(s) for u, s in self.record["sidecars"].items()}
        urls, full, stamps = (c.to_pylist() for c in self.sidecar_columns())
        return {u: [q, s] for u, q, s in zip(urls, full, stamps, strict=True) if q is not None}


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
