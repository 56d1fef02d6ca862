"""Deprecated: moved to :mod:`h5sidecar.read.zarr.filesystem` (this alias is removed in the next release)."""

from h5sidecar.gateway import moved as _moved

_moved("h5sidecar.gateway.fs", "h5sidecar.read.zarr.filesystem")

from h5sidecar.read.zarr.filesystem import *
from h5sidecar.read.zarr.filesystem import __all__  # noqa: F401
