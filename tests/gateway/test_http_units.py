"""Unit and property tests of the gateway's pure parts: Range parsing, request-path checks,
virtual shard layout (against an independent assembly and zarr's own shard-index decoding),
the admission gate, DEST listing and granule-name matching, the metrics exposition.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5sidecar.gateway._dest import DestIndex
from h5sidecar.gateway._http_rules import (
    Admission,
    BadRequestError,
    KeyTooLongError,
    RangeNotSatisfiableError,
    SaturatedError,
    check_request_path,
    parse_range,
)
from h5sidecar.gateway._metrics import GatewayMetrics
from h5sidecar.gateway._shard import shard_layout, sharded_array_doc
from h5sidecar.references import INLINE, MISSING, ArrayMeta, ArrayRefs, ChunkManifest

# -- Range ----------------------------------------------------------------------------------------


@given(size=st.integers(1, 10_000), data=st.data())
def test_parse_range_matches_python_slicing(size: int, data: st.DataObject) -> None:
    body = bytes(range(256)) * (size // 256 + 1)
    body = body[:size]
    kind = data.draw(st.sampled_from(["a-b", "a-", "-n"]))
    if kind == "a-b":
        a = data.draw(st.integers(0, size - 1))
        b = data.draw(st.integers(a, size + 100))
        header, want = f"bytes={a}-{b}", body[a : b + 1]
    elif kind == "a-":
        a = data.draw(st.integers(0, size - 1))
        header, want = f"bytes={a}-", body[a:]
    else:
        n = data.draw(st.integers(1, size + 100))
        header, want = f"bytes=-{n}", body[-n:]
    span = parse_range(header, size)
    assert span is not None
    assert body[span[0] : span[1]] == want


def test_parse_range_refusals_and_ignored_forms() -> None:
    assert parse_range(None, 10) is None
    for ignored in ("items=0-1", "bytes=x-1", "bytes=5-2", "bytes", "bytes=-", "bytes=1"):
        assert parse_range(ignored, 10) is None, ignored
    for refused in ("bytes=10-", "bytes=10-20", "bytes=0-1,3-4", "bytes=-0"):
        with pytest.raises(RangeNotSatisfiableError) as err:
            parse_range(refused, 10)
        assert err.value.size == 10
    with pytest.raises(RangeNotSatisfiableError):
        parse_range("bytes=-3", 0)


def test_parse_range_of_huge_numbers() -> None:
    # 5,000 digits are past int()'s limit of 4,300: they must not surface as a 500
    huge = "9" * 5000
    with pytest.raises(RangeNotSatisfiableError):
        parse_range(f"bytes={huge}-", 10)
    with pytest.raises(RangeNotSatisfiableError):
        parse_range(f"bytes={huge}-{huge}", 10)
    assert parse_range(f"bytes=2-{huge}", 10) == (2, 10)
    assert parse_range(f"bytes=-{huge}", 10) == (0, 10)
    assert parse_range(f"bytes={'0' * 5000}3-4", 10) == (3, 5)  # leading zeros are a number


@pytest.mark.parametrize("header", ["bytes=\u00b2-", "bytes=0-\u00b3", "bytes=-\u0661",
                                    "bytes=1_0-20", "bytes=+1-2", "bytes= 1 - 2 x"])
def test_parse_range_ignores_what_is_not_ascii_digits(header: str) -> None:
    # str.isdigit() accepts superscripts, which int() refuses; RFC 9110 digits are ASCII
    assert parse_range(header, 10) is None


@settings(max_examples=300, deadline=None)
@given(header=st.one_of(
    st.text(max_size=40),
    st.builds("bytes={}-{}".format, st.text("0123456789 \u00b2", max_size=30),
              st.text("0123456789 ,-", max_size=30)),
    st.builds("bytes={}".format, st.text(max_size=40)),
), size=st.integers(0, 2**40))  # fmt: skip
def test_parse_range_fuzzed(header: str, size: int) -> None:
    try:
        span = parse_range(header, size)
    except RangeNotSatisfiableError as exc:
        assert exc.size == size
        return
    if span is not None:
        start, stop = span
        assert 0 <= start < stop <= size


# -- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    "/zarr/../x", "/zarr/./x", "/zarr/a/%2e%2e/x", "/zarr/a%2Fb", "/zarr/%252e", "/zarr/a%5cb",
    "/zarr/a%00", "//zarr/x", "/zarr/a\\b",
])  # fmt: skip
def test_unsafe_paths_are_refused(raw: str) -> None:
    from urllib.parse import unquote

    with pytest.raises(BadRequestError):
        check_request_path(raw, unquote(raw), max_length=100)


def test_inner_empty_segments_pass_the_check() -> None:
    """``G//key``: what a store URL with a trailing '/' makes clients send (issue 9); the app
    merges the slashes before routing.  A leading '//' stays refused."""
    check_request_path("/zarr/g.h5//.zmetadata", "/zarr/g.h5//.zmetadata", max_length=100)
    with pytest.raises(BadRequestError):
        check_request_path("//zarr/g.h5/.zmetadata", "//zarr/g.h5/.zmetadata", max_length=100)


def test_safe_paths_and_length_limit() -> None:
    for ok in ("/", "/zarr/g.h5/gt1l/heights/h_ph/0.1", "/zarr/g.h5/", "/zarr/a%20b/.zarray"):
        check_request_path(ok, ok.replace("%20", " "), max_length=100)
    with pytest.raises(KeyTooLongError):
        check_request_path("/" + "x" * 101, "/" + "x" * 101, max_length=100)


# -- shards -----------------------------------------------------------------------------------------


@st.composite
def manifests(draw: st.DrawFn) -> tuple[ArrayRefs, dict[tuple[int, ...], bytes]]:
    """A random 1-d or 2-d array with stored, inline and missing chunks, and the chunk bytes."""
    ndim = draw(st.integers(1, 2))
    grid = tuple(draw(st.integers(1, 7)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    shape = tuple(g * c - draw(st.integers(0, c - 1)) for g, c in zip(grid, chunks, strict=True))
    codes = np.full(grid, MISSING, dtype=np.int32)
    offsets = np.zeros(grid, dtype=np.uint64)
    lengths = np.zeros(grid, dtype=np.uint64)
    inline: dict[int, bytes] = {}
    payload: dict[tuple[int, ...], bytes] = {}
    pos = 0
    for flat, idx in enumerate(np.ndindex(*grid)):
        kind = draw(st.sampled_from(["stored", "stored", "inline", "missing"]))
        if kind == "missing":
            continue
        data = draw(st.binary(min_size=1, max_size=12))
        payload[idx] = data
        if kind == "inline":
            codes[idx], inline[flat] = INLINE, data
        else:
            codes[idx], offsets[idx], lengths[idx] = 0, pos, len(data)
            pos += len(data) + draw(st.integers(0, 3))
    man = ChunkManifest.from_arrays(urls=["s3://b/k.h5"], codes=codes, offsets=offsets,
                                    lengths=lengths, inline=inline)  # fmt: skip
    meta = ArrayMeta(shape=shape, chunks=chunks, dtype="<f4")
    return ArrayRefs("v", meta, man), payload


@settings(max_examples=200, deadline=None)
@given(case=manifests(), k=st.integers(1, 9), data=st.data())
def test_shard_layout_assembles_the_chunks(case, k: int, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    arr, payload = case
    grid = arr.manifest.grid_shape
    kk = min(k, grid[0])
    shard_grid = (-(-grid[0] // kk), *grid[1:])
    for sidx in np.ndindex(*shard_grid):
        layout = shard_layout(arr, sidx, k)
        rows = [(sidx[0] * kk + t, *sidx[1:]) for t in range(kk)]
        present = [payload.get(r) if r[0] < grid[0] else None for r in rows]
        if not any(present):
            assert layout is None
            continue
        assert layout is not None
        # independent assembly: stored chunks in order, then the index and its crc32c
        table = np.full((kk, 2), 2**64 - 1, dtype="<u8")
        blob, pos = b"", 0
        for t, chunk in enumerate(present):
            if chunk:
                table[t] = (pos, len(chunk))
                blob, pos = blob + chunk, pos + len(chunk)
        index = table.tobytes()
        want = blob + index + int(google_crc32c.value(index)).to_bytes(4, "little")
        assert layout.size == len(want)

        def fetch(ref: tuple[str, int, int]) -> bytes:
            # the source object is the concatenation of stored chunks (with gaps)
            for idx, chunk in payload.items():
                m = arr.manifest.get(idx)
                if isinstance(m, tuple) and m[1] <= ref[1] < m[1] + m[2]:
                    return chunk[ref[1] - m[1] : ref[1] - m[1] + ref[2]]
            raise AssertionError(ref)

        start = data.draw(st.integers(0, len(want) - 1))
        stop = data.draw(st.integers(start, len(want)))
        got = b"".join(p.data if p.ref is None else fetch(p.ref)
                       for p in layout.pieces(start, stop))  # fmt: skip
        assert got == want[start:stop]


def test_shard_index_decodes_with_zarr() -> None:
    """zarr's own sharding codec reads our index bytes (offsets, lengths, empty markers)."""
    from zarr.codecs.sharding import ShardingCodec
    from zarr.core.buffer import default_buffer_prototype

    codes = np.array([0, MISSING, 0], dtype=np.int32)
    man = ChunkManifest.from_arrays(urls=["/x.h5"], codes=codes,
                                    offsets=np.array([100, 0, 300], dtype=np.uint64),
                                    lengths=np.array([7, 0, 5], dtype=np.uint64))  # fmt: skip
    arr = ArrayRefs("v", ArrayMeta(shape=(9,), chunks=(3,), dtype="<f4"), man)
    layout = shard_layout(arr, (0,), 4)  # K capped at the 3 chunk rows
    assert layout is not None
    codec = ShardingCodec(chunk_shape=(3,))
    buf = default_buffer_prototype().buffer.from_bytes(layout.index)
    index = asyncio.run(codec._decode_shard_index(buf, (3,)))
    assert index.get_chunk_slice((0,)) == (0, 7)
    assert index.get_chunk_slice((1,)) is None
    assert index.get_chunk_slice((2,)) == (7, 12)


def test_sharded_metadata() -> None:
    doc: dict[str, Any] = {"shape": [25, 4], "chunk_grid": {"name": "regular",
           "configuration": {"chunk_shape": [10, 2]}}, "codecs": [{"name": "bytes"}]}  # fmt: skip
    out = sharded_array_doc(doc, 16)
    assert out["chunk_grid"]["configuration"]["chunk_shape"] == [30, 2]  # K capped at 3 rows
    sharding = out["codecs"][0]
    assert sharding["name"] == "sharding_indexed"
    assert sharding["configuration"]["chunk_shape"] == [10, 2]
    assert sharding["configuration"]["codecs"] == [{"name": "bytes"}]
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [10, 2]  # input untouched
    scalar: dict[str, Any] = {"shape": [], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": []}},
              "codecs": [{"name": "bytes"}]}  # fmt: skip
    assert sharded_array_doc(scalar, 4) == scalar


# -- admission ----------------------------------------------------------------------------------------


def test_admission_bounds_and_rejects() -> None:
    async def scenario() -> None:
        gate = Admission(2, 1)
        release = asyncio.Event()
        peak = 0

        async def hold() -> None:
            nonlocal peak
            async with gate.slot():
                peak = max(peak, gate.active)
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(3)]  # 2 run, 1 waits
        while gate.waiting < 1:
            await asyncio.sleep(0)
        with pytest.raises(SaturatedError) as err:
            async with gate.slot():
                pass
        assert err.value.retry_after >= 1
        release.set()
        await asyncio.gather(*holders)
        assert peak == 2 and gate.active == 0 and gate.waiting == 0

    asyncio.run(scenario())
    with pytest.raises(ValueError):
        Admission(0, 1)
    with pytest.raises(ValueError, match="queue_timeout"):
        Admission(1, 1, wait_timeout=0)


def test_admission_waits_until_the_deadline_it_is_given() -> None:
    async def scenario() -> None:
        gate = Admission(1, 4, wait_timeout=60.0)
        release = asyncio.Event()

        async def hold() -> None:
            async with gate.slot():
                await release.wait()

        holder = asyncio.create_task(hold())
        while gate.active < 1:
            await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(SaturatedError) as err:
            async with gate.slot(t0 + 0.05):  # the caller's deadline, not wait_timeout
                pass
        assert 0.05 <= loop.time() - t0 < 5 and err.value.retry_after == 2
        waiter = asyncio.create_task(gate.slot(t0 + 60).__aenter__())
        await asyncio.sleep(0.01)
        assert gate.waiting == 1  # queued, within max_pending
        release.set()
        await waiter
        assert gate.active == 1 and gate.waiting == 0
        await holder

    asyncio.run(scenario())


# -- DEST -------------------------------------------------------------------------------------


def test_dest_listing_and_granule_names(tmp_path: Path) -> None:
    (tmp_path / "2019" / "03").mkdir(parents=True)
    (tmp_path / "a.h5.json").write_text("{}")
    (tmp_path / "2019" / "03" / "b.h5.json").write_text("{}")
    (tmp_path / "c.h5.parq").mkdir()
    (tmp_path / "c.h5.parq" / ".zmetadata").write_text("{}")
    (tmp_path / ".d.h5.json.tmp-1").write_text("{}")  # an interrupted write
    (tmp_path / "_report.json").write_text('{"granules": [{"status": "ok", "source": '
                                           '{"url": "s3://b/a.h5"}}, {"status": "failed", '
                                           '"url": "s3://b/x.h5"}]}')  # fmt: skip
    index = DestIndex(str(tmp_path))
    snap = index.snapshot()
    assert list(snap.sidecars) == ["2019/03/b.h5", "a.h5", "c.h5"]
    assert snap.sidecars["c.h5"] == str(tmp_path / "c.h5.parq")
    assert snap.sources == ("s3://b/a.h5",) and snap.report_found
    assert index.find(snap, "2019/03/b.h5/gt1l/h_ph/0") == ("2019/03/b.h5", "gt1l/h_ph/0", None)
    assert index.find(snap, "a.h5/.zmetadata") == ("a.h5", ".zmetadata", None)
    assert index.find(snap, "a.h5") == ("a.h5", "", None)
    assert index.find(snap, "2019/03/zz.h5/x") is None
    # pages of a listed DEST: code-point order, after the cursor, by prefix and substring
    assert index.page(snap, "", 2) == ["2019/03/b.h5", "a.h5"]
    assert index.page(snap, "a.h5", 2) == ["c.h5"]
    assert index.page(snap, "", 5, prefix="a") == ["a.h5"]
    assert index.page(snap, "", 5, contains="03") == ["2019/03/b.h5"]


# -- metrics -----------------------------------------------------------------------------------------


def test_metrics_exposition() -> None:
    m = GatewayMetrics()
    m.inc("h5sidecar_http_requests_total", route="zarr", method="GET", status="200")
    m.inc("h5sidecar_upstream_bytes_total", 1500)
    for seconds in (0.0005, 0.02, 3.0):
        m.observe("h5sidecar_http_request_duration_seconds", seconds, route="zarr")
    text = m.render()
    assert "# TYPE h5sidecar_http_request_duration_seconds histogram" in text
    assert 'h5sidecar_http_requests_total{method="GET",route="zarr",status="200"} 1' in text
    assert "h5sidecar_upstream_bytes_total 1500" in text
    assert 'h5sidecar_http_request_duration_seconds_bucket{route="zarr",le="0.001"} 1' in text
    assert 'h5sidecar_http_request_duration_seconds_bucket{route="zarr",le="0.025"} 2' in text
    assert 'h5sidecar_http_request_duration_seconds_bucket{route="zarr",le="+Inf"} 3' in text
    assert 'h5sidecar_http_request_duration_seconds_count{route="zarr"} 3' in text


# -- error statuses ------------------------------------------------------------------------------
#: The status of every error class, as the gateway answered before the table moved out of
#: ``errors.py`` (kind -> status; classes the table does not name answer 500).
_STATUSES = {
    "key_too_long": 414, "bad_request": 400, "range_not_satisfiable": 416,
    "response_too_large": 413, "saturated": 503, "not_indexed": 404, "source_not_found": 404,
    "forbidden_source": 403, "invalid_reference": 422, "invalid_dmrpp": 422,
    "incompatible_granules": 422,
    "invalid_request": 400, "unsupported": 501, "stale_reference": 409, "not_hdf5": 422,
    "corrupt": 422, "source_read": 502, "chunk_decode": 502, "no_credentials": 502, "error": 500,
    "limit_exceeded": 500, "timeout": 500, "invalid_stac": 500, "source_auth": 502,
    "record_busy": 503,
    # a server without an extra, or a script run wrongly, is the operator's fault: 500
    "missing_extra": 500, "unguarded_main": 500,
    # DEST's record is loading (the gateway warms up) or its loading failed: retry later
    "warming": 503, "record_unavailable": 503,
}


def test_status_table_is_ordered_and_unchanged() -> None:
    from h5sidecar import errors
    from h5sidecar.gateway._http_rules import STATUS, status_for

    table = list(STATUS)
    # first match wins: no class may come after one of its bases
    for i, cls in enumerate(table):
        assert not any(issubclass(cls, base) for base in table[:i]), cls.__name__
    classes = {c for c in vars(errors).values() if isinstance(c, type)
               and issubclass(c, errors.H5SidecarError)} | set(table)
    extra: dict[str, Any] = {"range_not_satisfiable": {"size": 1}, "invalid_stac": {"errors": []}}
    got = {cls.kind: status_for(cls("m", **extra.get(cls.kind, {}))) for cls in classes}
    assert got == _STATUSES
