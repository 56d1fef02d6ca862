"""What other Zarr readers cannot read from a sidecar, so users can tell them up front."""

from __future__ import annotations

from h5sidecar.references._model import GranuleRefs

__all__ = ["virtualizarr_unreadable"]


def virtualizarr_unreadable(refs: GranuleRefs) -> list[str]:
    """Paths of the arrays VirtualiZarr's kerchunk parsers (2.x) refuse.

    VirtualiZarr raises ``NotImplementedError`` for chunks held inside the reference file
    (compact datasets, materialized strings, never-written chunks stored as the fill value)
    and cannot give a Zarr v3 data type to object arrays (variable-length strings), which fails
    the whole group.  Pass the names to the parser's ``skip_variables``.

    Examples
    --------
    >>> skip = [p for p in virtualizarr_unreadable(refs) if "/" not in p]   # doctest: +SKIP
    >>> KerchunkJSONParser(skip_variables=skip)                               # doctest: +SKIP
    """
    return [
        path
        for path, arr in refs.arrays.items()
        if arr.manifest.n_inline or arr.meta.dtype in ("|O", "O")
    ]
