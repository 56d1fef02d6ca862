"""h5netcdf's private API, as ``verify``'s comparison with xarray + h5netcdf uses it (and the
test suite's truth).

- :func:`freeze_dimension_sizes` makes the dimensions visible from one group of a file opened
  read-only compute their size once.  h5netcdf computes a variable's ``shape`` from its
  dimensions on every access, and the size of an unlimited dimension from every variable its
  ``REFERENCE_LIST`` names (one h5py dereference each); xarray asks a variable's shape about
  six times while opening and reading it.  On an ATL03-like granule (140 groups, about 20
  variables on each group's unlimited dimension) that was 267,000 dereferences, 16 s of a
  39 s ``verify``.  The sizes of a file opened read-only do not change while it is open, so
  the values are the same; only the work is done once.  It changes the class of those
  ``h5netcdf.dimensions.Dimension`` objects (``Group.dimensions`` and ``Group.parent`` are
  public; the ``Dimension`` class, its ``size`` property's code and ``Group._root._writable``
  are not promised) to a subclass of ours, and no other object: files opened elsewhere are
  untouched.

:data:`CHECKED` runs from the floor ``pyproject.toml`` declares to the newest release this was
checked on (1.8, with ``tests/test_compat.py``).  Outside it, :func:`freeze_dimension_sizes`
does nothing (h5netcdf's own, slower path: the same values).
"""

from __future__ import annotations

import functools
from typing import Any

from packaging.specifiers import SpecifierSet

from h5sidecar._compat._installed import installed_in

__all__ = ["CHECKED", "freeze_dimension_sizes", "in_checked"]

#: The h5netcdf versions this use is known to work on (checked: 1.8.2).
CHECKED = SpecifierSet(">=1.3,<1.9")


@functools.cache
def in_checked() -> bool:
    """Whether the installed h5netcdf is one of :data:`CHECKED`."""
    return installed_in("h5netcdf", CHECKED)


@functools.cache
def _frozen_class() -> type:
    from h5netcdf.dimensions import Dimension

    computed = Dimension.size.fget  # type: ignore[attr-defined]

    class FrozenSizeDimension(Dimension):  # type: ignore[misc]
        """A dimension of a file opened read-only: its size computed once, then kept."""

        @property
        def size(self) -> int:
            try:
                return self.__dict__["_h5sidecar_size"]  # type: ignore[no-any-return]
            except KeyError:
                size = self.__dict__["_h5sidecar_size"] = computed(self)
                return size  # type: ignore[no-any-return]

    return FrozenSizeDimension


def freeze_dimension_sizes(group: Any) -> None:
    """Compute each dimension's size visible from ``group`` (an ``h5netcdf`` group of a file
    opened read-only) once, on first use, instead of on every variable's ``shape``.

    Does nothing outside :data:`CHECKED`, or for a file opened for writing (whose sizes grow).
    """
    if not in_checked():
        return
    from h5netcdf.dimensions import Dimension

    frozen = _frozen_class()
    node = group
    if node._root._writable:
        return
    while node is not None:
        for dim in node.dimensions.values():
            if type(dim) is Dimension:
                dim.__class__ = frozen
        node = node.parent
