"""The gateway locked down: path traversal in every encoding, planted sidecars pointing outside
the allow-list (403, never fetched), the report-based allow-list and ``--allow``, the bearer
token, stale sources, and no credential in any response or log line.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import uuid
from pathlib import Path

import httpx
import pytest
import s3fs

from h5sidecar.references import GranuleRefs, SourceInfo, read_refs, write_json
from h5sidecar.workflows import index_many
from tests.faultproxy import FaultProxy
from tests.gateway._http import (
    ATL03,
    SMALL,
    Corpus,
    gateway,
    http,
    http_corpus,
    raw_get,
    served,
    wait_status,
)

__all__ = ["http", "http_corpus", "served"]

CHUNK = "gt1l/heights/h_ph/0"

TRAVERSALS = [
    b"/zarr/../../../etc/passwd",
    b"/zarr/%2e%2e/%2e%2e/etc/passwd",
    b"/zarr/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
    b"/zarr/small.h5/..%2f..%2f..%2fetc%2fpasswd",
    b"/zarr/%252e%252e/%252e%252e/etc/passwd",
    b"/zarr/..%5c..%5c..%5cetc%5cpasswd",
    b"/zarr/..\\..\\..\\etc\\passwd",
    b"/zarr/small.h5/./.zmetadata",
    b"/zarr3-shard/2/../../../etc/passwd",
    b"/static/../app.py",
    b"/static/%2e%2e/app.py",
    b"/static/..%2fcore.py",
    b"/api/granules/..%2f..%2f..%2fetc%2fpasswd",
    b"/api/granules/../../etc/passwd",
    b"//etc/passwd",
    b"/zarr/small.h5%00/.zmetadata",
]


@pytest.mark.parametrize("path", TRAVERSALS, ids=[p.decode("latin-1") for p in TRAVERSALS])
def test_path_traversal_is_refused(served, path: bytes) -> None:
    url, _ = served
    status, body = raw_get(url, path)
    assert status == 400, body
    assert b"root:" not in body and b"import " not in body


def test_traversal_in_query_parameters(http: httpx.Client, served) -> None:
    url, _ = served
    for granule in ("../../etc/passwd", "/etc/passwd", "small.h5/../../x"):
        r = http.get(f"{url}/quicklook.png", params={"granule": granule, "variable": "x"})
        assert r.status_code == 404 and b"root:" not in r.content
        page = http.get(f"{url}/", params={"granule": granule})
        assert page.status_code == 200 and "root:" not in page.text


def _repoint(refs: GranuleRefs, url: str) -> GranuleRefs:
    """The same references, every chunk and the source identity pointing at ``url``."""
    arrays = {
        p: dataclasses.replace(a, manifest=a.manifest.with_urls((url,) * len(a.manifest.urls)))
        for p, a in refs.arrays.items()
    }
    return GranuleRefs(SourceInfo(url=url, size=refs.source.size), dict(refs.groups), arrays,
                       refs.skipped, dict(refs.extra))  # fmt: skip


@pytest.fixture
def planted(http_corpus: Corpus, tmp_path: Path) -> tuple[Path, str]:
    """A copy of DEST with hostile sidecars planted next to the real ones.

    Returns the DEST folder and the name of a bucket holding a real copy of the granule (which
    would be readable with the gateway's credentials: refusing it must not depend on I/O).
    """
    dest = tmp_path / "dest"
    shutil.copytree(http_corpus.dest, dest)
    other = f"other-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **http_corpus.options)
    fs.mkdir(other)
    fs.put_file(str(http_corpus.local[SMALL]), f"{other}/src/{SMALL}")
    refs = read_refs(dest / f"{SMALL}.json")
    for name, url in [("passwd.h5", "file:///etc/passwd"),
                      ("local.h5", "/etc/passwd"),
                      ("other-bucket.h5", f"s3://{other}/src/{SMALL}"),
                      ("http.h5", "http://127.0.0.1:9/small.h5")]:  # fmt: skip
        write_json(_repoint(refs, url), dest / f"{name}.json")
    # a legitimate granule's sidecar overwritten to point elsewhere
    write_json(_repoint(refs, f"s3://{other}/src/{SMALL}"), dest / f"{SMALL}.json")
    return dest, other


def test_planted_sidecars_are_refused_without_any_fetch(
    http: httpx.Client, http_corpus: Corpus, planted,
) -> None:
    dest, _ = planted
    with FaultProxy(http_corpus.endpoint) as proxy, \
            gateway(str(dest), {"endpoint_url": proxy.url}) as (url, app):  # fmt: skip
        names = http.get(f"{url}/api/granules").json()["granules"]
        # listed from DEST's record (which never held them), still served by name
        assert SMALL in names and not {"passwd.h5", "local.h5", "other-bucket.h5",
                                       "http.h5"} & set(names)  # fmt: skip
        for name in ("passwd.h5", "local.h5", "other-bucket.h5", "http.h5", SMALL):
            assert http.get(f"{url}/zarr/{name}/.zmetadata").status_code == 200  # metadata only
            for path in (f"/zarr/{name}/{CHUNK}", f"/zarr3-shard/2/{name}/{CHUNK}"):
                r = http.get(url + path)
                assert r.status_code == 403, (path, r.text)
                assert r.json()["error"] == "forbidden_source"
                assert "root:" not in r.text
            r = http.get(f"{url}/quicklook.png", params={"granule": name,
                                                          "variable": "gt1l/heights/h_ph"})  # fmt: skip
            assert r.status_code == 403
        assert proxy.gets() == []  # nothing reached the object store
        assert app.state.gateway.metrics.total("h5sidecar_upstream_requests_total") == 0
        # the granules the report vouches for are still served, through the same proxy
        ok = http.get(f"{url}/zarr/{ATL03}/gt1l/heights/h_ph/0")
        assert ok.status_code == 200 and len(proxy.gets()) == 1


def test_allow_extends_the_allow_list(http: httpx.Client, http_corpus: Corpus, planted) -> None:
    dest, other = planted
    with gateway(str(dest), http_corpus.options, allow=(f"s3://{other}/src",)) as (url, _):
        r = http.get(f"{url}/zarr/other-bucket.h5/{CHUNK}")
        assert r.status_code == 200
        assert r.content == http.get(f"{url}/zarr/{SMALL}/{CHUNK}").content
        # allowing one prefix allows nothing else
        assert http.get(f"{url}/zarr/passwd.h5/{CHUNK}").status_code == 403


def test_without_a_report_only_allowed_prefixes_are_read(
    http: httpx.Client, http_corpus: Corpus, tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "dest"
    shutil.copytree(http_corpus.dest, dest)
    (dest / "_h5sidecar.sqlite").unlink()
    with gateway(str(dest), http_corpus.options) as (url, _):
        assert http.get(f"{url}/zarr/{SMALL}/.zmetadata").status_code == 200
        assert http.get(f"{url}/zarr/{SMALL}/{CHUNK}").status_code == 403
    allow = (f"s3://{http_corpus.bucket}/src",)
    with gateway(str(dest), http_corpus.options, allow=allow) as (url, _):
        assert http.get(f"{url}/zarr/{SMALL}/{CHUNK}").status_code == 200


def test_stale_source_is_409(
    http: httpx.Client, http_corpus: Corpus, tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    bucket = f"stale-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **http_corpus.options)
    fs.mkdir(bucket)
    fs.put_file(str(http_corpus.local[SMALL]), f"{bucket}/{SMALL}")
    dest = tmp_path / "dest"
    assert index_many(f"s3://{bucket}/{SMALL}", str(dest), format="json", executor="serial",
                      storage_options=http_corpus.options).ok  # fmt: skip
    with gateway(str(dest), http_corpus.options) as (url, _):
        assert http.get(f"{url}/zarr/{SMALL}/{CHUNK}").status_code == 200
        fs.pipe_file(f"{bucket}/{SMALL}", http_corpus.local[SMALL].read_bytes() + b"\0")
        r = http.get(f"{url}/zarr/{SMALL}/gt1l/heights/h_ph/1")
        assert r.status_code == 409
        assert r.json()["error"] == "stale_reference" and "re-index" in r.json()["message"]


TOKEN = "tok-" + uuid.uuid4().hex
KEY, SECRET = "AKIA" + uuid.uuid4().hex[:16].upper(), "sec-" + uuid.uuid4().hex


def test_token_and_no_credentials_anywhere(
    http: httpx.Client, http_corpus: Corpus, planted, caplog,
) -> None:  # type: ignore[no-untyped-def]
    dest, _ = planted
    options = {**http_corpus.options, "key": KEY, "secret": SECRET}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    seen: list[httpx.Response] = []
    caplog.set_level(logging.DEBUG)
    with gateway(str(dest), options, token=TOKEN) as (url, _):
        wait_status(url)  # DEST loaded in its thread: /readyz is 200 only then
        for probe in ("/healthz", "/readyz"):  # probes send no token
            assert http.get(url + probe).status_code == 200, probe
        for path in ("/", "/metrics", "/openapi.json", "/api/granules", f"/zarr/{SMALL}/{CHUNK}",
                     f"/zarr3/{SMALL}/zarr.json", "/static/landing.js"):  # fmt: skip
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                r = http.get(url + path, headers=headers)
                assert r.status_code == 401, (path, headers)
                assert r.headers["www-authenticate"].startswith("Bearer")
                seen.append(r)
        for path in ("/", f"/?granule={SMALL}&variable=gt1l/heights/h_ph", "/metrics",
                     "/api/granules", f"/api/granules/{SMALL}", f"/zarr/{SMALL}/.zmetadata",
                     f"/zarr/{SMALL}/{CHUNK}", f"/zarr/passwd.h5/{CHUNK}",
                     f"/zarr/{SMALL}/no/such/key", "/zarr/missing.h5/x",
                     f"/quicklook.png?granule={SMALL}&variable=gt1l/heights/h_ph"):  # fmt: skip
            r = http.get(url + path, headers=auth)
            assert r.status_code < 500, (path, r.text)
            seen.append(r)
        assert http.get(f"{url}/zarr/{SMALL}/{CHUNK}", headers=auth).status_code == 403
        landing = http.get(f"{url}/", headers=auth).text
        assert "Bearer &lt;TOKEN&gt;" in landing  # the snippet shows where the token goes
        assert http.get(f"{url}/zarr/{SMALL}/.zmetadata", headers=auth).headers[
            "cache-control"].startswith("private")  # fmt: skip
    for r in seen:
        blob = r.content + repr(sorted(r.headers.items())).encode()
        for secret in (TOKEN, KEY, SECRET):
            assert secret.encode() not in blob, r.request.url
    for secret in (TOKEN, KEY, SECRET):
        assert secret not in caplog.text
