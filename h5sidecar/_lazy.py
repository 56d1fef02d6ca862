"""Lazy public names for the package's ``__init__`` modules (PEP 562), so imports stay cheap."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return a module ``__getattr__`` and ``__dir__`` that import each name on first use.

    ``table`` maps a public name to the module defining it: absolute (``h5sidecar.read.zarr.filesystem``) or
    a submodule of ``package`` (``_build``).
    """

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = where if where.startswith("h5sidecar") else f"{package}.{where}"
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(set(table) | set(vars(sys.modules[package])))

    return __getattr__, __dir__
