"""URL -> obstore store mapping: normalisation, options, environment, cache, secrecy, identity."""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import obstore
import pytest

from h5sidecar.errors import (
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
    UnsupportedFeatureError,
)
from h5sidecar.sources._source_identity import source_identity
from h5sidecar.sources.stores import _store_cache as _stores
from h5sidecar.sources.stores._store_cache import (
    MAX_CACHED_STORES,
    cached_store_count,
    clear_store_cache,
    normalize_url,
    parse_url,
    resolve_store,
)
from h5sidecar.sources.stores._store_errors import STORE_ERRORS, translate_store_error


# -- parsing -------------------------------------------------------------------------------------
def test_s3_urls_normalise_to_s3_bucket_key() -> None:
    loc = parse_url("s3a://my-bucket/a/b/ATL03.h5")
    assert (loc.url, loc.kind, loc.bucket, loc.path) == (
        "s3://my-bucket/a/b/ATL03.h5",
        "s3",
        "my-bucket",
        "a/b/ATL03.h5",
    )
    assert normalize_url("S3://my-bucket/x.h5") == "s3://my-bucket/x.h5"


def test_local_paths_normalise_to_absolute_without_scheme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    target = str(tmp_path / "sub dir" / "g.h5")
    assert normalize_url("sub dir/g.h5") == target
    assert normalize_url(Path("sub dir/g.h5")) == target
    assert normalize_url("file://" + target.replace(" ", "%20")) == target
    assert normalize_url("file://localhost" + target) == target
    loc = parse_url(target)
    assert loc.kind == "local" and loc.path == target.lstrip("/") and loc.local_path == target
    monkeypatch.setenv("HOME", str(tmp_path))
    assert normalize_url("~/g.h5") == str(tmp_path / "g.h5")


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("gs://bucket/x.h5", UnsupportedFeatureError),
        ("ftp://example.org/x.h5", UnsupportedFeatureError),
        ("file://otherhost/x.h5", UnsupportedFeatureError),
        ("s3://bucket-only", SourceReadError),
        ("s3://bucket/dir/", SourceReadError),
    ],
)
def test_unusable_urls_raise_specific_errors(url: str, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"s3://bucket|local path|scheme|mount"):
        parse_url(url)


def test_local_urls_map_to_one_shared_local_store(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(b"0123456789")
    store_a, loc = resolve_store(f"file://{f}")
    store_b, _ = resolve_store(str(f))
    assert store_a is store_b
    assert bytes(obstore.get_range(store_a, loc.path, start=2, length=3)) == b"234"


# -- options and environment ---------------------------------------------------------------------
@pytest.fixture
def s3_object(s3, s3_bucket: str) -> tuple[str, bytes]:  # type: ignore[no-untyped-def]
    payload = bytes(range(256)) * 8
    s3.pipe(f"{s3_bucket}/dir/obj.bin", payload)
    return f"s3://{s3_bucket}/dir/obj.bin", payload


def test_s3fs_storage_options_reach_the_object(
    s3_object: tuple[str, bytes], s3_storage_options: dict[str, object]
) -> None:
    url, payload = s3_object
    store, loc = resolve_store(url, {**s3_storage_options, "skip_instance_cache": True})
    assert bytes(obstore.get_range(store, loc.path, start=100, length=50)) == payload[100:150]


def test_environment_variables_alone_reach_the_object(
    s3_object: tuple[str, bytes], s3_endpoint: str
) -> None:
    url, payload = s3_object
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_REGION": "us-east-1",
    }
    store, loc = resolve_store(url, None, env=env)
    assert store.config["endpoint"] == s3_endpoint  # type: ignore[union-attr]
    assert bytes(obstore.get_range(store, loc.path, start=0, length=16)) == payload[:16]


def test_region_comes_from_client_kwargs_then_environment() -> None:
    env = {"AWS_DEFAULT_REGION": "eu-west-3"}
    store, _ = resolve_store("s3://b/k", {"anon": True}, env=env)
    assert store.config["region"] == "eu-west-3"  # type: ignore[union-attr]
    store, _ = resolve_store(
        "s3://b/k", {"anon": True, "client_kwargs": {"region_name": "us-west-2"}}, env=env
    )
    assert store.config["region"] == "us-west-2"  # type: ignore[union-attr]
    assert str(store.config["skip_signature"]).lower() == "true"  # type: ignore[union-attr]


def test_unknown_storage_options_are_refused_with_the_supported_list() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"s3_additional.*not supported.*endpoint"):
        resolve_store("s3://b/k", {"s3_additional_kwargs": {"ACL": "private"}})
    with pytest.raises(UnsupportedFeatureError, match=r"client_kwargs\.verify"):
        resolve_store("s3://b/k", {"client_kwargs": {"verify": False}})
    with pytest.raises(SourceReadError, match="both 'key' and 'secret'"):
        resolve_store("s3://b/k", {"key": "only-a-key"})


class _HeaderRecorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]]
    status = 404  # S3 answers 301 without a Location to a request sent to the wrong region

    def do_GET(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def header_server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A plain HTTP server on 127.0.0.1 that records request headers (answers 404)."""
    handler = type("Recorder", (_HeaderRecorder,), {"seen": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.seen
    finally:
        server.shutdown()
        server.server_close()


def test_explicit_key_is_not_signed_with_the_environments_session_token(
    header_server: tuple[str, list[dict[str, str]]],
) -> None:
    endpoint, seen = header_server
    env = {
        "AWS_ACCESS_KEY_ID": "ENVKEY",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_SESSION_TOKEN": "ENVTOK",
    }
    store, loc = resolve_store(
        "s3://bkt/k", {"endpoint_url": endpoint, "key": "EXPLICIT", "secret": "s"}, env=env
    )
    with pytest.raises(FileNotFoundError):
        obstore.get_range(store, loc.path, start=0, length=4)
    store_env, loc = resolve_store("s3://bkt/k", {"endpoint_url": endpoint}, env=env)
    with pytest.raises(FileNotFoundError):
        obstore.get_range(store_env, loc.path, start=0, length=4)
    explicit, from_env = seen[0], seen[-1]
    assert "Credential=EXPLICIT/" in explicit["authorization"]
    assert "x-amz-security-token" not in explicit
    assert "Credential=ENVKEY/" in from_env["authorization"]
    assert from_env["x-amz-security-token"] == "ENVTOK"


def test_wrong_region_error_says_how_to_set_it(
    header_server: tuple[str, list[dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, _ = header_server
    monkeypatch.setattr(_HeaderRecorder, "status", 301)
    url = "s3://far-away-bucket/x.h5"
    with pytest.raises(SourceReadError, match=r"another region.*region_name.*AWS_REGION"):
        source_identity(url, {"endpoint_url": endpoint, "anon": True})


def test_anonymous_requests_are_unsigned(header_server: tuple[str, list[dict[str, str]]]) -> None:
    endpoint, seen = header_server
    env = {"AWS_ACCESS_KEY_ID": "ENVKEY", "AWS_SECRET_ACCESS_KEY": "x"}
    store, loc = resolve_store("s3://bkt/k", {"endpoint_url": endpoint, "anon": True}, env=env)
    with pytest.raises(FileNotFoundError):
        obstore.get_range(store, loc.path, start=0, length=4)
    assert "authorization" not in seen[-1]


# -- cache and secrecy ---------------------------------------------------------------------------
def test_store_cache_shares_equal_options_and_is_bounded() -> None:
    clear_store_cache()
    opts = {"key": "k", "secret": "s", "endpoint_url": "http://127.0.0.1:9"}
    a, _ = resolve_store("s3://bkt/one.h5", opts, env={})
    b, _ = resolve_store("s3://bkt/two.h5", dict(opts), env={})
    c, _ = resolve_store("s3://bkt/one.h5", {**opts, "secret": "other"}, env={})
    d, _ = resolve_store("s3://other/one.h5", opts, env={})
    assert a is b and a is not c and a is not d
    e, _ = resolve_store("s3://bkt/one.h5", opts, env={}, retry_config={"max_retries": 0})
    assert e is not a and e.retry_config["max_retries"] == 0  # type: ignore[union-attr,index]
    assert resolve_store("s3://bkt/x", opts, env={}, retry_config={"max_retries": 0})[0] is e
    assert cached_store_count() == 4
    for i in range(MAX_CACHED_STORES + 5):
        resolve_store(f"s3://bucket-{i}/k", opts, env={})
    assert cached_store_count() == MAX_CACHED_STORES
    clear_store_cache()
    assert cached_store_count() == 0


def test_credentials_stay_out_of_reprs_and_pickles() -> None:
    secret = "SUPER-SECRET-VALUE"
    opts = {"key": "AKIDKEY", "secret": secret, "token": secret + "-TOKEN"}
    store, loc = resolve_store("s3://bkt/k", opts, env={})
    resolved = _stores._resolve_s3_options(opts, {})
    for text in (repr(store), str(store.config), repr(store.credential_provider), repr(resolved)):  # type: ignore[union-attr]
        assert secret not in text
    with pytest.raises(TypeError, match="refusing to pickle"):
        pickle.dumps(store)
    assert pickle.loads(pickle.dumps(loc)) == loc  # locations carry no credentials


# -- identity and errors -------------------------------------------------------------------------
def test_identity_matches_s3fs_info(
    s3,
    s3_object: tuple[str, bytes],
    s3_storage_options: dict[str, object],  # type: ignore[no-untyped-def]
) -> None:
    url, payload = s3_object
    ident = source_identity(url, s3_storage_options)
    info = s3.info(url)
    assert ident.url == url
    assert ident.size == info["size"] == len(payload)
    assert ident.etag == info["ETag"].strip('"')
    assert ident.mtime == pytest.approx(info["LastModified"].timestamp(), abs=1.0)


def test_identity_of_a_local_file_comes_from_stat(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc")
    ident = source_identity(f"file://{f}")
    st = os.stat(f)
    assert (ident.url, ident.size, ident.etag, ident.mtime) == (str(f), 3, None, st.st_mtime)
    with pytest.raises(SourceNotFoundError, match="does not exist; check the path"):
        source_identity(tmp_path / "missing.h5")


def test_missing_object_is_source_not_found(
    s3_bucket: str, s3_storage_options: dict[str, object]
) -> None:
    url = f"s3://{s3_bucket}/nope.h5"
    with pytest.raises(SourceNotFoundError, match=f"HEAD {url}: no such object; check the URL"):
        source_identity(url, s3_storage_options)


def test_failed_if_match_translates_to_stale_reference(
    s3_object: tuple[str, bytes], s3_storage_options: dict[str, object]
) -> None:
    url, _ = s3_object
    store, loc = resolve_store(url, s3_storage_options)
    with pytest.raises(STORE_ERRORS) as info:
        obstore.get(store, loc.path, options={"if_match": '"not-the-etag"', "range": (0, 4)})
    err = translate_store_error(info.value, url, "GET")
    assert isinstance(err, StaleReferenceError) and err.url == url
    assert "index it again" in str(err)
