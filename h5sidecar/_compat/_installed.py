"""Whether an installed distribution's version is in a checked range, read from its metadata
(without importing it: asking must not load the library)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import Version

__all__ = ["installed_in"]


def installed_in(distribution: str, checked: SpecifierSet) -> bool:
    """Whether ``distribution`` is installed in a version ``checked`` holds."""
    try:
        return Version(version(distribution)) in checked
    except PackageNotFoundError:
        return False
