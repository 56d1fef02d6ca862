"""The HTTP gateway: sidecars served as Zarr v2 / v3 / virtual-shard stores over HTTP.

:func:`h5sidecar.gateway.app.create_app` builds the ASGI application that ``h5sidecar serve``
runs; it reads through :mod:`h5sidecar.read` and knows nothing of HDF5.
"""

from __future__ import annotations

from h5sidecar.errors import require_extra

# every module here builds on starlette: a base install learns which extra to add on the first
# import of the gateway, not from a ModuleNotFoundError deep in app.py
require_extra("gateway", "starlette", feature="the HTTP gateway (h5sidecar serve)")

__all__: list[str] = []
