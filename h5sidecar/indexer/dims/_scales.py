"""Which datasets are dimension scales, and the name h5netcdf shows for each.

h5netcdf names a scale by the base of the path HDF5 gives it when a reference to it is
dereferenced: HDF5 then searches the file for a link to it (~1.5 ms a scale on a granule of a
thousand objects).  When the scale has one path only, that search can only find it, so the path
the walk took is used instead; every other scale still asks HDF5.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import h5py

from h5sidecar.indexer._failures import H5PY_ERRORS, reraise_io_failure
from h5sidecar.indexer._walk import DatasetEntry, Hierarchy, ObjectKey, model_path

__all__ = ["Scales", "is_dimension_scale", "scale_name"]


def is_dimension_scale(dset: h5py.Dataset) -> bool:
    """True when ``dset`` is an HDF5 dimension scale (``CLASS == "DIMENSION_SCALE"``)."""
    try:
        return bool(h5py.h5ds.is_scale(dset.id))
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return False


def scale_name(entry: DatasetEntry, single: bool = False) -> str:
    """The base of the path HDF5 gives the scale when dereferenced (what h5netcdf shows).

    ``single``: the scale has one path only (see :meth:`Scales.single_path`), so it
    is that path: asking HDF5 makes it search the file for the object (~1.5 ms a scale).
    """
    if single:
        return entry.path.rpartition("/")[2]
    try:
        name = entry.dset.file[entry.dset.ref].name
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        name = None
    if not name:
        return entry.path.rpartition("/")[2]
    return model_path(name).rpartition("/")[2]


def _links(obj: h5py.HLObject) -> int:
    """The object's hard link count (0 when HDF5 cannot say)."""
    try:
        return int(h5py.h5o.get_info(obj.id).rc)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return 0


class Scales:
    """The dimension scales of a walked file and their names (see the module docstring).

    Attributes
    ----------
    names : dict
        :data:`~._walk.ObjectKey` of each scale -> the name h5netcdf shows for it.
    """

    def __init__(
        self,
        hierarchy: Hierarchy,
        lookup: Callable[[h5py.Dataset, str], tuple[bool, Any]] | None = None,
    ) -> None:
        self._scales: dict[str, bool] = {}  # path -> is a scale, see is_scale
        self._lookup = lookup
        self._group_objects = dict(hierarchy.groups)
        self._escaped = set(hierarchy.escaped)
        self._links: dict[str, int] = {}  # group path -> its hard link count
        # names HDF5 may find an object by besides its entry: other entries of it (soft links
        # and aliases), or links the walk left out (any kind: not looked at more closely)
        self._names_of = Counter(e.key for e in hierarchy.datasets)
        self._all_links_seen = not hierarchy.skipped
        self.names: dict[ObjectKey, str] = {}
        for entry in hierarchy.datasets:
            if entry.alias_of is None and self.is_scale(entry):
                self.names[entry.key] = scale_name(entry, self.single_path(entry))

    def is_scale(self, entry: DatasetEntry) -> bool:
        """:func:`is_dimension_scale` of ``entry``, asked of HDF5 once per path (an attribute
        lookup each time, four times per array otherwise).  An array known from its decoded
        attributes to have no ``CLASS`` is not a scale without asking: HDF5 searches dense
        attribute storage for the name (~9 us an array); ``H5DSis_scale``'s checks of a
        ``CLASS`` that is there are left to HDF5."""
        found = self._scales.get(entry.path)
        if found is None:
            known, value = (
                self._lookup(entry.dset, "CLASS") if self._lookup is not None else (False, None)
            )
            absent = known and value is None
            found = self._scales[entry.path] = not absent and is_dimension_scale(entry.dset)
        return found

    def single_path(self, entry: DatasetEntry) -> bool:
        """True when ``entry.path`` is the only path to the dataset, so that the name HDF5 gives
        it (the first link in name order that resolves to it) is that path: one hard link to it
        and to each group above it, no soft link to it, no link the walk left out, and its name
        kept unescaped."""
        if (
            not self._all_links_seen
            or self._names_of[entry.key] != 1
            or entry.link != "hard"
            or entry.path in self._escaped
            or _links(entry.dset) != 1
        ):
            return False
        parts = entry.path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            group = "/".join(parts[:depth])
            if group not in self._links:
                obj = self._group_objects.get(group)
                self._links[group] = _links(obj) if obj is not None else 0
            if self._links[group] != 1:
                return False
        return True
