"""Credentials for web sources (NASA Earthdata and other HTTPS archives), and who gets them.

What is read from where (the README's table, "Sources"):

* ``storage_options["headers"]`` -- extra request headers (e.g. ``{"Authorization": "Bearer
  ..."}``), sent to the source's own origin (scheme, host and port of the URL in the sidecar);
* ``storage_options["token"]``, else the ``EARTHDATA_TOKEN`` variable -- a bearer token, sent as
  ``Authorization: Bearer ...`` to the source's origin (unless ``headers`` sets Authorization);
* ``.netrc`` (``storage_options["netrc"]``, else the ``NETRC`` variable, else ``~/.netrc``) --
  basic auth, sent only to a host named by a ``machine`` line (never the ``default`` entry), on
  any hop of a redirect chain: that is Earthdata's login flow (data URL -> 302 to the login host
  -> basic auth there -> 302 back with a cookie or to a signed URL).

Credentials never leave over plain ``http://`` except to a loopback host (127.0.0.1, ::1,
localhost), never go to another origin than the one they are for (a redirect to a signed S3 URL
gets neither the token nor the headers), and appear in no ``repr``, pickle or message.
"""

from __future__ import annotations

import base64
import ipaddress
import netrc
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from h5sidecar.errors import UnsupportedFeatureError

__all__ = ["HttpAuth", "HTTP_OPTIONS", "origin_of", "secure_for_credentials"]

#: The storage options the web reader understands (others are refused by name).  ``anon`` sends
#: no credentials at all; ``client_kwargs`` / ``block_size`` are fsspec HTTP options accepted so
#: one options dict serves fsspec's HTTP file system and this reader alike.
HTTP_OPTIONS = frozenset({"headers", "token", "netrc", "anon", "client_kwargs", "block_size"})


#: s3fs options a batch's one options dict may carry for an S3 destination: not for web sources,
#: and not typos either.
_S3_ONLY = frozenset({"key", "secret", "endpoint_url", "requester_pays", "profile",
                      "credential_provider",
                      "config_kwargs", "use_ssl", "skip_instance_cache", "use_listings_cache",
                      "default_block_size", "version_aware"})  # fmt: skip


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-cased (the unit credentials are bound to)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    netloc = f"[{host}]" if ":" in host else host
    default = {"https": 443, "http": 80}.get(parts.scheme.lower())
    if parts.port is not None and parts.port != default:
        netloc = f"{netloc}:{parts.port}"
    return f"{parts.scheme.lower()}://{netloc}"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_for_credentials(url: str) -> bool:
    """Whether credentials may be sent to ``url``: ``https://``, or ``http://`` to loopback."""
    parts = urlsplit(url)
    return parts.scheme.lower() == "https" or _loopback((parts.hostname or "").lower())


class HttpAuth:
    """Which headers a request to a URL carries (see the module docstring).

    Parameters
    ----------
    storage_options : mapping, optional
        ``headers``, ``token``, ``netrc`` (path, or ``False`` for none), ``anon``.
    env : mapping, optional
        Environment for ``EARTHDATA_TOKEN``, ``NETRC`` and ``HOME`` (default ``os.environ``).
    """

    __slots__ = ("_basic", "_headers", "netrc_path", "sources_token")

    def __init__(
        self, storage_options: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None
    ) -> None:
        opts = dict(storage_options or {})
        env = os.environ if env is None else env
        unknown = set(opts) - HTTP_OPTIONS - _S3_ONLY
        if unknown:
            raise UnsupportedFeatureError(
                f"storage option(s) {sorted(unknown)} are not supported for https:// sources; "
                f"use {sorted(HTTP_OPTIONS)} or the EARTHDATA_TOKEN / NETRC variables"
            )
        client = dict(opts.get("client_kwargs") or {})
        headers = {str(k): str(v) for k, v in {**(client.get("headers") or {}),
                                               **(opts.get("headers") or {})}.items()}  # fmt: skip
        anon = bool(opts.get("anon", False))
        # beside an S3 key and secret, "token" is their AWS session token (s3fs's meaning, one
        # options dict for an S3 sidecar and web sources): never a bearer token for a web host
        s3_token = bool(opts.get("key") or opts.get("secret"))
        given = None if s3_token else opts.get("token")
        token = None if anon else (given or env.get("EARTHDATA_TOKEN") or None)
        if token and not any(k.lower() == "authorization" for k in headers):
            headers["Authorization"] = f"Bearer {token}"
        self._headers: dict[str, str] = {} if anon else headers
        #: whether a bearer token or an Authorization header is configured (no value kept here)
        self.sources_token = any(k.lower() == "authorization" for k in self._headers)
        self.netrc_path: str | None = None if anon else _netrc_path(opts.get("netrc"), env)
        self._basic: dict[str, str] = _read_netrc(self.netrc_path)

    def headers_for(self, url: str, source_origin: str) -> dict[str, str]:
        """Headers for a request to ``url`` in the redirect chain of a source at ``source_origin``.

        The configured headers (and bearer token) go only to ``source_origin``; basic auth from
        ``.netrc`` only to a host it names; nothing secret over plain HTTP to a remote host.
        """
        if not secure_for_credentials(url):
            return {}
        out: dict[str, str] = {}
        if origin_of(url) == source_origin:
            out.update(self._headers)
        host = (urlsplit(url).hostname or "").lower()
        basic = self._basic.get(host)
        if basic is not None and not any(k.lower() == "authorization" for k in out):
            out["Authorization"] = basic
        return out

    @property
    def netrc_hosts(self) -> frozenset[str]:
        """The hosts the ``.netrc`` in use names (lower-case): redirects may lead there."""
        return frozenset(self._basic)

    @property
    def has_credentials(self) -> bool:
        """Whether any token, Authorization header or ``.netrc`` login is configured."""
        return self.sources_token or bool(self._basic)

    def describe(self) -> str:
        """What is configured, without any secret (for error messages)."""
        bits = []
        if self.sources_token:
            bits.append("a bearer token / Authorization header")
        if self._basic:
            bits.append(f".netrc logins for {sorted(self._basic)}")
        return " and ".join(bits) if bits else "no credentials"

    def __repr__(self) -> str:
        return f"HttpAuth({self.describe()})"

    def __reduce__(self) -> Any:
        raise TypeError(
            "refusing to pickle web credentials; send the storage_options (or set "
            "EARTHDATA_TOKEN / NETRC) to the other process and resolve them there"
        )


def _netrc_path(option: Any, env: Mapping[str, str]) -> str | None:
    if option is False:
        return None
    if option:
        return os.path.expanduser(str(option))
    if env.get("NETRC"):
        return os.path.expanduser(env["NETRC"])
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".netrc")


def _read_netrc(path: str | None) -> dict[str, str]:
    """host -> ``Basic ...`` header value for every ``machine`` line of the file (no default)."""
    if path is None or not os.path.isfile(path):
        return {}
    try:
        parsed = netrc.netrc(path)
    except (netrc.NetrcParseError, OSError) as exc:
        # the parse error quotes the file's line, which may hold a password: name the file only
        raise UnsupportedFeatureError(
            f"cannot read the .netrc file {path} (line {getattr(exc, 'lineno', '?')}): fix "
            "its syntax ('machine HOST login USER password PASS') or point NETRC elsewhere"
        ) from None
    out = {}
    for host, (login, _account, password) in parsed.hosts.items():
        if host == "default" or not login:
            continue
        raw = f"{login}:{password or ''}".encode()
        out[host.lower()] = "Basic " + base64.b64encode(raw).decode("ascii")
    return out
