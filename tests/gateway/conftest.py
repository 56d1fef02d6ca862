"""Fixtures of the read-path tests (sample granules and their sidecars, see ``_granules``)."""

import pytest

from h5sidecar.read._cache import CHUNKS, SIDECARS
from tests.gateway._granules import (  # noqa: F401  (re-exported as fixtures)
    atl03_h5,
    atl03_refs,
    cf_nc,
    small_h5,
    small_refs,
    small_sidecars,
)


@pytest.fixture(autouse=True)
def _fresh_read_caches() -> None:
    """Each test starts with empty process-wide caches, so request counts are its own."""
    CHUNKS.clear()
    SIDECARS.clear()
