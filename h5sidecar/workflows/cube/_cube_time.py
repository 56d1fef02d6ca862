"""One time axis for a cube whose granules write time in different units (``normalize_time``).

Each granule's values of the concat coordinate are decoded with its own ``units`` and
``calendar`` by xarray's own CF decoder (what ``xr.open_dataset(engine="h5netcdf")`` returns for
that file), then encoded in the cube's units and dtype.  The cube holds that coordinate inline,
so nothing else changes.  An encoding is accepted only when decoding it gives back exactly the
same instants; otherwise the granule is refused by name (never rounded).  Only the concat
coordinate can be normalized: data variables keep their raw bytes, so their units must agree.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from h5sidecar.errors import IncompatibleGranulesError

__all__ = ["NORMALIZED_FIELDS", "check_bounds", "normalize_times", "time_attrs"]

#: Encoding fields of the concat coordinate that normalizing makes irrelevant: its values are
#: re-encoded into the cube's units and dtype and held inline (no codecs, one chunk).
NORMALIZED_FIELDS = ("units", "dtype", "storage_fill_value", "chunks", "filters", "compressor")

#: Attributes that would change the coordinate's raw values before the time decoding.
_PACKING = ("scale_factor", "add_offset")


def time_attrs(attrs: Mapping[str, Any]) -> tuple[str, str]:
    """``(units, calendar)`` of a time coordinate (CF's default calendar is ``standard``)."""
    units = attrs.get("units")
    if not isinstance(units, str) or " since " not in units:
        raise IncompatibleGranulesError(
            f"units {units!r} are not CF time units ('<unit> since <date>'); only a time "
            "coordinate can be normalized"
        )
    return units, str(attrs.get("calendar", "standard"))


def time_of(attrs: Mapping[str, Any]) -> dict[str, str | None]:
    """``units`` and ``calendar`` of a coordinate's attributes (for ``CubePart``)."""
    units, calendar = attrs.get("units"), attrs.get("calendar")
    return {"units": units if isinstance(units, str) else None,
            "calendar": calendar if isinstance(calendar, str) else None}


def time_labels(values: Sequence[Any], units: str | None, calendar: str | None) -> list[str]:
    """``values`` of a concat coordinate as ISO 8601 dates when ``units`` are CF time units
    (``"days since 2000-01-01"``), else as they are: what a person reads a cube's range by."""
    if not isinstance(units, str) or " since " not in units:
        return [str(v) for v in values]
    try:
        dates = _decode(np.asarray(values), units, calendar or "standard")
    except (ValueError, TypeError, OverflowError):  # units xarray cannot decode: raw numbers
        return [str(v) for v in values]
    if dates.dtype.kind == "M":
        return [str(np.datetime_as_string(d, unit="s")) for d in dates]
    return [d.isoformat() for d in dates]  # cftime dates of a non-standard calendar


def _decode(values: np.ndarray, units: str, calendar: str) -> np.ndarray:
    from h5sidecar._compat.xarray import decode_cf_datetime  # xarray loads on first use

    return decode_cf_datetime(values, units, calendar)


def _encode(dates: np.ndarray, units: str, calendar: str, dtype: np.dtype) -> np.ndarray | None:
    """``dates`` in ``units`` as ``dtype``, or None when that would not be exact."""
    from h5sidecar._compat.xarray import encode_cf_datetime

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # xarray warns and switches units when the requested ones cannot hold the values
        num, _, _ = encode_cf_datetime(dates, units, calendar, dtype=dtype)
    if caught:  # xarray gave other units (it respells equal ones: the decoding below decides)
        return None
    if dtype.kind in "iu" and num.dtype.kind == "f" and not np.array_equal(num, np.round(num)):
        return None
    with np.errstate(all="ignore"):
        out = num.astype(dtype)
    if not np.array_equal(out.astype(num.dtype), num):
        return None  # does not fit the dtype
    back = _decode(out, units, calendar)
    return out if np.array_equal(back, dates) else None


def normalize_times(
    values: Sequence[np.ndarray],
    attrs: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    coord: str,
    *,
    units: str,
    calendar: str,
    dtype: np.dtype,
) -> list[np.ndarray]:
    """Every granule's raw ``coord`` values re-expressed in ``units`` / ``dtype``, exactly.

    Parameters
    ----------
    values : sequence of ndarray
        Each granule's raw (undecoded) values.
    attrs : sequence of mapping
        Each granule's attributes of ``coord`` (its ``units`` and ``calendar``).
    names : sequence of str
        Granule names for errors.
    coord : str
        The coordinate's path (for errors).
    units, calendar, dtype
        The cube's time units, calendar and the coordinate's dtype.

    Raises
    ------
    IncompatibleGranulesError
        A granule in another calendar, with packed time values, or whose instants cannot be
        written in ``units`` as ``dtype`` without changing them (naming granule and value).
    """
    out = []
    for v, a, name in zip(values, attrs, names, strict=True):
        own_units, own_calendar = time_attrs(a)
        if own_calendar != calendar:
            raise IncompatibleGranulesError(
                f"{coord} in {name} uses calendar {own_calendar!r}, the cube {calendar!r}: "
                "instants of different calendars cannot share one time axis"
            )
        if any(k in a for k in _PACKING):
            raise IncompatibleGranulesError(
                f"{coord} in {name} is packed ({', '.join(k for k in _PACKING if k in a)}); "
                "normalize_time handles plain time values only"
            )
        if own_units == units and v.dtype == dtype:
            out.append(v)
            continue
        dates = _decode(v, own_units, own_calendar)
        enc = _encode(dates, units, calendar, np.dtype(dtype))
        if enc is None:
            raise IncompatibleGranulesError(
                f"{coord} in {name} ({v[0]!r} {own_units}, i.e. {dates[0]}) cannot be written "
                f"exactly in {units!r} as {np.dtype(dtype)}: normalizing would change the "
                "instants; pass other time units (time_units=..., --time-units) or leave the "
                "granule out"
            )
        out.append(enc)
    return out


def check_not_fill(values: Sequence[np.ndarray], attrs: Mapping[str, Any],
                   names: Sequence[str], coord: str) -> None:
    """Refuse a normalized time equal to the cube's ``_FillValue`` / ``missing_value``:
    xarray would mask it, where the granule's own file gives an instant."""
    for key in ("_FillValue", "missing_value"):
        fill = attrs.get(key)
        if fill is None or isinstance(fill, str):
            continue
        for v, name in zip(values, names, strict=True):
            if np.isin(v, np.asarray(fill).ravel()).any():
                raise IncompatibleGranulesError(
                    f"{coord} in {name} becomes {fill!r} in the cube's units, which is the "
                    f"cube's {key}: it would read as missing; pass other time_units")


def check_bounds(attrs: Mapping[str, Any], kept: Mapping[str, Mapping[str, Any]],
                 coord: str) -> None:
    """Refuse normalizing while the coordinate's ``bounds``/``climatology`` variable is kept
    without units of its own.

    Such a variable takes the coordinate's units (CF; xarray decodes it so), so its raw values
    from each granule would be decoded with the cube's units: wrong for the re-expressed ones.
    ``kept`` maps each kept array path to its attributes.
    """
    prefix = coord.rpartition("/")[0]
    for key in ("bounds", "climatology"):
        name = attrs.get(key)
        path = f"{prefix}/{name}" if prefix and name else name
        if isinstance(path, str) and path in kept and "units" not in kept[path]:
            raise IncompatibleGranulesError(
                f"{coord} names {path} as its {key}; its values are in each granule's own time "
                f"units and cannot be normalized: leave it out (variables=[...]) to normalize "
                f"{coord}"
            )
