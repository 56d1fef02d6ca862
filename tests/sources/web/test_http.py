"""https:// sources end to end, against the Earthdata-like archive of tests/earthdata.py:
index through redirects and auth, read through the sidecar equal to h5py, errors, secrets."""

from __future__ import annotations

import pickle
import shutil
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.errors import SourceAuthError, SourceNotFoundError, StaleReferenceError
from h5sidecar.indexer import index_granule
from h5sidecar.read import SidecarStore, read_arrays
from h5sidecar.references import write_parquet
from h5sidecar.settings import ReadSettings
from h5sidecar.sources.fetch._chunk_fetcher import ChunkFetcher
from tests.earthdata import PASSWORD, Archive, write_netrc

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def no_env_auth(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No token and no .netrc from the machine running the tests."""
    monkeypatch.delenv("EARTHDATA_TOKEN", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def _granule(tmp_path: Path, small_h5: Path, name: str = "granule.h5") -> Path:
    path = tmp_path / name
    shutil.copy(small_h5, path)
    return path


def _assert_equal_to_h5py(sidecar: Path, path: Path, options: dict) -> None:
    store = SidecarStore(sidecar, remote_options=options)
    names = list(store.refs.arrays)
    got = read_arrays(store, names)
    with h5py.File(path) as h5:
        for name in names:
            want = h5[name][()]
            assert np.array_equal(got[name], want), name
    assert len(names) >= 5


def test_token_index_and_read(earthdata: Archive, no_env_auth: None, small_h5: Path,
                              tmp_path: Path) -> None:  # fmt: skip
    path = _granule(tmp_path, small_h5)
    url = earthdata.add(path)
    options = {"token": earthdata.token}
    refs = index_granule(url, storage_options=options)
    assert refs.source.url == url
    assert refs.source.size == path.stat().st_size and refs.source.etag
    assert all(a.manifest.urls in ((), (url,)) for a in refs.arrays.values() if a.manifest)
    sidecar = tmp_path / "granule.h5.parq"
    write_parquet(refs, sidecar)
    _assert_equal_to_h5py(sidecar, path, options)

    # the token went to the data host only; the signed URL on the other host never saw it
    assert earthdata.seen("data", "/data/")
    for seen in earthdata.seen("login"):
        assert earthdata.token not in str(seen.headers), seen.path
        assert "Authorization" not in seen.headers
    # every read of the object was a ranged GET (Range kept across the redirect)
    signed = earthdata.seen(prefix="/signed/")
    assert signed and all("Range" in s.headers for s in signed)
    # the signed URL is cached: far fewer trips through /data than ranged GETs
    assert len(earthdata.seen("data", "/data/")) < len(signed)


def test_token_from_environment_and_headers(earthdata: Archive, no_env_auth: None,
                                            small_h5: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    url = earthdata.add(_granule(tmp_path, small_h5))
    by_header = index_granule(
        url, storage_options={"headers": {"Authorization": f"Bearer {earthdata.token}"}}
    )
    monkeypatch.setenv("EARTHDATA_TOKEN", earthdata.token)
    by_env = index_granule(url)
    assert by_env.source == by_header.source


def test_netrc_login_flow(earthdata: Archive, no_env_auth: None, small_h5: Path,
                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("NETRC", str(write_netrc(tmp_path / "netrc", host="localhost")))
    path = _granule(tmp_path, small_h5)
    url = earthdata.add(path)
    refs = index_granule(url)
    assert refs.source.url == url and refs.source.etag
    sidecar = tmp_path / "granule.h5.parq"
    write_parquet(refs, sidecar)
    _assert_equal_to_h5py(sidecar, path, {})

    logins = earthdata.seen("login", "/login")
    assert logins and all(s.headers.get("Authorization", "").startswith("Basic ") for s in logins)
    # basic auth only to the host .netrc names; the session cookie spared further logins
    assert all("Authorization" not in s.headers for s in earthdata.seen("data"))
    assert len(logins) <= 2  # the indexer's and the reader's clients may each log in once


def test_missing_credentials(earthdata: Archive, no_env_auth: None, small_h5: Path,
                             tmp_path: Path) -> None:  # fmt: skip
    url = earthdata.add(_granule(tmp_path, small_h5))
    with pytest.raises(SourceAuthError, match="EARTHDATA_TOKEN") as info:
        index_granule(url)
    assert "netrc" in str(info.value) and "401" in str(info.value)


def test_refused_token_is_not_in_the_error(earthdata: Archive, no_env_auth: None,
                                           small_h5: Path, tmp_path: Path) -> None:  # fmt: skip
    url = earthdata.add(_granule(tmp_path, small_h5))
    with pytest.raises(SourceAuthError) as info:
        index_granule(url, storage_options={"token": "wrong-secret-value"})
    assert "wrong-secret-value" not in str(info.value)
    assert "bearer token" in str(info.value)


def test_not_found(earthdata: Archive, no_env_auth: None) -> None:
    with pytest.raises(SourceNotFoundError):
        index_granule(earthdata.url("missing.h5"), storage_options={"token": earthdata.token})


def test_replaced_source_is_stale(earthdata: Archive, no_env_auth: None, small_h5: Path,
                                  tmp_path: Path) -> None:  # fmt: skip
    path = _granule(tmp_path, small_h5)
    url = earthdata.add(path)
    options = {"token": earthdata.token}
    refs = index_granule(url, storage_options=options)
    sidecar = tmp_path / "granule.h5.parq"
    write_parquet(refs, sidecar)
    data = path.read_bytes()
    time.sleep(0.01)
    path.write_bytes(data[:-16] + b"\0" * 16)  # same size, new mtime: a new ETag
    store = SidecarStore(sidecar, remote_options=options)
    with pytest.raises(StaleReferenceError):
        read_arrays(store, list(store.refs.arrays))


def test_expired_signed_url_is_resolved_again(earthdata: Archive, no_env_auth: None,
                                              small_h5: Path, tmp_path: Path) -> None:  # fmt: skip
    path = _granule(tmp_path, small_h5)
    url = earthdata.add(path)
    options = {"token": earthdata.token}
    earthdata.signed_seconds = 2.0
    refs = index_granule(url, storage_options=options)
    sidecar = tmp_path / "granule.h5.parq"
    write_parquet(refs, sidecar)
    _assert_equal_to_h5py(sidecar, path, options)
    before = len(earthdata.seen("data", "/data/"))
    time.sleep(2.5)  # the cached signed URL has expired: 403, then the chain again
    from h5sidecar.read import clear_caches

    clear_caches()
    _assert_equal_to_h5py(sidecar, path, options)
    assert len(earthdata.seen("data", "/data/")) > before
    assert any(s.path.startswith("/signed/") for s in earthdata.seen("login"))


def test_fetcher_pickle_has_no_secrets(earthdata: Archive) -> None:
    fetcher = ChunkFetcher(ReadSettings(), storage_options={
        "token": "tok-SECRET", "headers": {"Authorization": "Bearer hdr-SECRET", "X-Ok": "1"}})
    blob = pickle.dumps(fetcher)
    assert b"SECRET" not in blob
    assert pickle.loads(blob).storage_options == {"headers": {"X-Ok": "1"}}


def test_http_client_and_auth_refuse_pickling() -> None:
    from h5sidecar.sources.web._http_client import HttpClient

    client = HttpClient({"token": "tok-SECRET"})
    assert "SECRET" not in repr(client)
    with pytest.raises(TypeError):
        pickle.dumps(client)
    with pytest.raises(TypeError):
        pickle.dumps(client.auth)


def test_credentials_are_bound_to_hosts(tmp_path: Path) -> None:
    from h5sidecar.credentials._http_auth import HttpAuth

    netrc = write_netrc(tmp_path / "netrc", host="urs.example.org")
    auth = HttpAuth({"token": "T"}, env={"NETRC": str(netrc)})
    src = "https://data.example.org"
    assert auth.headers_for(f"{src}/x.h5", src) == {"Authorization": "Bearer T"}
    assert auth.headers_for("https://bucket.s3.amazonaws.com/x.h5?sig", src) == {}
    assert auth.headers_for("https://urs.example.org/oauth", src)["Authorization"].startswith("Basic ")
    # nothing secret over plain http to a remote host, even the host it is for
    assert auth.headers_for("http://data.example.org/x.h5", "http://data.example.org") == {}
    assert PASSWORD not in repr(auth)


# -- URLs and the allow-list -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "canon"),
    [
        ("HTTPS://Data.Example.ORG:443/a/B.h5", "https://data.example.org/a/B.h5"),
        ("https://data.example.org:8443/x.h5?v=1", "https://data.example.org:8443/x.h5?v=1"),
        ("http://127.0.0.1:80/x.h5#frag", "http://127.0.0.1/x.h5"),
    ],
)
def test_parse_https_urls(url: str, canon: str) -> None:
    from h5sidecar.sources.stores._urls import normalize_url, parse_url

    loc = parse_url(url)
    assert (loc.url, loc.kind) == (canon, "http")
    assert normalize_url(url) == canon == parse_url(url, untrusted=True).url


@pytest.mark.parametrize(
    "url",
    [
        "https://user:pw@data.example.org/x.h5",
        "https://data.example.org/dir/../secret.h5",
        "https://data.example.org/dir/%2e%2e/secret.h5",
        "https://data.example.org/dir\\..\\secret.h5",
        "https:///x.h5",
        "https://data.example.org/x\x00.h5",
    ],
)
def test_untrusted_https_urls_are_refused(url: str) -> None:
    from h5sidecar.errors import ForbiddenSourceError, InvalidReferenceError
    from h5sidecar.sources._allow import AllowList

    allow = AllowList(["https://data.example.org"])
    assert not allow.allows(url)
    with pytest.raises((ForbiddenSourceError, InvalidReferenceError)):
        allow.check(url)


def test_allow_list_of_https_prefixes() -> None:
    from h5sidecar.errors import ForbiddenSourceError
    from h5sidecar.sources._allow import AllowList

    allow = AllowList(["https://data.example.org/DAAC/ATL03/", "s3://bucket/dir"])
    assert allow.allows("https://data.example.org/DAAC/ATL03/x.h5")
    assert allow.allows("HTTPS://DATA.example.org:443/DAAC/ATL03/2019/x.h5")
    for url in ("https://data.example.org/DAAC/ATL03x/x.h5",  # a sibling, not a child
                "http://data.example.org/DAAC/ATL03/x.h5",  # another scheme
                "https://data.example.org:8443/DAAC/ATL03/x.h5",  # another port
                "https://evil.example.org/DAAC/ATL03/x.h5",
                "https://data.example.org.evil.org/DAAC/ATL03/x.h5",
                "file:///etc/passwd", "/etc/passwd", "s3://bucket/dir2/x.h5"):  # fmt: skip
        assert not allow.allows(url), url
    with pytest.raises(ForbiddenSourceError, match="allowed source prefixes"):
        allow.check("https://evil.example.org/x.h5")
    assert AllowList(["https://data.example.org"]).allows("https://data.example.org/any/x.h5")


def test_refused_netrc_login_names_the_login_host(earthdata: Archive, no_env_auth: None,
                                                   small_h5: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    netrc = tmp_path / "netrc"
    netrc.write_text("machine localhost login alice password not-the-password\n")
    monkeypatch.setenv("NETRC", str(netrc))
    url = earthdata.add(_granule(tmp_path, small_h5))
    with pytest.raises(SourceAuthError) as info:
        index_granule(url)
    message = str(info.value)
    assert f"localhost:{earthdata.login_port}" in message and ".netrc logins for" in message
    assert "not-the-password" not in message and PASSWORD not in message
    assert earthdata.seen("login", "/login")  # the basic auth did go to the login host


def test_plain_fsspec_reads_the_https_references(earthdata: Archive, no_env_auth: None,
                                                 small_h5: Path, tmp_path: Path) -> None:  # fmt: skip
    """The sidecar stays kerchunk-compatible: fsspec's HTTP file system reads its https URLs."""
    from h5sidecar.references import to_kerchunk
    from tests.indexer._compare import assert_values_equal, h5_read, open_plain

    path = _granule(tmp_path, small_h5)
    url = earthdata.add(path)
    refs = index_granule(url, storage_options={"token": earthdata.token})
    headers = {"Authorization": f"Bearer {earthdata.token}"}
    group = open_plain(to_kerchunk(refs), "http", {"headers": headers})
    with h5py.File(path) as h5:
        for rel in refs.arrays:
            assert_values_equal(group[rel][...], h5_read(h5[rel]), h5[rel], rel)


def test_an_aws_session_token_is_never_a_bearer_token() -> None:
    """One options dict for an S3 sidecar and web sources: its ``token`` beside ``key`` and
    ``secret`` is the AWS session token, which no web host may receive."""
    from h5sidecar.credentials._http_auth import HttpAuth

    auth = HttpAuth({"key": "AKIA", "secret": "s", "token": "aws-session"}, env={"NETRC": "/x"})
    assert auth.headers_for("https://data.example.org/x.h5", "https://data.example.org") == {}
    auth = HttpAuth({"key": "AKIA", "secret": "s", "token": "aws-session"},
                    env={"NETRC": "/x", "EARTHDATA_TOKEN": "edl"})  # fmt: skip
    assert auth.headers_for("https://d.org/x.h5", "https://d.org") == {"Authorization": "Bearer edl"}


def test_redirects_that_are_refused(no_env_auth: None) -> None:
    from h5sidecar.errors import SourceReadError
    from h5sidecar.sources.web._http_client import HttpClient

    client = HttpClient()
    src = "https://data.example.org/x.h5"
    with pytest.raises(SourceReadError, match="downgrade"):
        client._next_hop(src, src, "http://cdn.example.org/x.h5")
    with pytest.raises(SourceReadError, match="only http"):
        client._next_hop(src, src, "file:///etc/passwd")
    assert client._next_hop(src, src, "/signed/x.h5?sig=1") == "https://data.example.org/signed/x.h5?sig=1"


def test_a_redirect_loop_is_an_error(no_env_auth: None) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from h5sidecar.errors import SourceReadError
    from h5sidecar.sources.web._http_client import MAX_REDIRECTS, HttpClient

    hits = []

    class Loop(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            hits.append(self.headers.get("Range"))
            self.send_response(302)
            self.send_header("Location", "/again")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Loop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/x.h5"
        with pytest.raises(SourceReadError, match="redirect loop"):
            HttpClient().get_range(url, 10, 20)
    finally:
        server.shutdown()
        server.server_close()
    assert len(hits) == MAX_REDIRECTS + 1 and set(hits) == {"bytes=10-19"}
