"""The xarray engine and the fsspec protocol are registered from ``h5sidecar.read``."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import h5sidecar.read


@pytest.mark.parametrize(
    ("group", "target"),
    [
        ("xarray.backends", "h5sidecar.read.xarray_backend:H5SidecarBackend"),
        ("fsspec.specs", "h5sidecar.read.fs:H5SidecarFileSystem"),
    ],
)
def test_entry_points_name_the_new_modules(group: str, target: str) -> None:
    (ep,) = [e for e in entry_points(group=group) if e.name == "h5sidecar"]
    assert ep.value == target
    assert ep.load() is getattr(h5sidecar.read, target.rsplit(":", 1)[1])
