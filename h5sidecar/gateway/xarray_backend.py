"""Deprecated: moved to :mod:`h5sidecar.read.xarray.backend` (this alias is removed in the next release)."""

from h5sidecar.gateway import moved as _moved

_moved("h5sidecar.gateway.xarray_backend", "h5sidecar.read.xarray.backend")

from h5sidecar.read.xarray.backend import *
from h5sidecar.read.xarray.backend import __all__  # noqa: F401
