"""Dimension names and coordinates: what xarray shows through a sidecar against h5netcdf's.

Values compare by position, so a variable whose dimensions are renamed (and so loses its
coordinates and indexes) still has the right values; this check compares the structure
xarray builds on them, per variable of ``xr.open_dataset(file, engine="h5netcdf",
phony_dims="access", group=g)``: the dimension names, whether it is a coordinate, and whether
it has an index.  It is shared by ``verify`` and the test suite's reader matrix.

One difference is not one: a sidecar holds one name per axis and xarray (its ``DataTree``
above all) never lets one name have two lengths in a group and its ancestors, so where the
name h5netcdf shows has another length there (a subgroup's dimension shadowing an ancestor's
of another length; a netCDF variable written along an unlimited dimension less far than the
dimension, which h5netcdf pads), the indexer gives the axis a ``phony_dim_<n>`` name instead
(see the indexer's dimension naming).  Such an axis may differ, and so may the coordinate and
index status of the variable that names it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from h5sidecar.workflows.checks._cfcheck import OpenedGroups

__all__ = [
    "dimension_differences",
    "outer_lengths",
    "sidecar_dimension_differences",
    "variable_difference",
]

PHONY_PREFIX = "phony_dim_"


def outer_lengths(truths: Mapping[str, Any], group: str) -> dict[str, set[int]]:
    """The lengths each dimension name has in h5netcdf's views of ``group`` and its ancestors.

    Parameters
    ----------
    truths : mapping
        Group path (``""`` for the root) -> h5netcdf's Dataset of that group (or None when
        h5netcdf cannot open it).
    group : str
    """
    parts = group.split("/") if group else []
    out: dict[str, set[int]] = {}
    for depth in range(len(parts) + 1):
        ds = truths.get("/".join(parts[:depth]))
        if ds is None:
            continue
        for name, size in ds.sizes.items():
            out.setdefault(str(name), set()).add(int(size))
    return out


def _renamed_on_purpose(want: str, got: str, length: int, lengths: Mapping[str, set[int]]) -> bool:
    """True when the indexer had to rename this axis: ``want`` has another length nearby."""
    return got.startswith(PHONY_PREFIX) and any(n != length for n in lengths.get(want, ()))


def variable_difference(name: str, got: Any, want: Any, lengths: Mapping[str, set[int]]) -> str:
    """What differs in the dimension names, coordinate or index status of variable ``name`` of
    ``got`` from ``want``'s ("" when nothing; see :func:`dimension_differences`)."""
    gv, wv = got[name].variable, want[name].variable
    renamed: set[str] = set()
    extra = gv.dims[wv.ndim :] if gv.ndim > wv.ndim else ()
    # the trailing axes of an HDF5 array element type: phony in the sidecar, a sub-array
    # dtype in h5netcdf (no dimension)
    if gv.ndim < wv.ndim or not all(d.startswith(PHONY_PREFIX) for d in map(str, extra)):
        return f"dimensions {gv.dims} where h5netcdf has {wv.dims}"
    for g, w, length in zip(gv.dims, wv.dims, gv.shape, strict=False):
        if g == w:
            continue
        if not _renamed_on_purpose(str(w), str(g), length, lengths):
            return f"dimensions {gv.dims} where h5netcdf has {wv.dims}"
        renamed.add(str(w))
    if name in renamed:  # its own dimension renamed: no longer its coordinate, as xarray says
        return ""
    for what, g_has, w_has in (
        ("a coordinate", name in got.coords, name in want.coords),
        ("indexed", name in got.xindexes, name in want.xindexes),
    ):
        if g_has != w_has:
            shown = "is" if g_has else "is not"
            return f"{shown} {what}, unlike with h5netcdf"
    return ""


def dimension_differences(
    got: Any, want: Any, lengths: Mapping[str, set[int]] | None = None
) -> dict[str, str]:
    """Variables of ``want`` whose dimension names, coordinate or index status differ in ``got``.

    Parameters
    ----------
    got, want : xarray.Dataset
        One group through a reader, and as h5netcdf shows it.
    lengths : mapping, optional
        :func:`outer_lengths` of the group (the lengths of ``want`` alone when not given).

    Returns
    -------
    dict
        Variable name -> what differs.  Variables absent from ``got`` are left out (the value
        checks report them).
    """
    if lengths is None:
        lengths = {str(k): {int(v)} for k, v in want.sizes.items()}
    out: dict[str, str] = {}
    for name in want.variables:
        if name in got.variables:
            problem = variable_difference(name, got, want, lengths)
            if problem:
                out[str(name)] = problem
    return out


def sidecar_dimension_differences(
    store: Any, source: Any, groups: list[str], opened: Any = None
) -> dict[str, str]:
    """Arrays whose dimensions or coordinates through plain xarray on ``store`` differ from
    xarray + h5netcdf on ``source`` (see the module docstring).

    Parameters
    ----------
    store : zarr store
        The sidecar as plain kerchunk consumers open it (Zarr v2, consolidated).
    source : path or binary file object
        The HDF5 source, opened with h5netcdf.
    groups : list of str
        Group paths (``""`` for the root), ancestors before descendants.
    opened : OpenedGroups, optional
        Groups already opened on ``store`` and ``source``, shared with the decoded-value check
        (:class:`~h5sidecar.workflows.checks._cfcheck.OpenedGroups`); by default opened here.

    Returns
    -------
    dict
        Array path -> what differs.
    """
    truths: dict[str, Any] = {}
    out: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if opened is None:
            opened = stack.enter_context(OpenedGroups(store, source))
        for group in groups:
            truth = opened.truth(group)
            truths[group] = None if truth is None else truth[0]
            if truth is None:
                continue
            try:
                got = opened.plain(group)
            except Exception as exc:  # noqa: BLE001 - reported per variable, as verify does
                prefix = f"{group}/" if group else ""
                for name in truths[group].variables:
                    out[f"{prefix}{name}"] = f"plain xarray cannot open group /{group}: {exc}"
                continue
            prefix = f"{group}/" if group else ""
            found = dimension_differences(got, truths[group], outer_lengths(truths, group))
            out.update({f"{prefix}{name}": problem for name, problem in found.items()})
    return out
