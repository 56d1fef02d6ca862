"""Fixtures of the read-path tests (sample granules and their sidecars, see ``_granules``)."""

from tests.gateway._granules import (  # noqa: F401  (re-exported as fixtures)
    atl03_h5,
    cf_nc,
    small_h5,
    small_refs,
    small_sidecars,
)
