"""The HTTP gateway: sidecars served as Zarr v2 / v3 / virtual-shard stores over HTTP.

:func:`h5sidecar.gateway.app.create_app` builds the ASGI application that ``h5sidecar serve``
runs; it reads through :mod:`h5sidecar.read` and knows nothing of HDF5.

The Zarr access classes and functions (``SidecarStore``, ``H5SidecarFileSystem``, the xarray
engine, ``open_dataset`` ...) moved to :mod:`h5sidecar.read`.  Importing them from here still
works for one release and emits a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

#: names that moved to ``h5sidecar.read`` (deprecated here; removed in the next release)
_MOVED = frozenset(
    {
        "SidecarStore",
        "H5SidecarFileSystem",
        "H5SidecarBackend",
        "ChunkFetcher",
        "open_dataset",
        "open_datatree",
        "open_mfdataset",
        "check_combinable",
        "load_refs",
        "read_arrays",
        "load",
    }
)

__all__: list[str] = []


def moved(old: str, new: str) -> None:
    """Warn that module ``old`` is now ``new`` (called by the one-release shim modules)."""
    warnings.warn(
        f"{old} moved to {new}; import it from there ({old} will be removed in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"h5sidecar.gateway.{name} moved to h5sidecar.read.{name}; import it from "
            "h5sidecar.read (the old path will be removed in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("h5sidecar.read"), name)
    raise AttributeError(f"module 'h5sidecar.gateway' has no attribute {name!r}")
