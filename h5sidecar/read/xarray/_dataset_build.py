"""A data store's variables as a Dataset: what xarray's ``StoreBackendEntrypoint.open_dataset``
does, at a fraction of its cost for the many small groups of a granule.

xarray builds each group's Dataset through its generic constructor, which re-validates and
copies every variable (a merge of data variables and coordinates), and runs every variable
through ``decode_cf_variable`` even when no decoding is asked for.  Opening the 140 groups of
an ATL03-like granule spent about a third of its time there.  :func:`store_dataset` gives the
same Dataset (same variables in the same order, attributes, encodings, coordinates, no
indexes) by:

* decoding with xarray's own ``decode_cf_variables`` whenever some decoding is asked for; when
  none is (``decode_cf=False``), a variable that xarray's decoding would only re-wrap (numbers,
  fixed-width strings and compounds in native byte order, lazily indexed, no ``dtype``
  attribute) gets what ``decode_cf_variable`` gives it -- ``encoding["dtype"]`` -- and any other
  variable still goes through ``decode_cf_variable``;
* assembling the Dataset directly from those fresh variables (data variables, then
  coordinates, as xarray orders them; coordinates as xarray's merge names them).

The tests compare its Datasets with ``StoreBackendEntrypoint``'s on the corpus and on an
ATL03-like granule, with and without decoding.  That builder stays the one fallback (an xarray
without the private constructor, see :data:`DIRECT`): this one is only its faster twin.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from xarray import Dataset, Variable, conventions

from h5sidecar._compat.xarray import (
    CONSTRUCT_DIRECT,
    calculate_dimensions,
    construct_dataset,
    is_explicitly_indexed,
    variable_data,
)

__all__ = ["DIRECT", "store_dataset"]

#: False when this xarray cannot build a Dataset directly (``_compat.xarray.CONSTRUCT_DIRECT``):
#: every Dataset is then built by xarray's ``StoreBackendEntrypoint``, as before this module existed
DIRECT = CONSTRUCT_DIRECT

#: dtype kinds ``decode_cf_variable`` leaves alone when nothing is decoded (objects, NumPy
#: strings, dates and durations have coders of their own)
_PLAIN_KINDS = frozenset("biufcSUV")


def _undecoded(name: Hashable, var: Variable) -> Variable:
    """``decode_cf_variable(name, var)`` with every decoding off."""
    data = variable_data(var)
    if (
        var.dtype.kind in _PLAIN_KINDS
        and var.dtype.isnative
        and "dtype" not in var.attrs  # BooleanCoder's marker
        and is_explicitly_indexed(data)
    ):
        encoding = dict(var.encoding)
        encoding.setdefault("dtype", var.dtype)
        return Variable(var.dims, data, dict(var.attrs), encoding, fastpath=True)
    return conventions.decode_cf_variable(
        name, var, concat_characters=False, mask_and_scale=False, decode_times=False,
        stack_char_dim=False, use_cftime=None, decode_timedelta=False,
    )


def _no_decoding(decoders: Mapping[str, Any]) -> bool:
    """True when the options ask for no CF decoding at all (``decode_cf=False``); mappings
    (per-variable options) and coder objects count as decoding."""
    return (
        all(decoders[k] is False for k in
            ("mask_and_scale", "decode_times", "concat_characters", "decode_coords"))
        and decoders["decode_timedelta"] in (None, False)
        and decoders["use_cftime"] in (None, False)
    )


def store_dataset(
    store: Any,
    *,
    mask_and_scale: Any = True,
    decode_times: Any = True,
    concat_characters: Any = True,
    decode_coords: Any = True,
    drop_variables: str | Iterable[str] | None = None,
    use_cftime: Any = None,
    decode_timedelta: Any = None,
) -> Dataset:
    """``StoreBackendEntrypoint().open_dataset(store, ...)``: the same Dataset, cheaper (see the
    module docstring)."""
    decoders = {
        "mask_and_scale": mask_and_scale, "decode_times": decode_times,
        "concat_characters": concat_characters, "decode_coords": decode_coords,
        "use_cftime": use_cftime, "decode_timedelta": decode_timedelta,
    }
    if not DIRECT:
        from xarray.backends import StoreBackendEntrypoint

        return StoreBackendEntrypoint().open_dataset(  # type: ignore[no-any-return]
            store, drop_variables=drop_variables, **decoders)
    variables, attrs = store.load()
    encoding = store.get_encoding()
    decoded: Mapping[Hashable, Variable]
    if _no_decoding(decoders):
        drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables or ())
        decoded = {k: _undecoded(k, v) for k, v in variables.items() if k not in drop}
        coord_names: set[Hashable] = set()
    else:
        decoded, attrs, coord_names = conventions.decode_cf_variables(
            variables, attrs, drop_variables=drop_variables, **decoders
        )
    # as StoreBackendEntrypoint: data variables, then coordinates (dimension coordinates
    # promoted), no index
    data_vars, coord_vars = {}, {}
    for name, var in decoded.items():
        if name in coord_names or var.dims == (name,):
            coord_vars[name] = var
        else:
            data_vars[name] = var
    ordered = {**data_vars, **coord_vars}
    dims = calculate_dimensions(ordered)
    return construct_dataset(
        variables=ordered,
        # as xarray's merge: a variable named like a dimension is a coordinate, whatever its
        # own dimensions (a netCDF character array ``z(z, string3)``)
        coord_names=set(coord_vars) | {d for d in dims if d in ordered},
        dims=dims,
        attrs=dict(attrs) if attrs else None,
        indexes={},
        encoding=dict(encoding),
        close=store.close,
    )
