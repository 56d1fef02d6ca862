"""Fixtures of the credentials tests: sample granules, their sidecars, the Earthdata-style archive."""

from tests._granules import *
from tests.earthdata import earthdata  # noqa: F401
