"""The re-layout keeps the old public import paths for one release, with a DeprecationWarning."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

import h5sidecar.gateway
import h5sidecar.read

MOVED_NAMES = sorted(h5sidecar.gateway._MOVED)

_CHECK = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import importlib
    old = importlib.import_module({old!r})
    new = importlib.import_module({new!r})
print(json.dumps({{
    "same": all(getattr(old, n) is getattr(new, n) for n in new.__all__),
    "warnings": [(w.category.__name__, str(w.message)) for w in caught],
}}))
"""


NEW_MODULES = {"store": "zarr.store", "fs": "zarr.filesystem", "xarray_backend": "xarray.backend"}


@pytest.mark.parametrize("leaf", sorted(NEW_MODULES))
def test_old_module_paths_warn_and_give_the_same_objects(leaf: str) -> None:
    old, new = f"h5sidecar.gateway.{leaf}", f"h5sidecar.read.{NEW_MODULES[leaf]}"
    code = _CHECK.format(old=old, new=new)
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, check=True).stdout)
    assert out["same"]
    deprecations = [m for c, m in out["warnings"] if c == "DeprecationWarning"]
    assert any(old in m and new in m for m in deprecations), out["warnings"]


@pytest.mark.parametrize("name", MOVED_NAMES)
def test_old_names_warn_and_give_the_same_objects(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"h5sidecar.read.{name}"):
        old = getattr(h5sidecar.gateway, name)
    assert old is getattr(h5sidecar.read, name)


def test_gateway_package_no_longer_exports_the_read_library() -> None:
    assert h5sidecar.gateway.__all__ == []
    with pytest.raises(AttributeError):
        h5sidecar.gateway.NotAName  # noqa: B018


@pytest.mark.parametrize(
    ("group", "target"),
    [
        ("xarray.backends", "h5sidecar.read.xarray.backend:H5SidecarBackend"),
        ("fsspec.specs", "h5sidecar.read.zarr.filesystem:H5SidecarFileSystem"),
    ],
)
def test_entry_points_name_the_new_modules(group: str, target: str) -> None:
    (ep,) = [e for e in entry_points(group=group) if e.name == "h5sidecar"]
    assert ep.value == target
    assert ep.load() is getattr(h5sidecar.read, target.rsplit(":", 1)[1])
