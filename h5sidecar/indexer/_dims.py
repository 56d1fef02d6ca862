"""Dimension names (``_ARRAY_DIMENSIONS``) for every array.

Sources, in order of preference for each dimension:

1. the dimension scale attached to it (``DIMENSION_LIST``), named by the scale's base name, as
   netCDF-4 and h5netcdf do;
2. for a dimension scale itself, its own name for its first dimension; netCDF-4 multi-dimensional
   coordinate variables list their dimension ids in ``_Netcdf4Coordinates``;
3. a dimension label (``H5DSset_label``, stored in ``DIMENSION_LABELS``);
4. a phony name ``phony_dim_<n>``.

xarray (and its DataTree) require that one name never has two sizes in a group and its
ancestors/descendants.  A candidate breaking that rule falls through to a phony name, and phony
names are unique per (group, length) across the whole file: ``n`` counts every distinct (group,
length, k-th repeat within one array) the file needs.  A name the file itself repeats within
one array (a netCDF variable ``c(n, n)``) is kept repeated, as h5netcdf shows it: renaming one
axis would change how xarray decodes the array (a ``|S1`` array whose last dimension no other
variable uses is joined into strings), so the shape would differ from h5netcdf's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from h5sidecar.indexer._common import H5PY_ERRORS, reraise_io_failure
from h5sidecar.indexer._walk import DatasetEntry, Hierarchy, ObjectKey

__all__ = ["DimensionNamer", "is_dimension_scale"]

PHONY = "phony_dim_{}"


def is_dimension_scale(dset: h5py.Dataset) -> bool:
    """True when ``dset`` is an HDF5 dimension scale (``CLASS == "DIMENSION_SCALE"``)."""
    try:
        return bool(h5py.h5ds.is_scale(dset.id))
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return False


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _related(a: str, b: str) -> bool:
    """True when group ``a`` is ``b``, or an ancestor or descendant of it."""
    return a == b or not a or not b or b.startswith(a + "/") or a.startswith(b + "/")


def _attr(dset: h5py.Dataset, name: str) -> Any:
    try:
        return dset.attrs.get(name)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return None


class DimensionNamer:
    """Assigns dimension names for the arrays of one file (see the module docstring).

    Parameters
    ----------
    hierarchy : Hierarchy
        The walked file.
    key_of : callable
        Maps an object reference to the referenced object's :data:`ObjectKey` (``None`` when
        it cannot be resolved).
    """

    def __init__(
        self, hierarchy: Hierarchy, key_of: Callable[[h5py.Reference], ObjectKey | None]
    ) -> None:
        self._key_of = key_of
        self.scale_names: dict[ObjectKey, str] = {}
        self._dimids: dict[int, str] = {}
        for entry in hierarchy.datasets:
            if entry.alias_of is None and is_dimension_scale(entry.dset):
                name = entry.path.rpartition("/")[2]
                self.scale_names[entry.key] = name
                dimid = _attr(entry.dset, "_Netcdf4Dimid")
                if dimid is not None and np.size(dimid) == 1:
                    self._dimids[int(np.asarray(dimid).reshape(-1)[0])] = name
        self._real = set(self.scale_names.values())
        self._sizes: dict[str, list[tuple[str, int]]] = {}
        self._phony: dict[tuple[str, int, int], str] = {}
        self._counter = 0

    # -- candidates from the file ---------------------------------------------------------------
    def _from_dimension_list(self, dset: h5py.Dataset, rank: int) -> list[str | None]:
        out: list[str | None] = [None] * rank
        value = _attr(dset, "DIMENSION_LIST")
        if value is None:
            return out
        for i, refs in enumerate(np.asarray(value, dtype=object).reshape(-1)[:rank]):
            for ref in np.atleast_1d(np.asarray(refs, dtype=object)).reshape(-1):
                key = self._key_of(ref) if isinstance(ref, h5py.Reference) and ref else None
                if key is not None and key in self.scale_names:
                    out[i] = self.scale_names[key]
                    break
        return out

    def _from_netcdf_coordinates(self, dset: h5py.Dataset, out: list[str | None]) -> None:
        dimids = _attr(dset, "_Netcdf4Coordinates")
        if dimids is None:
            return
        for i, dimid in enumerate(np.asarray(dimids).reshape(-1)[: len(out)]):
            if out[i] is None:
                out[i] = self._dimids.get(int(dimid))

    def _from_labels(self, dset: h5py.Dataset, out: list[str | None]) -> None:
        labels = _attr(dset, "DIMENSION_LABELS")
        if labels is None:
            return
        for i, label in enumerate(np.asarray(labels, dtype=object).reshape(-1)[: len(out)]):
            text = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
            if out[i] is None and text.strip("\0 "):
                out[i] = text.strip("\0 ")

    # -- rules ---------------------------------------------------------------------------------
    def _fits(self, name: str, size: int, group: str) -> bool:
        return all(s == size for g, s in self._sizes.get(name, []) if _related(g, group))

    def _claim(self, name: str, size: int, group: str) -> None:
        seen = self._sizes.setdefault(name, [])
        if (group, size) not in seen:
            seen.append((group, size))

    def _phony_name(self, group: str, size: int, repeat: int) -> str:
        key = (group, size, repeat)
        if key not in self._phony:
            name = PHONY.format(self._counter)
            while name in self._real:
                self._counter += 1
                name = PHONY.format(self._counter)
            self._counter += 1
            self._phony[key] = name
        return self._phony[key]

    def names(
        self, entry: DatasetEntry, shape: tuple[int, ...], n_extra: int = 0
    ) -> tuple[tuple[str, ...], str]:
        """Dimension names of one array.

        Parameters
        ----------
        entry : DatasetEntry
        shape : tuple of int
            The Zarr shape (including trailing dimensions of an HDF5 array element type).
        n_extra : int
            How many trailing dimensions come from the element type (always phony).

        Returns
        -------
        names : tuple of str
        note : str
            Why a name from the file was not used ("" when all were).
        """
        rank = len(shape) - n_extra
        group = _parent(entry.path)
        candidates = self._from_dimension_list(entry.dset, rank)
        if entry.key in self.scale_names and rank and candidates[0] is None:
            candidates[0] = self.scale_names[entry.key]
        self._from_netcdf_coordinates(entry.dset, candidates)
        self._from_labels(entry.dset, candidates)
        candidates += [None] * n_extra
        names: list[str] = []
        notes: list[str] = []
        repeats: dict[int, int] = {}
        for i, (cand, size) in enumerate(zip(candidates, shape, strict=True)):
            if cand is not None and not self._fits(cand, size, group):
                notes.append(
                    f"dimension {i} is not named {cand!r}: that name has another size here"
                )
                cand = None
            if cand is None:
                k = repeats.get(size, 0)
                repeats[size] = k + 1
                cand = self._phony_name(group, size, k)
                while cand in names:  # a phony name equal to a real one used above
                    k = repeats[size] = repeats[size] + 1
                    cand = self._phony_name(group, size, k)
            self._claim(cand, size, group)
            names.append(cand)
        return tuple(names), "; ".join(notes)
