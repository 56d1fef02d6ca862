"""The part of a value a byte-range request asks for: one clamping rule for every reader.

zarr asks with its ``ByteRequest`` types (``Store.get``), fsspec with ``start``/``end`` (negative
counts from the end, ``None`` is an open end); both are clamped to the value the same way, so
the zarr store and the fsspec filesystem serve the same bytes for the same range.
"""

from __future__ import annotations

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest

__all__ = ["byte_window", "clamped_window"]


def clamped_window(size: int, start: int | None, end: int | None) -> tuple[int, int]:
    """fsspec's ``start``/``end`` (None, negative = from the end) as a clamped window of a value
    of ``size`` bytes: ``(lo, hi)`` with ``0 <= lo <= hi <= size``."""
    lo = 0 if start is None else (size + start if start < 0 else start)
    hi = size if end is None else (size + end if end < 0 else end)
    lo = min(max(lo, 0), size)
    return lo, min(max(hi, lo), size)


def byte_window(length: int, byte_range: ByteRequest | None) -> tuple[int, int]:
    """``(start, stop)`` of zarr's ``byte_range`` within a value of ``length`` bytes (clamped;
    zarr's offsets never count from the end).

    Raises
    ------
    TypeError
        When ``byte_range`` is not one of zarr's ``ByteRequest`` types.
    """
    if byte_range is None:
        return clamped_window(length, None, None)
    if isinstance(byte_range, RangeByteRequest):
        return clamped_window(length, max(byte_range.start, 0), max(byte_range.end, 0))
    if isinstance(byte_range, OffsetByteRequest):
        return clamped_window(length, max(byte_range.offset, 0), None)
    if isinstance(byte_range, SuffixByteRequest):
        return clamped_window(length, max(length - byte_range.suffix, 0), None)
    raise TypeError(f"Unexpected byte_range, got {byte_range!r}.")
