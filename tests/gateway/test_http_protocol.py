"""HTTP behaviour of the gateway: bytes on the wire, Range/HEAD/ETag, status codes, gzip,
CORS, health, metrics, limits and virtual shard layout.  Oracles: h5py's ``read_direct_chunk``
(the original compressed bytes of a chunk) and the sidecar's own metadata.
"""

from __future__ import annotations

import gzip
import json

import google_crc32c
import h5py
import httpx
import numpy as np
import pytest

from h5sidecar.references import read_refs
from tests.gateway._http import (
    ATL03,
    SMALL,
    Corpus,
    gateway,
    http,
    http_corpus,
    served,
    settled,
    wait_status,
)

__all__ = ["http", "http_corpus", "served"]

H_PH = f"{SMALL}/gt1l/heights/h_ph"
NO_GZIP = {"Accept-Encoding": "identity"}


def raw_chunk(path, name: str, index: tuple[int, ...]) -> bytes:  # type: ignore[no-untyped-def]
    """The chunk's stored (compressed) bytes, as HDF5 has them."""
    with h5py.File(path) as f:
        d = f[name]
        start = tuple(i * c for i, c in zip(index, d.chunks, strict=True))
        mask, data = d.id.read_direct_chunk(start)
        assert mask == 0
        return bytes(data)


def test_chunk_bytes_are_the_original_compressed_bytes(
    http: httpx.Client, served, http_corpus: Corpus,
) -> None:
    url, _ = served
    for index in [(0,), (3,), (4,)]:
        r = http.get(f"{url}/zarr/{H_PH}/{index[0]}")
        assert r.status_code == 200
        assert r.content == raw_chunk(http_corpus.local[SMALL], "gt1l/heights/h_ph", index)
        assert r.headers["content-type"] == "application/octet-stream"
        assert "content-encoding" not in r.headers  # chunks are never gzipped
        assert r.headers["accept-ranges"] == "bytes"
    r = http.get(f"{url}/zarr/{SMALL}/ancillary_data/sparse/0.0")
    assert r.content == raw_chunk(http_corpus.local[SMALL], "ancillary_data/sparse", (0, 0))


def test_metadata_documents_match_the_sidecar(
    http: httpx.Client, served, http_corpus: Corpus,
) -> None:
    url, _ = served
    refs = read_refs(f"{http_corpus.dest}/{SMALL}.json")
    zmeta = refs.zmetadata()
    doc = http.get(f"{url}/zarr/{SMALL}/.zmetadata").json()
    assert doc == {"zarr_consolidated_format": 1, "metadata": zmeta}
    assert http.get(f"{url}/zarr/{H_PH}/.zarray").json() == zmeta["gt1l/heights/h_ph/.zarray"]
    # every group has consolidated metadata of its subtree, keys relative to it
    sub = http.get(f"{url}/zarr/{SMALL}/gt1l/.zmetadata").json()["metadata"]
    assert sub["heights/h_ph/.zarray"] == zmeta["gt1l/heights/h_ph/.zarray"]
    assert not any(k.startswith("ancillary_data") for k in sub)
    v3 = http.get(f"{url}/zarr3/{SMALL}/gt1l/heights/zarr.json").json()
    assert v3["node_type"] == "group"
    assert set(v3["consolidated_metadata"]["metadata"]) >= {"h_ph", "delta_time", "quality_ph"}


def test_gzip_only_for_metadata(http: httpx.Client, served) -> None:
    url, _ = served
    big = http.get(f"{url}/zarr/{ATL03}/.zmetadata", headers={"Accept-Encoding": "gzip"})
    assert big.headers["content-encoding"] == "gzip"
    assert "Accept-Encoding" in big.headers["vary"]
    plain = http.get(f"{url}/zarr/{ATL03}/.zmetadata", headers=NO_GZIP)
    assert "content-encoding" not in plain.headers
    assert big.json() == plain.json()
    assert int(big.headers["content-length"]) < len(plain.content) / 3
    # the same compressed bytes a second time (cached), valid gzip
    with httpx.Client() as c:
        again = c.send(c.build_request("GET", f"{url}/zarr/{ATL03}/.zmetadata",
                                       headers={"Accept-Encoding": "gzip"}), stream=True)  # fmt: skip
        body = b"".join(again.iter_raw())
        assert json.loads(gzip.decompress(body)) == plain.json()
    chunk = http.get(f"{url}/zarr/{H_PH}/0", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in chunk.headers


@pytest.mark.parametrize(
    ("header", "window"),
    [("bytes=10-19", (10, 20)), ("bytes=100-", (100, None)), ("bytes=-16", (-16, None)),
     ("bytes=0-999999999", (0, None))],
)  # fmt: skip
def test_single_ranges(
    http: httpx.Client, served, http_corpus: Corpus, header: str, window,
) -> None:  # type: ignore[no-untyped-def]
    url, _ = served
    whole = raw_chunk(http_corpus.local[SMALL], "gt1l/heights/h_ph", (2,))
    r = http.get(f"{url}/zarr/{H_PH}/2", headers={"Range": header})
    assert r.status_code == 206
    start = window[0] if window[0] >= 0 else len(whole) + window[0]
    part = whole[start : window[1]]
    assert r.content == part
    end = start + len(part) - 1
    assert r.headers["content-range"] == f"bytes {start}-{end}/{len(whole)}"
    assert int(r.headers["content-length"]) == len(part)


def test_unsatisfiable_and_ignored_ranges(http: httpx.Client, served) -> None:
    url, _ = served
    size = len(http.get(f"{url}/zarr/{H_PH}/1").content)
    r = http.get(f"{url}/zarr/{H_PH}/1", headers={"Range": f"bytes={size}-"})
    assert r.status_code == 416
    assert r.headers["content-range"] == f"bytes */{size}"
    assert r.json()["error"] == "range_not_satisfiable"
    assert http.get(f"{url}/zarr/{H_PH}/1", headers={"Range": "bytes=0-1,4-5"}).status_code == 416
    # 5,000 digits: past the end (416), not a traceback (500)
    huge = http.get(f"{url}/zarr/{H_PH}/1", headers={"Range": f"bytes={'9' * 5000}-"})
    assert huge.status_code == 416 and huge.json()["error"] == "range_not_satisfiable"
    tail = http.get(f"{url}/zarr/{H_PH}/1", headers={"Range": f"bytes=1-{'9' * 5000}"})
    assert tail.status_code == 206 and len(tail.content) == size - 1
    for ignored in ("items=0-5", "bytes=abc", "bytes=9-3"):  # RFC 9110: ignore, send it all
        r = http.get(f"{url}/zarr/{H_PH}/1", headers={"Range": ignored})
        assert r.status_code == 200 and len(r.content) == size
    meta = http.get(f"{url}/zarr/{H_PH}/.zarray", headers={"Range": "bytes=0-4", **NO_GZIP})
    assert meta.status_code == 206 and meta.content == b'{"zar'


def test_head_sends_headers_without_reading_the_source(
    http: httpx.Client, http_corpus: Corpus,
) -> None:
    with gateway(http_corpus.dest, http_corpus.options) as (url, app):
        m = app.state.gateway.metrics
        size = len(raw_chunk(http_corpus.local[SMALL], "gt1l/heights/h_ph", (4,)))
        http.get(f"{url}/zarr/{SMALL}/.zmetadata")  # loads the sidecar
        r = http.head(f"{url}/zarr/{H_PH}/4")
        assert r.status_code == 200 and r.content == b""
        assert int(r.headers["content-length"]) == size
        r = http.head(f"{url}/zarr/{H_PH}/4", headers={"Range": "bytes=-5"})
        assert r.status_code == 206 and r.headers["content-range"].endswith(f"/{size}")
        assert m.total("h5sidecar_upstream_requests_total") == 0
        assert http.head(f"{url}/zarr/{SMALL}/ancillary_data/sparse/1.1").status_code == 404


def test_etags_and_conditional_requests(http: httpx.Client, served) -> None:
    url, _ = served
    a, b = http.get(f"{url}/zarr/{H_PH}/0"), http.get(f"{url}/zarr/{H_PH}/1")
    assert a.headers["etag"].startswith('"') and a.headers["etag"] != b.headers["etag"]
    assert http.get(f"{url}/zarr/{H_PH}/0").headers["etag"] == a.headers["etag"]
    r = http.get(f"{url}/zarr/{H_PH}/0", headers={"If-None-Match": a.headers["etag"]})
    assert r.status_code == 304 and r.content == b""
    r = http.get(f"{url}/zarr/{H_PH}/0", headers={"If-None-Match": b.headers["etag"]})
    assert r.status_code == 200
    # the same chunk in another view is another representation: another ETag
    assert http.get(f"{url}/zarr3/{H_PH}/0").headers["etag"] != a.headers["etag"]
    assert a.headers["cache-control"] == "public, max-age=86400"
    assert http.get(f"{url}/zarr/{SMALL}/.zmetadata").headers["cache-control"] == (
        "public, max-age=60"
    )


def test_missing_keys_are_404(http: httpx.Client, served) -> None:
    url, _ = served
    for path in (
        f"/zarr/{SMALL}/ancillary_data/sparse/1.1",  # never written: the fill value
        f"/zarr3-shard/2/{SMALL}/ancillary_data/sparse/0.1",  # a shard of unwritten chunks
        f"/zarr/{H_PH}/5",  # past the chunk grid
        f"/zarr/{H_PH}/01",  # not the canonical spelling of chunk 1
        f"/zarr/{H_PH}/0.0",  # wrong rank
        f"/zarr/{SMALL}/no/such/.zarray",
        "/zarr/no-such-granule.h5/.zmetadata",
        f"/zarr/{SMALL}/zarr.json",  # v3 documents are not in the v2 view
        f"/zarr3/{SMALL}/.zmetadata",
        f"/zarr3-shard/2/{H_PH}/3",  # 5 chunks in shards of 2: shards 0..2
    ):
        r = http.get(url + path)
        assert r.status_code == 404, path
        assert r.json()["error"] == "not_indexed"
    msg = http.get(f"{url}/zarr/{SMALL}/ancillary_data/sparse/1.1").json()["message"]
    assert "fill value" in msg


def test_read_only_methods(http: httpx.Client, served) -> None:
    url, _ = served
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in (f"/zarr/{H_PH}/0", "/", "/nowhere"):
            r = http.request(method, url + path, content=b"x")
            assert r.status_code == 405, (method, path)
            assert r.headers["allow"] == "GET, HEAD, OPTIONS"
    r = http.options(f"{url}/zarr/{H_PH}/0")
    assert r.status_code == 204 and r.headers["allow"] == "GET, HEAD, OPTIONS"


def test_health_metrics_openapi(http: httpx.Client, http_corpus: Corpus) -> None:
    with gateway(http_corpus.dest, http_corpus.options) as (url, app):
        # "warming" while DEST is loaded, at first (in a thread: it answers meanwhile)
        assert http.get(f"{url}/healthz").json()["status"] in ("warming", "ok")
        assert wait_status(url).status_code == 200
        for key in ("0", "1", "0"):
            http.get(f"{url}/zarr/{H_PH}/{key}")
        settled(app)
        text = http.get(f"{url}/metrics").text
        lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
        assert float(lines['h5sidecar_http_requests_total{method="GET",route="zarr",'
                           'status="200"}']) == 3  # fmt: skip
        assert float(lines["h5sidecar_upstream_requests_total"]) == 2  # the third was cached
        assert float(lines['h5sidecar_cache_hits_total{cache="chunk"}']) == 1
        assert float(lines['h5sidecar_http_response_bytes_total{route="zarr"}']) > 0
        assert float(lines['h5sidecar_http_request_duration_seconds_count{route="zarr"}']) == 3
        assert 'h5sidecar_http_request_duration_seconds_bucket{route="zarr",le="+Inf"} 3' in text
        assert float(lines["h5sidecar_granules"]) == 2
        spec = http.get(f"{url}/openapi.json").json()
        assert spec["openapi"].startswith("3.1")
        assert {"/zarr/{granule}/{key}", "/zarr3-shard/{k}/{granule}/{key}"} <= set(spec["paths"])


def test_cors(http: httpx.Client, http_corpus: Corpus) -> None:
    page = "http://127.0.0.1:1"
    with gateway(http_corpus.dest, http_corpus.options, cors_origins=(page,)) as (url, _):
        r = http.get(f"{url}/zarr/{H_PH}/0", headers={"Origin": page})
        assert r.headers["access-control-allow-origin"] == page
        assert "content-range" in r.headers["access-control-expose-headers"].lower()
        pre = http.options(f"{url}/zarr/{H_PH}/0", headers={
            "Origin": page, "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "range"})  # fmt: skip
        assert pre.status_code == 200
        assert "range" in pre.headers["access-control-allow-headers"].lower()
        other = http.get(f"{url}/zarr/{H_PH}/0", headers={"Origin": "http://127.0.0.1:2"})
        assert "access-control-allow-origin" not in other.headers
    with gateway(http_corpus.dest, http_corpus.options, cors_origins=()) as (url, _):
        r = http.get(f"{url}/zarr/{H_PH}/0", headers={"Origin": page})
        assert "access-control-allow-origin" not in r.headers


def test_limits(http: httpx.Client, http_corpus: Corpus) -> None:
    with gateway(http_corpus.dest, http_corpus.options, max_key_length=64,
                 max_response_bytes=1000) as (url, _):  # fmt: skip
        r = http.get(f"{url}/zarr/{SMALL}/" + "x" * 80)
        assert r.status_code == 414 and r.json()["error"] == "key_too_long"
        r = http.get(f"{url}/zarr/{H_PH}/0")
        assert r.status_code == 413 and "Range" in r.json()["message"]
        part = http.get(f"{url}/zarr/{H_PH}/0", headers={"Range": "bytes=0-99"})
        assert part.status_code == 206 and len(part.content) == 100


def test_shard_bytes_layout(http: httpx.Client, served, http_corpus: Corpus) -> None:
    url, _ = served
    k = 2
    cases: list[tuple[str, str, list[tuple[int, ...] | None]]] = [
        ("gt1l/heights/h_ph", "1", [(2,), (3,)]),
        ("gt1l/heights/h_ph", "2", [(4,), None]),
        ("ancillary_data/sparse", "0.0", [(0, 0), None]),
    ]
    for name, shard, inner in cases:
        r = http.get(f"{url}/zarr3-shard/{k}/{SMALL}/{name}/{shard}")
        assert r.status_code == 200, r.text
        body = r.content
        index_bytes, crc = body[-(16 * k + 4) : -4], body[-4:]
        assert int(google_crc32c.value(index_bytes)).to_bytes(4, "little") == crc
        table = np.frombuffer(index_bytes, dtype="<u8").reshape(k, 2)
        for (offset, length), idx in zip(table.tolist(), inner, strict=True):
            if idx is None:  # past the grid, or never written: the fill value
                assert offset == length == 2**64 - 1
                continue
            want = raw_chunk(http_corpus.local[SMALL], name, idx)
            assert body[offset : offset + length] == want
        # the index read by suffix, as zarr does, and a window across two inner chunks
        r = http.get(f"{url}/zarr3-shard/{k}/{SMALL}/{name}/{shard}",
                      headers={"Range": f"bytes=-{16 * k + 4}"})  # fmt: skip
        assert r.status_code == 206 and r.content == body[-(16 * k + 4) :]
        mid = len(body) // 2
        r = http.get(f"{url}/zarr3-shard/{k}/{SMALL}/{name}/{shard}",
                      headers={"Range": f"bytes={mid - 7}-{mid + 7}"})  # fmt: skip
        assert r.content == body[mid - 7 : mid + 8]


def test_shard_index_needs_no_upstream_read(http: httpx.Client, http_corpus: Corpus) -> None:
    with gateway(http_corpus.dest, http_corpus.options) as (url, app):
        r = http.get(f"{url}/zarr3-shard/4/{H_PH}/0", headers={"Range": "bytes=-68"})
        assert r.status_code == 206 and len(r.content) == 68
        assert app.state.gateway.metrics.total("h5sidecar_upstream_requests_total") == 0
        whole = http.get(f"{url}/zarr3-shard/4/{H_PH}/0")
        assert whole.status_code == 200
        # four adjacent chunks, one coalesced upstream read
        assert app.state.gateway.metrics.total("h5sidecar_upstream_requests_total") == 1


def test_bad_view_parameters(http: httpx.Client, served) -> None:
    url, _ = served
    for path in (f"/zarr3-shard/0/{H_PH}/0", f"/zarr3-shard/x/{H_PH}/0",
                 f"/zarr3-shard/5000/{H_PH}/0", f"/zarr3/{H_PH}/0?shard=-1",
                 f"/zarr3/{H_PH}/0?shard=abc"):  # fmt: skip
        r = http.get(url + path)
        assert r.status_code == 400, path
        assert r.json()["error"] == "bad_request"


def test_landing_page_and_api(http: httpx.Client, served, http_corpus: Corpus) -> None:
    url, _ = served
    names = http.get(f"{url}/api/granules").json()["granules"]
    assert names == sorted([ATL03, SMALL])
    info = http.get(f"{url}/api/granules/{SMALL}").json()
    var = {v["path"]: v for g in info["groups"] for v in g["variables"]}["gt1l/heights/h_ph"]
    with h5py.File(http_corpus.local[SMALL]) as f:
        d = f["gt1l/heights/h_ph"]
        assert (tuple(var["shape"]), tuple(var["chunks"])) == (d.shape, d.chunks)
        assert var["dtype"] == d.dtype.str and var["n_chunks"] == 5
    page = http.get(f"{url}/", params={"granule": SMALL, "variable": "gt1l/heights/h_ph"})
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "xr.open_zarr(" in page.text and f"{url}/zarr/{SMALL}/" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    png = http.get(f"{url}/quicklook.png", params={"granule": SMALL,
                                                    "variable": "gt1l/heights/h_ph"})  # fmt: skip
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG\r\n\x1a\n")
    bad = http.get(f"{url}/quicklook.png", params={"granule": SMALL,
                                                    "variable": "gt1l/geolocation/names"})  # fmt: skip
    assert bad.status_code == 501 and bad.json()["error"] == "unsupported"
