"""The HTTP gateway: sidecars served as Zarr v2 / v3 / virtual-shard stores over HTTP.

:func:`h5sidecar.gateway.app.create_app` builds the ASGI application that ``h5sidecar serve``
runs; it reads through :mod:`h5sidecar.read` and knows nothing of HDF5.
"""

from __future__ import annotations

__all__: list[str] = []
