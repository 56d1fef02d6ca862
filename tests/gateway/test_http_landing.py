"""The landing page as a newcomer uses it (issue 27): the "Open it" snippet run as shown, the
quick look in physical values, dimension names in the variable tables, and netCDF
dimension-only datasets listed as dimensions rather than as data left out.

Every value is compared with h5py (raw) or xarray + h5netcdf (decoded) reading the file itself.
"""

from __future__ import annotations

import html
import io
import re
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest
import xarray as xr
from PIL import Image

from tests.gateway._http import ATL03, Corpus, http, http_corpus, served
from tests.gateway._landing_granule import LONG_NAME, SCALE, VALID, landing_gateway

__all__ = ["http", "http_corpus", "landing_gateway", "served"]  # fixtures used below

#: zarr warns that numcodecs codecs (zlib, shuffle) are outside the v3 spec: expected.
pytestmark = pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")


def _page(http: httpx.Client, url: str, **params: str) -> str:
    r = http.get(f"{url}/", params=params)
    assert r.status_code == 200, r.text
    return r.text


def _snippet(page: str) -> str:
    found = re.search(r"<pre id=snippet>(.*?)</pre>", page, re.DOTALL)
    assert found, page
    return html.unescape(found.group(1))


def _run(snippet: str) -> dict[str, Any]:
    """The snippet executed as a user pasting it would: its names afterwards."""
    names: dict[str, Any] = {}
    exec(compile(snippet, "<landing page snippet>", "exec"), names)  # noqa: S102
    return names


def _truth(path: Path, group: str | None = None) -> xr.Dataset:
    return xr.open_dataset(path, engine="h5netcdf", group=group, phony_dims="sort")


def _close(got: Any, want: Any) -> None:
    # the zarr engine decodes packed values in float64 (JSON attributes), h5netcdf in the
    # scale factor's float32: equal within float32's resolution of a packed step
    np.testing.assert_allclose(np.asarray(got, "f8"), np.asarray(want, "f8"), rtol=1e-6,
                               atol=SCALE * 1e-2, equal_nan=True)  # fmt: skip


def test_snippet_opens_the_groups_of_the_granule(http: httpx.Client, landing_gateway) -> None:
    url, path, _ = landing_gateway
    snippet = _snippet(_page(http, url, granule=LONG_NAME, variable="Grid/precipitation"))
    assert 'xr.open_datatree("' in snippet and 'group="Grid"' in snippet, snippet
    assert '# groups with variables: "" (root), "Grid"' in snippet
    got = _run(snippet)
    with _truth(path) as top, _truth(path, "Grid") as grid:
        assert set(got["ds"].data_vars) == set(grid.data_vars) == {"precipitation"}
        _close(got["ds"]["precipitation"], grid["precipitation"])
        _close(got["ds"]["lat"], grid["lat"])
        tree = got["tree"]
        assert set(tree.children) == {"Grid"}
        _close(tree["HT"], top["HT"])
        _close(tree["Grid/precipitation"], grid["precipitation"])
    with h5py.File(path) as f:  # the Zarr v3 view: the raw (packed) values
        np.testing.assert_array_equal(got["root"]["HT"][:], f["HT"][:])
        np.testing.assert_array_equal(got["root"]["Grid/precipitation"][:],
                                      f["Grid/precipitation"][:])  # fmt: skip


def test_snippet_of_a_granule_with_groups_only(http: httpx.Client, served,
                                               http_corpus: Corpus) -> None:  # fmt: skip
    """ATL03 holds nothing at its root: the snippet names a group that holds variables, and the
    Dataset it opens is that group's (``xr.open_zarr(url)`` alone was an empty Dataset)."""
    url, _ = served
    snippet = _snippet(_page(http, url, granule=ATL03))
    group = re.search(r'xr\.open_zarr\("[^"]+", group="([^"]+)"\)', snippet)
    assert group and 'xr.open_datatree("' in snippet, snippet
    ds = _run(snippet.partition("\n\nimport zarr")[0].replace("tree = ", "_ = "))["ds"]
    with _truth(http_corpus.local[ATL03], group.group(1)) as truth:
        assert set(ds.data_vars) == set(truth.data_vars) and ds.data_vars
        for name in truth.data_vars:
            _close(ds[name], truth[name])


def _png_range(png: bytes) -> tuple[float, float, str]:
    """The value range and units a quick look shows (its legend text, kept in the PNG)."""
    with Image.open(io.BytesIO(png)) as im:
        text = im.text["Description"]  # type: ignore[attr-defined]
    lo, _, rest = text.partition(" .. ")
    hi, _, units = rest.partition(" ")
    return float(lo), float(hi), units


def test_quick_look_plots_decoded_values(http: httpx.Client, landing_gateway) -> None:
    url, path, _ = landing_gateway
    r = http.get(f"{url}/quicklook.png", params={"granule": LONG_NAME, "variable": "HT"})
    assert r.status_code == 200, r.text
    lo, hi, units = _png_range(r.content)
    with _truth(path) as truth, h5py.File(path) as f:
        raw = f["HT"][:]
        # xarray masks the fill value and unpacks; the valid range (in packed units) it leaves
        # to the user: the plot applies it too
        want = truth["HT"].values[(raw >= VALID[0]) & (raw <= VALID[1])]
    assert units == "m"
    assert np.isclose(lo, np.nanmin(want), atol=1e-3) and np.isclose(hi, np.nanmax(want))
    assert lo >= 0 and hi <= 15430.01  # not the packed -30000..30000

    r = http.get(f"{url}/quicklook.png", params={"granule": LONG_NAME,
                                                 "variable": "Grid/precipitation"})  # fmt: skip
    lo, hi, units = _png_range(r.content)
    with _truth(path, "Grid") as truth:
        want = truth["precipitation"].values
    assert units == "mm/hr"
    assert np.isclose(lo, np.nanmin(want)) and np.isclose(hi, np.nanmax(want))
    assert lo >= 0  # the float fill value (-9999.9) is masked


def test_tables_name_dimensions_as_h5netcdf_does(http: httpx.Client, landing_gateway) -> None:
    url, path, _ = landing_gateway
    page = _page(http, url, granule=LONG_NAME)
    shown = dict(re.findall(r'variable=[^"]*#quicklook">([^<]+)</a></td><td class=dims>'
                            r"\(([^)]*)\)</td>", page))  # fmt: skip
    with _truth(path) as top, _truth(path, "Grid") as grid:
        want = {n: ", ".join(v.dims) for ds in (top, grid) for n, v in ds.variables.items()}
    assert shown == want


def test_dimension_only_datasets_are_dimensions_not_skipped_variables(
    http: httpx.Client, landing_gateway
) -> None:
    url, path, _ = landing_gateway
    page = _page(http, url, granule=LONG_NAME)
    with _truth(path) as top, _truth(path, "Grid") as grid:
        # the lengths netCDF readers give the dimensions without a coordinate variable
        want = {f"{prefix}{d}": str(n) for prefix, ds in (("", top), ("Grid/", grid))
                for d, n in ds.sizes.items() if d not in ds.variables}  # fmt: skip
    assert want == {"y": "60", "x": "80", "Grid/time": "1", "Grid/lon": "30"}
    listed = re.search(r"<ul id=dimensions>(.*?)</ul>", page, re.DOTALL)
    assert listed, page
    items = dict(re.findall(r"<li><code>([^<]+)</code>: length (\d+)</li>", listed.group(1)))
    assert items == want
    assert "Skipped variables" not in page  # nothing was left out
    info = http.get(f"{url}/api/granules/{LONG_NAME}").json()
    assert {d["path"]: d["length"] for d in info["dimensions"]} == {
        "y": 60, "x": 80, "Grid/time": 1, "Grid/lon": 30}


def test_valid_range_in_packed_or_physical_units() -> None:
    """CF: integer bounds on packed integers are packed values (unsigned under ``_Unsigned``);
    float bounds are physical values."""
    from h5sidecar.gateway._quicklook import _invalid

    raw = np.array([0, 100, 200, -1], "i2")
    decoded = raw * 0.5
    assert _invalid(raw, decoded, {"scale_factor": 0.5}) is None
    assert _invalid(raw, decoded, {"valid_range": [0, 150]}).tolist() == [0, 0, 1, 1]
    assert _invalid(raw, decoded, {"valid_min": 10}).tolist() == [1, 0, 0, 1]
    unsigned = {"valid_min": 10, "valid_max": 150, "_Unsigned": "true"}
    assert _invalid(raw, decoded, unsigned).tolist() == [1, 0, 1, 1]  # -1 is 65535
    assert _invalid(raw, decoded, {"valid_range": [0.0, 60.0]}).tolist() == [0, 0, 1, 1]
