"""Dimension names (``_ARRAY_DIMENSIONS``) for every array, as h5netcdf names them.

The reference is ``xr.open_dataset(file, engine="h5netcdf", phony_dims="access", group=g)``.
Sources, in order of preference for each dimension:

1. the dimension scale attached to it (``DIMENSION_LIST``; the last one when several are, as
   netCDF-C does), named by the base of the path HDF5 gives the scale (``h5py``'s ``.name`` of
   the dereferenced scale, what h5netcdf uses);
2. for a dimension scale itself, the dimensions its ``_Netcdf4Coordinates`` lists (netCDF-4
   coordinate variables; an id names the last link to a scale carrying it, as in h5netcdf),
   else its own name for its first dimension;
3. a dimension label (``H5DSset_label``, stored in ``DIMENSION_LABELS``);
4. for an axis without a scale, h5netcdf's "access" rule: each group has, per length, the
   dimension scales of that group (in link order) followed by ``phony_dim_<n>`` names; the
   k-th axis of that length of an array takes the k-th of them.  A group gets as many phony
   names per length as one of its unscaled arrays needs beyond its scales of that length, and
   ``n`` counts on from the phony names of the group's ancestors (root first), as h5netcdf
   numbers them when it opens that group.

xarray (and its DataTree) require that one name never has two sizes in a group and its
ancestors/descendants (:mod:`._name_claims` keeps the sizes given).  A candidate breaking that
rule falls through to a fallback phony name (numbered after every name above, unique per
(group, length, k-th repeat)).  The names the file
gives are settled for the whole file before any is handed out, groups nearer the root first
(link order within a depth): when a subgroup's dimension shadows an ancestor's of another
length, the subgroup's axes fall back, and the ancestor keeps the name h5netcdf shows for it
(its variables keep their coordinates), whatever the link order.  A name the file
itself repeats within one array (a netCDF variable ``c(n, n)``) is kept repeated, as h5netcdf
shows it: renaming one axis would change how xarray decodes the array (a ``|S1`` array whose
last dimension no other variable uses is joined into strings), so the shape would differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5sidecar.indexer._failures import H5PY_ERRORS, reraise_io_failure
from h5sidecar.indexer._walk import DatasetEntry, Hierarchy, ObjectKey
from h5sidecar.indexer.dims._name_claims import NameClaims
from h5sidecar.indexer.dims._scales import Scales, is_dimension_scale
from h5sidecar.indexer.dims._unlimited_dims import UnlimitedLengths, unlimited_first_axis

__all__ = ["DimensionNamer", "is_dimension_scale", "is_netcdf_dimension_only"]

PHONY = "phony_dim_{}"

#: netCDF-C marks datasets that only carry a dimension (no variable) with this NAME.
NETCDF_DIM_ONLY = b"This is a netCDF dimension but not a netCDF variable"


def is_netcdf_dimension_only(dset: h5py.Dataset) -> bool:
    """A netCDF-4 dimension without a variable: HDF5 holds no values for it."""
    if not is_dimension_scale(dset):
        return False
    return _dimension_only_name(_attr(dset, "NAME"))


def _dimension_only_name(name: Any) -> bool:
    return isinstance(name, bytes) and name.startswith(NETCDF_DIM_ONLY)


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _attr(dset: h5py.Dataset, name: str) -> Any:
    try:
        return dset.attrs.get(name)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return None


@dataclass
class _GroupDims:
    """The names h5netcdf gives the unscaled axes of one group's arrays, per length."""

    pools: dict[int, list[str]]
    n_phony: int


def _unscaled(dset: h5py.Dataset, rank: int) -> bool:
    """True when no axis of ``dset`` has a dimension scale attached (h5netcdf: "unlabeled")."""
    try:
        return all(h5py.h5ds.get_num_scales(dset.id, i) == 0 for i in range(rank))
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return False


class DimensionNamer:
    """Assigns dimension names for the arrays of one file (see the module docstring).

    Parameters
    ----------
    hierarchy : Hierarchy
        The walked file.
    key_of : callable
        Maps an object reference to the referenced object's :data:`ObjectKey` (``None`` when
        it cannot be resolved).
    shape_of : callable, optional
        A dataset's own shape (a virtual dataset's extent worked out from its sources);
        ``dset.shape`` when not given.  The namer shows it as h5netcdf does
        (``shape_of``: axes on an unlimited dimension at its length).
    lookup : callable, optional
        ``lookup(dset, name) -> (known, value)``: an attribute's value (``None``: absent) when
        ``known`` without asking HDF5 (see :meth:`~._attr_native.NativeAttrs.lookup`); looking
        up attributes an array does not have through h5py costs an HDF5 error each.
    dimension_list : callable, optional
        ``dimension_list(dset)``: the keys of the objects ``DIMENSION_LIST`` points at, per
        axis (``None``: ask h5py; see :meth:`~._attr_native.NativeAttrs.dimension_list`),
        without opening each target through HDF5.
    """

    def __init__(
        self,
        hierarchy: Hierarchy,
        key_of: Callable[[h5py.Reference], ObjectKey | None],
        shape_of: Callable[[DatasetEntry], tuple[int, ...]] | None = None,
        lookup: Callable[[h5py.Dataset, str], tuple[bool, Any]] | None = None,
        dimension_list: Callable[[h5py.Dataset], list[list[ObjectKey]] | None] | None = None,
    ) -> None:
        self._key_of = key_of
        self._lookup = lookup
        self._dimension_list = dimension_list
        self._entries = {e.path: e for e in hierarchy.datasets}
        self._members = hierarchy.members
        self._dimids: dict[str, dict[int, str]] = {}  # per group, see _dimid_names
        self.scales = Scales(hierarchy, lookup)
        self.is_scale = self.scales.is_scale
        self.scale_names = self.scales.names
        base = shape_of or (lambda entry: tuple(entry.dset.shape or ()))
        unlimited = UnlimitedLengths(hierarchy.datasets, self.scale_names, base, self.axis_scales)
        #: a dataset's shape as h5netcdf shows it (see :class:`UnlimitedLengths`)
        self.shape_of = unlimited.shape
        #: datasets kept at their HDF5 extent, and why (see :class:`UnlimitedLengths`)
        self.kept_extent = unlimited.kept
        self._real = set(self.scale_names.values())
        self._claims = NameClaims()  # xarray's rule: one size per name in related groups
        self._groups: dict[str, _GroupDims] = {}
        self._phony: dict[tuple[str, int, int], str] = {}
        self._counter: int | None = None  # fallback names: numbered after h5netcdf's
        # path -> (HDF5 shape, names the file gives or None, notes), see _settle
        self._settled: dict[str, tuple[tuple[int, ...], list[str | None], list[str]]] | None
        self._settled = None

    def _attr(self, dset: h5py.Dataset, name: str) -> Any:
        if self._lookup is not None:
            known, value = self._lookup(dset, name)
            if known:
                return value
        return _attr(dset, name)

    def dimension_only(self, entry: DatasetEntry) -> bool:
        """:func:`is_netcdf_dimension_only` of a walked dataset, its ``NAME`` looked up in the
        attributes already read from the bytes (h5py's lookup is a dense-storage search in
        HDF5 per scale, twice per scale: while names are settled and when it is indexed)."""
        return self.is_scale(entry) and _dimension_only_name(self._attr(entry.dset, "NAME"))

    # -- h5netcdf's phony dimensions -------------------------------------------------------------
    def _group_dims(self, group: str) -> _GroupDims:
        if group in self._groups:
            return self._groups[group]
        parents = group.split("/")[:-1] if group else None
        offset = 0
        if parents is not None:  # root first, then each ancestor down to the parent
            chain = [""] + ["/".join(parents[: i + 1]) for i in range(len(parents))]
            offset = sum(self._group_dims(g).n_phony for g in chain)
        real: list[tuple[str, int]] = []
        labeled: Counter[int] = Counter()
        needed: Counter[int] = Counter()
        for path in self._members.get(group, []):
            entry = self._entries.get(path)
            shape = self.shape_of(entry) if entry is not None else ()
            if entry is None or not shape:
                continue
            if self.is_scale(entry):
                real.append((path.rpartition("/")[2], shape[0]))
                if not unlimited_first_axis(entry.dset):
                    labeled[shape[0]] += 1
            elif self._unscaled(entry.dset, len(shape)):
                needed |= Counter(shape)
        pools: dict[int, list[str]] = {}
        for name, size in real:
            pools.setdefault(size, []).append(name)
        n = 0
        for size, count in needed.items():
            for _ in range(labeled[size], count):
                pools.setdefault(size, []).append(PHONY.format(offset + n))
                n += 1
        self._groups[group] = _GroupDims(pools, n)
        return self._groups[group]

    def _unscaled(self, dset: h5py.Dataset, rank: int) -> bool:
        """:func:`_unscaled` from the ``DIMENSION_LIST`` already decoded from the bytes when it
        has one entry per axis (``H5DSget_num_scales`` reads the attribute through HDF5 once
        per axis); through HDF5 otherwise."""
        keys = self._dimension_list(dset) if self._dimension_list is not None else None
        if keys is not None and (not keys or len(keys) == rank):
            return all(not axis for axis in keys)
        return _unscaled(dset, rank)

    # -- candidates from the file ---------------------------------------------------------------
    def axis_scales(self, dset: h5py.Dataset, rank: int) -> list[ObjectKey | None]:
        """The key of the dimension scale naming each axis of ``dset`` (``None``: none)."""
        out: list[ObjectKey | None] = [None] * rank
        keys = self._dimension_list(dset) if self._dimension_list is not None else None
        if keys is not None:
            for i, axis in enumerate(keys[:rank]):
                # several scales on one axis: the last one names it, as in netCDF-C and h5netcdf
                out[i] = next((t for t in axis[::-1] if t in self.scale_names), None)
            return out
        value = self._attr(dset, "DIMENSION_LIST")
        if value is None:
            return out
        for i, refs in enumerate(np.asarray(value, dtype=object).reshape(-1)[:rank]):
            for ref in np.atleast_1d(np.asarray(refs, dtype=object)).reshape(-1)[::-1]:
                key = self._key_of(ref) if isinstance(ref, h5py.Reference) and ref else None
                if key is not None and key in self.scale_names:
                    out[i] = key
                    break
        return out

    def _from_dimension_list(self, dset: h5py.Dataset, rank: int) -> list[str | None]:
        return [self.scale_names.get(k) if k is not None else None
                for k in self.axis_scales(dset, rank)]  # fmt: skip

    def _dimid_names(self, group: str) -> dict[int, str]:
        """netCDF-4 dimension id -> name, as h5netcdf maps them in ``group``: it registers a
        dimension per link to a scale (hard and soft links to one scale included), the root's
        first and ``group``'s last, and an id names the last one registered with it."""
        if group not in self._dimids:
            parts = group.split("/") if group else []
            out: dict[int, str] = {}
            for depth in range(len(parts) + 1):
                for path in self._members.get("/".join(parts[:depth]), []):
                    entry = self._entries.get(path)
                    if entry is None or not self.is_scale(entry):
                        continue
                    dimid = self._attr(entry.dset, "_Netcdf4Dimid")
                    if dimid is not None and np.size(dimid) == 1:
                        out[int(np.asarray(dimid).reshape(-1)[0])] = path.rpartition("/")[2]
            self._dimids[group] = out
        return self._dimids[group]

    def _from_netcdf_coordinates(
        self, dset: h5py.Dataset, group: str, out: list[str | None]
    ) -> None:
        dimids = self._attr(dset, "_Netcdf4Coordinates")
        if dimids is None:
            return
        names = self._dimid_names(group)
        for i, dimid in enumerate(np.asarray(dimids).reshape(-1)[: len(out)]):
            if out[i] is None:
                out[i] = names.get(int(dimid))

    def _from_labels(self, dset: h5py.Dataset, out: list[str | None]) -> None:
        labels = self._attr(dset, "DIMENSION_LABELS")
        if labels is None:
            return
        for i, label in enumerate(np.asarray(labels, dtype=object).reshape(-1)[: len(out)]):
            text = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
            if out[i] is None and text.strip("\0 "):
                out[i] = text.strip("\0 ")

    # -- rules ---------------------------------------------------------------------------------
    def _phony_name(self, group: str, size: int, repeat: int) -> str:
        """A fallback name, unique per (group, length, repeat), after all of h5netcdf's."""
        if self._counter is None:
            self._counter = sum(self._group_dims(g).n_phony for g in {"", *self._members})
        key = (group, size, repeat)
        if key not in self._phony:
            name = PHONY.format(self._counter)
            while name in self._real:
                self._counter += 1
                name = PHONY.format(self._counter)
            self._counter += 1
            self._phony[key] = name
        return self._phony[key]

    def _file_names(
        self, entry: DatasetEntry, shape: tuple[int, ...]
    ) -> tuple[list[str | None], list[str]]:
        """The names the file (or h5netcdf's rule) gives the axes of ``shape``, each claimed,
        or ``None`` with a note where that name has another size in a related group."""
        group = _parent(entry.path)
        candidates = self._from_dimension_list(entry.dset, len(shape))
        if entry.key in self.scale_names:
            # h5netcdf names a netCDF-4 coordinate variable by its _Netcdf4Coordinates first
            self._from_netcdf_coordinates(entry.dset, group, candidates)
            if shape and candidates[0] is None:
                candidates[0] = self.scale_names[entry.key]
        self._from_netcdf_coordinates(entry.dset, group, candidates)
        self._from_labels(entry.dset, candidates)
        pools = self._group_dims(group).pools
        taken: dict[int, int] = {}
        for i, size in enumerate(shape):  # axes without a scale: h5netcdf's rule
            if candidates[i] is not None:
                continue
            k = taken.get(size, 0)
            taken[size] = k + 1
            if k < len(pools.get(size, ())):
                candidates[i] = pools[size][k]
        notes: list[str] = []
        for i, (cand, size) in enumerate(zip(candidates, shape, strict=True)):
            if cand is None:
                continue
            if self._claims.fits(cand, size, group):
                self._claims.claim(cand, size, group)
            else:
                notes.append(
                    f"dimension {i} is not named {cand!r}: that name has another size here"
                )
                candidates[i] = None
        return candidates, notes

    def _settle(self) -> dict[str, tuple[tuple[int, ...], list[str | None], list[str]]]:
        """Claim the file's names of every array, groups nearer the root first.

        The first claim of a name wins; claiming in the walk's (depth-first) order let a
        subgroup listed before an ancestor's variables (``tile_stats/`` before ``x``) take
        ``x`` and ``y`` from the ancestor, whose variables then lost their coordinates.
        netCDF dimension-only datasets claim nothing: no variable shows their dimension in
        their group, so xarray never sees it there.
        """
        settled = self._settled = {}
        by_depth = sorted(self._entries.values(), key=lambda e: e.path.count("/"))  # stable
        for entry in by_depth:
            if self.dimension_only(entry):
                continue
            shape = self.shape_of(entry)
            settled[entry.path] = (shape, *self._file_names(entry, shape))
        return settled

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
        settled = (self._settled if self._settled is not None else self._settle()).get(entry.path)
        if settled is not None and settled[0] == shape[:rank]:
            candidates, notes = list(settled[1]), settled[2]
        else:  # not settled beforehand (its shape was not known then): claimed now
            candidates, notes = self._file_names(entry, shape[:rank])
        candidates += [None] * n_extra
        names: list[str] = []
        repeats: dict[int, int] = {}
        for cand, size in zip(candidates, shape, strict=True):
            if cand is None:
                k = repeats.get(size, 0)
                repeats[size] = k + 1
                cand = self._phony_name(group, size, k)
                while cand in names:  # a phony name equal to a real one used above
                    k = repeats[size] = repeats[size] + 1
                    cand = self._phony_name(group, size, k)
                self._claims.claim(cand, size, group)
            names.append(cand)
        return tuple(names), "; ".join(notes)
