"""Redirects are contained: an allowed web source cannot send the reader to another host unless
that host is allowed too, nor inside the network unless that host is named exactly.

Only 127.0.0.x is ever connected to: the redirects to other addresses must be refused by the
hop check itself, before any connection, and a guard on urllib3's connect proves it.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar.errors import SourceReadError
from h5sidecar.indexer import index_granule
from h5sidecar.read import read_arrays
from h5sidecar.references import write_json
from h5sidecar.sources.web._hops import RedirectPolicy
from h5sidecar.sources.web._http_client import HttpClient
from tests.sources.ranges_server import RangesServer, ranges_server

pytestmark = pytest.mark.timeout(120)

#: Where a redirect must never lead without an exact entry: never connected to by these tests.
INSIDE = ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/",
          "http://10.0.0.1/x.h5", "http://[fd00::1]:8080/x.h5", "http://100.64.0.1/x.h5",
          "http://0.0.0.0/x.h5"]  # fmt: skip


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Hosts urllib3 connects to; any but 127.0.0.x (or localhost, which /etc/hosts resolves
    to it) fails the test before a packet leaves."""
    import urllib3.util.connection

    seen: list[str] = []
    real = urllib3.util.connection.create_connection

    def guarded(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        seen.append(address[0])
        loopback = address[0].startswith("127.0.0.") or address[0] == "localhost"
        assert loopback, f"a connection to {address[0]} was attempted"
        return real(address, *args, **kwargs)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", guarded)
    return seen


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.delenv("EARTHDATA_TOKEN", raising=False)
    monkeypatch.delenv("H5SIDECAR_REDIRECT_HOSTS", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    return monkeypatch


class Redirector:
    """A server on 127.0.0.1 that answers every GET with 302 to :attr:`location`."""

    def __init__(self) -> None:
        self.location = ""
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.hits += 1
                self.send_response(302)
                self.send_header("Location", outer.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/g.h5"


@pytest.fixture
def hop(tmp_path: Path) -> Iterator[tuple[Redirector, RangesServer]]:
    """A redirecting source and, on another port, the server holding the granule."""
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("lat", data=np.arange(-89, 8103, 2, dtype="<i4"))
    redirector = Redirector()
    threading.Thread(target=redirector.server.serve_forever, daemon=True).start()
    try:
        with ranges_server(path) as target:
            redirector.location = target.url
            yield redirector, target
    finally:
        redirector.server.shutdown()
        redirector.server.server_close()


def test_a_redirect_to_another_host_is_refused_by_default(hop, env, connects) -> None:  # type: ignore[no-untyped-def]
    source, target = hop
    with pytest.raises(SourceReadError, match="not an allowed redirect target") as err:
        HttpClient().get_range(source.url, 0, 8)
    assert "H5SIDECAR_REDIRECT_HOSTS" in str(err.value)
    assert target.ranges == [] and source.hits == 1
    with pytest.raises(SourceReadError, match="not an allowed redirect target"):
        index_granule(source.url)
    assert target.ranges == []


@pytest.mark.parametrize("entry", ["127.0.0.1:{port}", "127.0.0.1"])
def test_a_redirect_to_an_allowed_host_is_followed(hop, env, connects, tmp_path, entry) -> None:  # type: ignore[no-untyped-def]
    source, target = hop
    env.setenv("H5SIDECAR_REDIRECT_HOSTS", "cdn.example.org, " + entry.format(port=target.port))
    sidecar = tmp_path / "g.h5.json"
    write_json(index_granule(source.url), sidecar)
    got = read_arrays(sidecar, ["lat"])
    with h5py.File(target.path) as f:
        np.testing.assert_array_equal(got["lat"], f["lat"][()])
    assert target.ranges and set(connects) == {"127.0.0.1"}


def test_a_wildcard_never_admits_the_inside_of_the_network(hop, env, connects) -> None:  # type: ignore[no-untyped-def]
    source, target = hop
    env.setenv("H5SIDECAR_REDIRECT_HOSTS", "*")
    for location in [target.url, target.url.replace("127.0.0.1", "localhost"), *INSIDE]:
        source.location = location
        with pytest.raises(SourceReadError, match="non-public address") as err:
            HttpClient().get_range(source.url, 0, 8)
        assert "refusing without connecting" in str(err.value), location
    assert target.ranges == []
    assert set(connects) == {"127.0.0.1"} and len(connects) == source.hits


@pytest.mark.parametrize("location", INSIDE)
def test_metadata_and_private_addresses_are_refused_before_connecting(hop, env, connects,
                                                                      location: str) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    source, _ = hop
    source.location = location
    with pytest.raises(SourceReadError, match="not an allowed redirect target"):
        HttpClient().get_range(source.url, 0, 8)
    assert connects == ["127.0.0.1"]


def test_a_netrc_machine_is_an_allowed_target(hop, env, connects, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source, target = hop
    netrc = tmp_path / "netrc"
    netrc.write_text("machine localhost login u password p\n")
    netrc.chmod(0o600)
    env.setenv("NETRC", str(netrc))
    source.location = target.url.replace("127.0.0.1", "localhost")
    data = target.path.read_bytes()
    assert HttpClient().get_range(source.url, 4, 12).data == data[4:12]
    assert connects == ["127.0.0.1", "localhost"]


def test_policy_matching(monkeypatch: pytest.MonkeyPatch) -> None:
    # names resolve to a public address here, so no DNS query leaves the machine
    asked: list[str] = []

    def resolve(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        asked.append(host)
        address = "10.1.2.3" if host.startswith("inside.") else "192.0.32.10"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    src, origin = "https://data.example.org/x.h5", "https://data.example.org"
    policy = RedirectPolicy.from_entries(["*.cdn.example.net", "login.example.org:443",
                                          "inside.example.org"])  # fmt: skip
    policy.check(src, origin, "https://data.example.org/signed/x.h5")  # its own origin
    policy.check(src, origin, "https://a.cdn.example.net/x.h5?sig=1")
    policy.check(src, origin, "https://login.example.org/oauth")
    policy.check(src, origin, "http://inside.example.org/x.h5")  # named exactly: may be inside
    for refused in ("https://cdn.example.net/x.h5", "https://login.example.org:8443/oauth",
                    "https://data.example.org:8443/x.h5", "https://evil.example.com/"):
        with pytest.raises(SourceReadError, match="not an allowed"):
            policy.check(src, origin, refused)
    inside = RedirectPolicy.from_entries(["*.example.org"])
    with pytest.raises(SourceReadError, match=r"non-public address 10\.1\.2\.3"):
        inside.check(src, origin, "https://inside.example.org/x.h5")
    assert RedirectPolicy.from_env(["urs.example.gov"], env={}).describe() == "urs.example.gov"


def test_earthdata_sources_redirect_to_earthdata_hosts_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # Earthdata's flow (login host, then a signed CloudFront/S3 URL) works without configuration
    # while H5SIDECAR_REDIRECT_HOSTS is unset; other sources, and a set variable, do not get it.
    # Names resolve locally (no DNS query leaves the machine); an S3 name that resolves inside
    # the network is still refused, as any wildcard target is.
    def resolve(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        address = "169.254.169.254" if host.startswith("inside.") else "192.0.32.10"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    src = "https://data.lpdaac.earthdatacloud.nasa.gov/lp-prod/x.h5"
    origin = "https://data.lpdaac.earthdatacloud.nasa.gov"
    default = RedirectPolicy.from_env([], env={})
    for hop in ("https://urs.earthdata.nasa.gov/oauth/authorize?x=1",
                "https://d1.cloudfront.net/x.h5?Signature=s",
                "https://lp-prod.s3.us-west-2.amazonaws.com/x.h5?X-Amz-Signature=s"):
        default.check(src, origin, hop)
    with pytest.raises(SourceReadError, match=r"non-public address 169\.254\.169\.254"):
        default.check(src, origin, "https://inside.s3.amazonaws.com/x.h5")
    for refused in ("http://169.254.169.254/latest/meta-data/", "https://evil.example.com/"):
        with pytest.raises(SourceReadError, match="not an allowed"):
            default.check(src, origin, refused)
    # another source does not get Earthdata's hosts, nor does plain http
    with pytest.raises(SourceReadError, match="not an allowed"):
        default.check("https://data.example.org/x.h5", "https://data.example.org",
                      "https://d1.cloudfront.net/x.h5")
    with pytest.raises(SourceReadError, match="not an allowed"):
        default.check("http://data.earthdata.nasa.gov/x.h5", "http://data.earthdata.nasa.gov",
                      "https://d1.cloudfront.net/x.h5")
    # setting the variable, even to nothing, replaces the default
    with pytest.raises(SourceReadError, match="not an allowed"):
        RedirectPolicy.from_env([], env={"H5SIDECAR_REDIRECT_HOSTS": ""}).check(
            src, origin, "https://d1.cloudfront.net/x.h5")
