"""Fixtures of the indexer tests: small synthetic HDF5 files written with h5py into tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest

Builder = Callable[[h5py.File], Any]


@pytest.fixture
def make_h5(tmp_path: Path) -> Callable[..., Path]:
    """``make_h5(build, name="t.h5", **h5py_file_kwargs)``: write a file, return its path."""

    def make(build: Builder, name: str = "t.h5", **kwargs: Any) -> Path:
        path = tmp_path / name
        with h5py.File(path, "w", **kwargs) as f:
            build(f)
        return path

    return make
