"""A granule that shows what a newcomer meets on the landing page, and a gateway serving it.

Written with the netCDF-C library (as GOES and IMERG products are), so it carries what h5py alone
does not: dimension-only datasets for ``y``, ``x``, ``Grid/time`` and ``Grid/lon`` (dimensions
without a coordinate variable).  ``HT`` is packed like GOES ABI's cloud-top height: int16 raw
-30000..30000 with ``scale_factor``/``add_offset`` mapping it onto 0..15430 m, ``_FillValue``,
``valid_range``, and one raw value beyond the valid range.  ``Grid/precipitation`` (IMERG's
group layout) is float32 with a ``_FillValue`` present in the data.  Its name is long, as
GOES names are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.gateway._http import gateway

#: A GOES-like name: long, with parts joined by "_", "-" and ".".
LONG_NAME = "OR_ABI-L2-ACHAC-M6_G16_s20230011801172_e20230011803545_c20230011805125.nc"
#: HT's packing: raw -30000..30000 is 0..15430 m.
SCALE, OFFSET, VALID = 15430 / 60000, 7715.0, (-30000, 30000)
HT_FILL, PR_FILL = -32768, -9999.9


def write_packed_granule(path: Path) -> Path:
    """Write the granule described in the module docstring to ``path``."""
    import netCDF4

    rng = np.random.default_rng(27)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("y", 60)
        nc.createDimension("x", 80)
        ht = nc.createVariable("HT", "i2", ("y", "x"), fill_value=HT_FILL, zlib=True,
                               chunksizes=(30, 40))  # fmt: skip
        ht.set_auto_maskandscale(False)  # write the packed integers as given
        ht.setncatts({"scale_factor": np.float32(SCALE), "add_offset": np.float32(OFFSET),
                      "valid_range": np.array(VALID, "i2"), "units": "m",
                      "long_name": "cloud top height"})  # fmt: skip
        raw = rng.integers(VALID[0], VALID[1] + 1, size=(60, 80)).astype("i2")
        raw[0, :5] = HT_FILL
        raw[1, :2] = VALID  # the extremes of the valid range: 0 m and 15430 m
        raw[2, 0] = 31000  # beyond valid_range: invalid, not 15687 m
        ht[:] = raw
        grid = nc.createGroup("Grid")
        grid.createDimension("time", 1)
        grid.createDimension("lat", 20)
        grid.createDimension("lon", 30)
        lat = grid.createVariable("lat", "f4", ("lat",))
        lat.setncatts({"units": "degrees_north", "standard_name": "latitude"})
        lat[:] = np.linspace(-9.5, 9.5, 20)
        pr = grid.createVariable("precipitation", "f4", ("time", "lat", "lon"),
                                 fill_value=np.float32(PR_FILL))  # fmt: skip
        pr.set_auto_maskandscale(False)
        pr.units = "mm/hr"
        values = rng.gamma(0.5, 2.0, size=(1, 20, 30)).astype("f4")
        values[0, 0, :4] = np.float32(PR_FILL)
        pr[:] = values
    return path


@pytest.fixture(scope="module")
def landing_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Any]]:
    """The granule indexed into a local DEST and served: ``(base URL, granule path, app)``."""
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("landing")
    (root / "src").mkdir()
    path = write_packed_granule(root / "src" / LONG_NAME)
    report = index_many(str(root / "src"), str(root / "dest"), format="json", executor="serial")
    assert report.ok, report.to_dict()
    with gateway(str(root / "dest"), allow=(str(root),)) as (url, app):
        yield url, path, app
