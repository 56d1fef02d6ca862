"""VirtualiZarr's DMR++ parser, the peer the DMR++ corpus tests compare with."""

from __future__ import annotations

import xarray as xr


def open_dmrpp_group(doc_url: str, group: str) -> xr.Dataset:
    """One group of a DMR++ document (``file://`` URL) as VirtualiZarr's ``DMRPPParser`` and
    ``xr.open_zarr`` show it, values undecoded; raises whatever the peer raises on refusal."""
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr.parsers import DMRPPParser

    registry = ObjectStoreRegistry({"file://": LocalStore()})
    store = DMRPPParser(group=group or None)(doc_url, registry)
    return xr.open_zarr(store, consolidated=False, zarr_format=3, mask_and_scale=False,
                        decode_times=False)  # fmt: skip
