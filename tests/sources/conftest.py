"""Fixtures of the source (fetch) tests: sample granules, their sidecars, fresh read caches."""

from tests._granules import *
from tests.earthdata import earthdata  # noqa: F401
