"""HDF5 compound types -> the Zarr v2 structured dtype list form, bytes unchanged.

The Zarr v2 list form (``[["a", "<i4"], ["b", ">f8"]]``) cannot say where a field starts, and
zarr 3.1 reads neither nested fields nor array-valued fields.  HDF5 compound types have all
three: explicit member offsets (with gaps), nested compounds and array members.  So:

* **gaps** between members (and after the last one) become raw-byte fields named
  ``_pad<offset>`` (``|V<n>``), so every member lands at its HDF5 offset;
* **nested compounds** are flattened to dotted names (``position.x``);
* **array members** are flattened to one field per element (``matrix[0,1]``).

In a flattened type ``.`` and ``[i,j]`` are separators only: inside each member name ``%``,
``.``, ``[`` and ``]`` are written ``%25``, ``%2E``, ``%5B`` and ``%5D`` (a member ``"a.b"`` of
``outer`` is ``outer.a%2Eb``; split on the separators and ``urllib.parse.unquote`` each part to
get the names back).  A compound with neither nested nor array members keeps its member names
verbatim, as netCDF readers show them.

The flattened dtype has the same itemsize and every value at the same byte offset, so chunks
are still referenced in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail

__all__ = ["escape_member", "structured_json"]

#: Compound types flattening to more fields than this are refused (zarr would be very slow).
MAX_FIELDS = 4096


_ESCAPES = str.maketrans({"%": "%25", ".": "%2E", "[": "%5B", "]": "%5D"})


def escape_member(name: str) -> str:
    """A member name inside a flattened compound (separators ``.``/``[`` escaped)."""
    return name.translate(_ESCAPES)


def _leaves(
    dt: np.dtype, prefix: str, base: int, escape: bool = True
) -> Iterator[tuple[str, np.dtype, int]]:
    """Yield ``(flat name, scalar dtype, byte offset)`` for every leaf of a structured dtype."""
    assert dt.names is not None
    for name in dt.names:
        fdt, off = dt.fields[name][:2]  # type: ignore[index]
        label = escape_member(name) if escape else name
        yield from _field_leaves(fdt, prefix + label, base + off)


def _field_leaves(fdt: np.dtype, name: str, off: int) -> Iterator[tuple[str, np.dtype, int]]:
    if fdt.subdtype is not None:
        sub, shape = fdt.subdtype
        for k, idx in enumerate(np.ndindex(*shape)):
            label = f"{name}[{','.join(str(i) for i in idx)}]"
            yield from _field_leaves(sub, label, off + k * sub.itemsize)
    elif fdt.names is not None:
        yield from _leaves(fdt, name + ".", off)
    else:
        yield name, fdt, off


def _is_flat(dt: np.dtype) -> bool:
    assert dt.names is not None
    return all(
        dt.fields[n][0].names is None and dt.fields[n][0].subdtype is None  # type: ignore[index]
        for n in dt.names
    )


def structured_json(dt: np.dtype) -> tuple[list[Any], str]:
    """The Zarr v2 list form of structured dtype ``dt`` with identical byte layout.

    Returns
    -------
    fields : list
        ``[[name, typestr], ...]`` covering all ``dt.itemsize`` bytes.
    note : str
        What was flattened or padded ("" when nothing was).

    Raises
    ------
    Skip
        When the compound overlaps itself, has duplicate flattened names or too many fields.
    """
    flat = _is_flat(dt)
    leaves = sorted(_leaves(dt, "", 0, escape=not flat), key=lambda leaf: leaf[2])
    if len(leaves) > MAX_FIELDS:
        fail(
            ErrorKind.UNSUPPORTED_DTYPE,
            f"compound type flattens to {len(leaves)} fields (> {MAX_FIELDS})"
        )
    fields: list[Any] = []
    names: set[str] = set()
    pos = 0
    pads = 0
    for name, ldt, off in leaves:
        if off < pos:
            fail(
                ErrorKind.UNSUPPORTED_DTYPE,
                f"compound member {name!r} overlaps the previous member",
            )
        if off > pos:
            fields.append([f"_pad{pos}", f"|V{off - pos}"])
            pads += 1
        if name in names or name.startswith("_pad"):
            fail(
                ErrorKind.UNSUPPORTED_DTYPE,
                f"compound member name {name!r} is ambiguous once flattened",
            )
        names.add(name)
        fields.append([name, ldt.str])
        pos = off + ldt.itemsize
    if pos < dt.itemsize:
        fields.append([f"_pad{pos}", f"|V{dt.itemsize - pos}"])
        pads += 1
    notes = []
    if not flat:
        notes.append(
            "compound type flattened (nested members as 'outer.inner', array members as "
            "'name[i,j]'; '%', '.', '[' and ']' inside member names %-escaped) because zarr "
            "3.1 reads only flat structured dtypes"
        )
    if pads:
        notes.append(f"{pads} padding gap(s) of the compound layout kept as '_pad<offset>' fields")
    return fields, "; ".join(notes)
