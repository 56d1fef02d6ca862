"""Deprecated: moved to :mod:`h5sidecar.read.zarr.store` (this alias is removed in the next release)."""

from h5sidecar.gateway import moved as _moved

_moved("h5sidecar.gateway.store", "h5sidecar.read.zarr.store")

from h5sidecar.read.zarr.store import *
from h5sidecar.read.zarr.store import __all__  # noqa: F401
