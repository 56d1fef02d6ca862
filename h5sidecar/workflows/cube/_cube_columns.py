"""A Parquet cube's per-member record in member columns, not in its ``.zmetadata``.

The cube record (:func:`~h5sidecar.workflows.cube._cube_assemble.cube_record`) lists, for every
member, its length along the concat dimension and the sidecar (path below a common root, and
stamp) it came from.  In a JSON cube (and an Icechunk commit) those lists stay in the record.
A Parquet cube holds them as columns of its members table (``length``, ``sidecar``,
``stamp``), written to its members file (:mod:`h5sidecar.references.parquet_sidecar._members_file`) and read
only when an append needs them: its ``.zmetadata`` then grows with nothing per member, and a
build makes no Python object per member for them (they go from NumPy to Arrow).  The record
says ``"per_member": "columns"``; :func:`with_lists` gives an append the lists back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import MemberTable, SourceInfo

__all__ = ["COLUMNS", "as_columns", "check_columns", "columns_record", "with_lists"]

#: The record's marker of per-member lists held as member columns.
COLUMNS = "columns"
_LENGTH, _SIDECAR, _STAMP = "length", "sidecar", "stamp"


def _root(paths: pa.Array | pa.ChunkedArray) -> str:
    """The common prefix of the non-null ``paths``, cut at its last ``/`` (as
    :func:`~h5sidecar.workflows.cube._cube_assemble.cube_record` does)."""
    known = paths.drop_null()
    if not len(known):
        return ""
    # the common prefix of all is that of the smallest and the largest (sorted as bytes)
    lo, hi = pc.min_max(known).values()
    root = os.path.commonprefix([lo.as_py(), hi.as_py()])  # noqa: RUF071 - "s3://" kept
    return root[: root.rfind("/") + 1]


def columns_record(
    record: Mapping[str, Any], members: MemberTable, lengths: np.ndarray,
    paths: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    stamps: np.ndarray | pa.Array | pa.ChunkedArray, *, below: str = "",
) -> tuple[dict[str, Any], MemberTable]:
    """``record`` (made without per-member lists) and ``members`` with the columns of
    ``lengths``, sidecar ``paths`` (None: a member given as references; a list or an Arrow
    string array) and ``stamps`` (bytes, ``b""`` for none; or Arrow strings, null or ``""``
    for none), in member order.  ``below``: a folder (ending in ``/``) every path is given
    relative to (an append's, whose members' paths are kept relative: no full path a member)."""
    path_array = (paths if isinstance(paths, (pa.Array, pa.ChunkedArray))
                  else pa.array(paths, pa.string()))
    sub = _root(path_array)
    rel = pc.utf8_slice_codeunits(path_array, len(sub)) if sub else path_array
    root = below + sub
    stamp_array = (stamps if isinstance(stamps, (pa.Array, pa.ChunkedArray))
                   else pa.array(stamps, pa.binary()).cast(pa.string()))
    stamp_array = pc.if_else(pc.equal(stamp_array, ""), pa.scalar(None, pa.string()),
                             stamp_array)
    table = members.with_columns({_LENGTH: pa.array(np.asarray(lengths, np.int64)),
                                  _SIDECAR: rel, _STAMP: stamp_array})
    out = {k: v for k, v in record.items() if k not in ("lengths", "sidecars")}
    out.update(granules=len(table), per_member=COLUMNS, sidecars={"root": root})
    return out, table


def as_columns(record: Mapping[str, Any], members: Sequence[SourceInfo]
               ) -> tuple[dict[str, Any], MemberTable]:
    """A record with per-member lists as :func:`columns_record` gives it (an append's)."""
    table = members if isinstance(members, MemberTable) else MemberTable.of(members)
    block = record["sidecars"]
    root = block["root"]
    paths = [None if q is None else root + q for q in block["paths"]]
    stamps = np.array([(s or "").encode() for s in block["stamps"]], dtype=np.bytes_)
    if not stamps.size:
        stamps = np.zeros(len(table), dtype="S1")
    return columns_record(record, table, np.asarray(record["lengths"], np.int64), paths,
                          stamps)


def check_columns(record: Mapping[str, Any], members: Sequence[SourceInfo], where: str
                  ) -> bool:
    """Whether ``record`` holds its per-member lists as columns of ``members`` (refused when
    it says so and they are missing, or its sidecar root is malformed)."""
    if record.get("per_member") != COLUMNS:
        return False
    if not isinstance(members, MemberTable) or any(  # (no member read but one file's)
            c not in members.schema.names for c in (_LENGTH, _SIDECAR, _STAMP)):
        raise InvalidReferenceError(
            f"{where}: its record's per-member columns are missing; build the cube again")
    sidecars = record.get("sidecars")
    if not isinstance(sidecars, Mapping) or not isinstance(sidecars.get("root"), str):
        raise InvalidReferenceError(f"{where}: malformed cube record; build the cube again")
    return True


def with_lists(record: Mapping[str, Any], members: Sequence[SourceInfo], where: str
               ) -> dict[str, Any]:
    """``record`` with its per-member lists (as a JSON cube's), from the member columns when
    it holds none."""
    if record.get("per_member") != COLUMNS:
        return dict(record)
    cols = None
    if isinstance(members, MemberTable):
        cols = [members.column(c) for c in (_LENGTH, _SIDECAR, _STAMP)]
    if cols is None or any(c is None for c in cols):
        raise InvalidReferenceError(
            f"{where}: its record's per-member columns are missing; build the cube again")
    lengths, paths, stamps = (c.to_pylist() for c in cols)  # type: ignore[union-attr]
    sidecars = record.get("sidecars")
    root = sidecars.get("root") if isinstance(sidecars, Mapping) else None
    if not isinstance(root, str):
        raise InvalidReferenceError(f"{where}: malformed cube record; build the cube again")
    out = {k: v for k, v in record.items() if k != "per_member"}
    return {**out, "lengths": lengths,
            "sidecars": {"root": root, "paths": paths, "stamps": stamps}}
