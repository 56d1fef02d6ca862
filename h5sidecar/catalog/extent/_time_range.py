"""Time coverage of a granule: CF time variables, GPS-based epochs (ATLAS), ACDD attributes.

Only the smallest and largest raw values are decoded, so a time variable of any length costs two
conversions.  Decoding is done here rather than by xarray because ATL03-like products count time
from a *GPS* epoch given in another variable (``ancillary_data/atlas_sdp_gps_epoch``), which CF
decoding ignores: read as CF, ``delta_time`` is 18 leap seconds off UTC.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "GPS_EPOCH",
    "decode_cf_range",
    "gps_to_utc",
    "parse_iso",
    "time_range_from_attrs",
    "utc_minus_gps",
]

#: Start of GPS time (no leap seconds are counted after it).
GPS_EPOCH = dt.datetime(1980, 1, 6, tzinfo=dt.UTC)

#: UTC instants after which GPS - UTC grew by one second (leap seconds since the GPS epoch).
_LEAP_SECONDS = tuple(
    dt.datetime(*d, tzinfo=dt.UTC)
    for d in (
        (1981, 7, 1), (1982, 7, 1), (1983, 7, 1), (1985, 7, 1), (1988, 1, 1), (1990, 1, 1),
        (1991, 1, 1), (1992, 7, 1), (1993, 7, 1), (1994, 7, 1), (1996, 1, 1), (1997, 7, 1),
        (1999, 1, 1), (2006, 1, 1), (2009, 1, 1), (2012, 7, 1), (2015, 7, 1), (2017, 1, 1),
    )
)

_UNIT_SECONDS = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "ms": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "us": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
}
#: Calendars in which "days since" means elapsed days of the proleptic Gregorian calendar
#: (for dates after 1582, which is all satellite data).
_GREGORIAN = {"standard", "gregorian", "proleptic_gregorian", ""}
_UNITS_RE = re.compile(r"^\s*(\w+)\s+since\s+(.+?)\s*$", re.IGNORECASE)


def utc_minus_gps(gps_time: dt.datetime) -> float:
    """Seconds to add to a GPS-scale instant (counted naively from the GPS epoch) to get UTC.

    ``gps_time`` is ``GPS_EPOCH + gps_seconds`` computed without leap seconds, so it runs ahead
    of UTC by the leap seconds inserted so far; the lookup compares with the UTC table shifted by
    that count, which is exact except within a second of a leap.
    """
    n = 0
    for i, leap in enumerate(_LEAP_SECONDS):
        if gps_time >= leap + dt.timedelta(seconds=i + 1):
            n = i + 1
    return -float(n)


def gps_to_utc(gps_seconds: float) -> dt.datetime:
    """UTC datetime of a GPS time in seconds since the GPS epoch (1980-01-06T00:00:00Z)."""
    naive = GPS_EPOCH + dt.timedelta(seconds=float(gps_seconds))
    return naive + dt.timedelta(seconds=utc_minus_gps(naive))


def parse_cf_units(units: str) -> tuple[float, dt.datetime] | None:
    """``"seconds since 2018-01-01"`` -> (1.0, 2018-01-01T00:00Z); None when not a time unit."""
    m = _UNITS_RE.match(units or "")
    if not m or m.group(1).lower() not in _UNIT_SECONDS:
        return None
    epoch = parse_iso(m.group(2))
    if epoch is None:
        return None
    return _UNIT_SECONDS[m.group(1).lower()], epoch


def decode_cf_range(
    values: np.ndarray, attrs: Mapping[str, Any], *, gps_epoch_seconds: float | None = None
) -> tuple[dt.datetime, dt.datetime] | None:
    """UTC (start, end) of a time variable's finite values, or None if it cannot be decoded.

    Parameters
    ----------
    values : numpy.ndarray
        Raw (undecoded) values; fill values already masked to NaN.
    attrs : mapping
        The variable's attributes (``units``, ``calendar``).
    gps_epoch_seconds : float, optional
        When the product counts time from a GPS epoch given elsewhere (ATLAS
        ``atlas_sdp_gps_epoch``), the GPS seconds of that epoch: values are then offsets from
        it in the variable's unit, converted to UTC with leap seconds.
    """
    parsed = parse_cf_units(str(attrs.get("units", "")))
    calendar = str(attrs.get("calendar", "standard")).lower()
    if parsed is None or calendar not in _GREGORIAN:
        return None
    finite = np.asarray(values, dtype="f8")
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return None
    scale, epoch = parsed
    lo, hi = float(finite.min()) * scale, float(finite.max()) * scale
    if gps_epoch_seconds is not None:
        return gps_to_utc(gps_epoch_seconds + lo), gps_to_utc(gps_epoch_seconds + hi)
    return epoch + dt.timedelta(seconds=lo), epoch + dt.timedelta(seconds=hi)


def parse_iso(text: Any) -> dt.datetime | None:
    """A timezone-aware UTC datetime from ISO-8601-ish text (``Z``, offsets, dates, spaces)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str) or not text.strip():
        return None
    s = text.strip().replace(" UTC", "").replace("Z", "+00:00").replace("z", "+00:00")
    if re.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}", s):
        y, mo, d = (int(p) for p in s.split("-"))
        return dt.datetime(y, mo, d, tzinfo=dt.UTC)
    s = re.sub(r"(\.\d{6})\d+", r"\1", s)  # Python keeps microseconds only
    if " " in s and "T" not in s:
        s = s.replace(" ", "T", 1)
    try:
        value = dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)  # CF and ACDD times without a zone are UTC
    return value.astimezone(dt.UTC)


def time_range_from_attrs(attrs: Mapping[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
    """(start, end) from ACDD ``time_coverage_start``/``time_coverage_end`` global attributes."""
    start = parse_iso(attrs.get("time_coverage_start"))
    end = parse_iso(attrs.get("time_coverage_end"))
    if start is None:
        return None
    return start, end if end is not None and end >= start else start
