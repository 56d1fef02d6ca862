"""Fixtures of the gateway tests (sample granules and their sidecars, see ``tests._granules``)."""

from tests._granules import (  # noqa: F401  (re-exported as fixtures)
    atl03_h5,
    atl03_refs,
    cf_nc,
    fresh_read_caches,
    small_h5,
    small_refs,
    small_sidecars,
)

