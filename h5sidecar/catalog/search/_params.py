"""Parsing and checking of STAC API item-search parameters (GET query strings or POST bodies)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from h5sidecar.catalog.extent._time_range import parse_iso
from h5sidecar.errors import InvalidRequestError

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "SearchParams", "parse_search"]

DEFAULT_LIMIT = 10
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class SearchParams:
    """A checked item search."""

    bbox: tuple[float, float, float, float] | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    ids: frozenset[str] | None = None
    collections: frozenset[str] | None = None
    #: a shapely geometry (GeoJSON ``intersects``), planar in longitude/latitude
    intersects: Any = None
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    #: keyset cursor (``next:KEY`` token): items after this key
    after: int = 0

    def restricted_to(self, collection: str) -> SearchParams:
        """The same search within one collection."""
        return replace(self, collections=frozenset({collection}))


def _strings(name: str, value: Any) -> frozenset[str] | None:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        return frozenset(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise InvalidRequestError(f"{name} must be a comma-separated string or a list of strings")


def _bbox(value: Any) -> tuple[float, float, float, float] | None:
    if value is None or value == "":
        return None
    try:
        if isinstance(value, str):
            text = value.strip()
            nums = json.loads(text) if text.startswith("[") else [float(v) for v in text.split(",")]
        else:
            nums = list(value)
        nums = [float(v) for v in nums]
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(
            f"bbox {value!r} is not numbers: give west,south,east,north in degrees") from exc
    if len(nums) == 6:
        nums = [nums[0], nums[1], nums[3], nums[4]]  # 3-D box: drop the heights
    if len(nums) != 4:
        raise InvalidRequestError(
            f"bbox needs 4 (or 6) numbers west,south,east,north, got {len(nums)}")
    w, s, e, n = nums
    if not (-90 <= s <= n <= 90) or not (-180 <= w <= 180 and -180 <= e <= 180):
        raise InvalidRequestError(
            f"bbox {nums} is out of range: latitudes within -90..90 with south <= north, "
            "longitudes within -180..180 (west > east crosses the antimeridian)")
    return w, s, e, n


def _datetime(value: Any) -> tuple[dt.datetime | None, dt.datetime | None]:
    if value is None or value == "":
        return None, None
    if not isinstance(value, str):
        raise InvalidRequestError("datetime must be an RFC 3339 string or an interval 'a/b'")
    parts = value.split("/")
    if len(parts) > 2:
        raise InvalidRequestError(f"datetime {value!r}: at most one '/' (an interval)")
    bounds: list[dt.datetime | None] = []
    for p in parts:
        if p in ("", ".."):
            bounds.append(None)
            continue
        t = parse_iso(p)
        if t is None:
            raise InvalidRequestError(
                f"datetime {p!r} is not RFC 3339 (e.g. 2019-03-29T13:00:00Z, or '..' for open)")
        bounds.append(t)
    if len(bounds) == 1:
        if bounds[0] is None:
            raise InvalidRequestError("datetime '..' alone is not an instant or an interval")
        return bounds[0], bounds[0]
    start, end = bounds
    if start is not None and end is not None and start > end:
        raise InvalidRequestError(f"datetime interval {value!r} ends before it starts")
    return start, end


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"{name} must be an integer, got {value!r}") from exc
    if not lo <= n <= hi:
        raise InvalidRequestError(f"{name} must be within {lo}..{hi}, got {n}")
    return n


def _token(token: Any) -> tuple[int, int]:
    """``(offset, after)`` of a paging token: ``next:KEY`` (a keyset cursor, what this API
    issues) or ``offset:N`` (issued by earlier versions, still accepted)."""
    if token is None or token == "":
        return 0, 0
    text = str(token)
    if text.startswith("next:"):
        return 0, _int("token key", text.split(":", 1)[1], 0, 2**62)
    if not text.startswith("offset:"):
        raise InvalidRequestError(f"token {text!r} is not one this API issued (use 'next' links)")
    return _int("token offset", text.split(":", 1)[1], 0, 10**9), 0


def parse_search(params: Mapping[str, Any]) -> SearchParams:
    """Check and normalise search parameters.

    Raises
    ------
    InvalidRequestError
        Naming the parameter and the expected form; also for ``intersects`` and ``filter``,
        which this minimal API does not implement.
    """
    for unsupported in ("filter", "q", "query"):
        if params.get(unsupported) not in (None, ""):
            raise InvalidRequestError(
                f"{unsupported!r} is not supported by this API: search with bbox, intersects, "
                "datetime, ids and collections")
    start, end = _datetime(params.get("datetime"))
    offset, after = _token(params.get("token"))
    limit = params.get("limit")
    bbox, intersects = _bbox(params.get("bbox")), _intersects(params.get("intersects"))
    if bbox is not None and intersects is not None:
        raise InvalidRequestError("give bbox or intersects, not both (STAC API item search)")
    return SearchParams(
        intersects=intersects,
        bbox=bbox,
        start=start,
        end=end,
        ids=_strings("ids", params.get("ids")),
        collections=_strings("collections", params.get("collections")),
        limit=DEFAULT_LIMIT if limit in (None, "") else _int("limit", limit, 1, MAX_LIMIT),
        offset=offset,
        after=after,
    )


#: GeoJSON geometry types ``intersects`` accepts (RFC 7946).
GEOMETRY_TYPES = ("Point", "MultiPoint", "LineString", "MultiLineString", "Polygon",
                  "MultiPolygon", "GeometryCollection")
#: Vertices an ``intersects`` geometry may have: a bound on the work one request can ask for.
MAX_VERTICES = 10_000


def _intersects(value: Any) -> Any:
    """A GeoJSON geometry (a dict, or its JSON text in a GET query) as a shapely geometry."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InvalidRequestError(f"intersects is not GeoJSON text: {exc}") from exc
    if not isinstance(value, Mapping) or value.get("type") not in GEOMETRY_TYPES:
        raise InvalidRequestError(
            f"intersects must be a GeoJSON geometry object, type one of {list(GEOMETRY_TYPES)}")
    import shapely
    from shapely.geometry import shape

    try:
        geom = shape(value)
        n = shapely.get_num_coordinates(geom)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError,
            shapely.errors.ShapelyError) as exc:
        raise InvalidRequestError(f"intersects is not a valid {value['type']}: {exc}") from exc
    if n > MAX_VERTICES:
        raise InvalidRequestError(f"intersects has {n} vertices; at most {MAX_VERTICES}")
    if geom.is_empty:
        raise InvalidRequestError("intersects is an empty geometry")
    w, s, e, n_ = geom.bounds
    if not (-180 <= w <= e <= 180 and -90 <= s <= n_ <= 90):
        raise InvalidRequestError(
            f"intersects reaches outside longitudes -180..180 / latitudes -90..90 "
            f"(bounds {list(geom.bounds)}): split a geometry that crosses the antimeridian "
            "into a MultiPolygon at +/-180, as RFC 7946 asks")
    if not geom.is_valid:
        raise InvalidRequestError(
            f"intersects is not a valid geometry ({shapely.is_valid_reason(geom)}): fix the "
            "ring (closed, not self-intersecting)")
    shapely.prepare(geom)
    return geom
