"""One clamping rule for byte ranges: fsspec's ``start``/``end`` select what Python's slicing
selects, and zarr's ``ByteRequest`` types what their definitions say, for ranges inside, across
and beyond the value."""

from __future__ import annotations

import pytest
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

from h5sidecar.read.zarr._byte_windows import byte_window, clamped_window

DATA = bytes(range(10))
BOUNDS = (None, -15, -10, -3, -1, 0, 1, 4, 9, 10, 15)


@pytest.mark.parametrize("start", BOUNDS)
@pytest.mark.parametrize("end", BOUNDS)
def test_fsspec_windows_are_python_slices(start: int | None, end: int | None) -> None:
    lo, hi = clamped_window(len(DATA), start, end)
    assert 0 <= lo <= hi <= len(DATA)
    assert DATA[lo:hi] == DATA[start:end]


@pytest.mark.parametrize("n", [0, 1, 4, 10, 15])
@pytest.mark.parametrize("m", [0, 3, 9, 10, 15])
def test_zarr_byte_requests(n: int, m: int) -> None:
    def cut(request: object) -> bytes:
        lo, hi = byte_window(len(DATA), request)  # type: ignore[arg-type]
        return DATA[lo:hi]

    assert cut(None) == DATA
    assert cut(RangeByteRequest(n, m)) == DATA[n:m]
    assert cut(OffsetByteRequest(n)) == DATA[n:]
    assert cut(SuffixByteRequest(n)) == (DATA[-n:] if n else b"")
    with pytest.raises(TypeError, match="Unexpected byte_range"):
        cut((n, m))
