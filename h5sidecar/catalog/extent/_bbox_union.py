"""Union of bounding boxes on the globe (antimeridian-crossing boxes have west > east)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["union_bbox"]


def union_bbox(bboxes: Sequence[Sequence[float]]) -> list[float]:
    """The smallest ``[west, south, east, north]`` holding every box.

    Longitude intervals are merged on the circle and the box spans everything but the largest
    uncovered gap, so boxes on both sides of the antimeridian give a crossing box (west > east)
    rather than a box around the whole globe.

    Raises
    ------
    ValueError
        When ``bboxes`` is empty.
    """
    if not bboxes:
        raise ValueError("union of no bounding boxes")
    south = min(float(b[1]) for b in bboxes)
    north = max(float(b[3]) for b in bboxes)
    spans = []
    for b in bboxes:
        w, e = float(b[0]), float(b[2])
        if e < w:
            e += 360.0  # crossing box: continuous interval past +180
        if e - w >= 360.0:
            return [-180.0, south, 180.0, north]
        spans.append((w, e))
    spans.sort()
    merged: list[list[float]] = []
    for w, e in spans:
        if merged and w <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([w, e])
    # gaps between consecutive merged spans, the last one wrapping around the globe
    best_gap, west, east = -1.0, merged[0][0], merged[-1][1]
    for i, (_, e) in enumerate(merged):
        nxt = merged[i + 1][0] if i + 1 < len(merged) else merged[0][0] + 360.0
        gap = nxt - e
        if gap > best_gap:
            best_gap, east, west = gap, e, nxt
    if best_gap <= 0:
        return [-180.0, south, 180.0, north]
    return [_wrap(west), south, _wrap(east), north]


def _wrap(lon: float) -> float:
    """Longitude in [-180, 180] (180 stays 180: an east edge at the antimeridian)."""
    if -180.0 <= lon <= 180.0:
        return lon
    return (lon + 180.0) % 360.0 - 180.0
