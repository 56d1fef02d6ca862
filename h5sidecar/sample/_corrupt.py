"""Corrupt copies of a granule, for fault tests and soaks (what a flaky disk or upload does)."""

from __future__ import annotations

import random

__all__ = ["flip_bits"]


def flip_bits(data: bytes, seed: int, windows: int = 3, span: int = 1_500_000) -> bytes:
    """Every 2048th byte inverted in ``windows`` 64 KiB windows of the first ``span`` bytes
    (where HDF5 keeps most of a granule's metadata), the windows drawn from ``seed``."""
    out = bytearray(data)
    rng = random.Random(seed)
    for _ in range(windows):
        start = rng.randrange(0, min(span, len(out)) - 65536)
        for i in range(start, start + 65536, 2048):
            out[i] ^= 0xFF
    return bytes(out)
