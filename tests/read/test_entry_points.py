"""The xarray engine and the fsspec protocol are registered from ``h5sidecar.read``'s front, so
moving a module inside ``read/`` never breaks an installed engine."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

import h5sidecar.read


@pytest.mark.parametrize(
    ("group", "target"),
    [
        ("xarray.backends", "h5sidecar.read:H5SidecarBackend"),
        ("fsspec.specs", "h5sidecar.read:H5SidecarFileSystem"),
    ],
)
def test_entry_points_name_the_read_front(group: str, target: str) -> None:
    (ep,) = [e for e in entry_points(group=group) if e.name == "h5sidecar"]
    assert ep.value == target
    assert ep.load() is getattr(h5sidecar.read, target.rsplit(":", 1)[1])
