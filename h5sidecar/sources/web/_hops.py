"""Which hosts a web source may redirect a request to: the allow-list, applied to every hop.

An allowed source must not be able to send the indexer or the gateway anywhere else: a
redirect to ``http://169.254.169.254/`` (a cloud's metadata service) or to a service inside
the network would be followed from the machine that reads, past the allow-list of source
prefixes, which only ever saw the first URL.  So the client follows redirects itself and asks
:meth:`RedirectPolicy.check` before each hop, *before* any connection to its target:

* a hop within the source's own origin (scheme, host and port) is followed: the allow-list
  admitted that origin;
* a hop to another host is followed only when the host is allowed: named by
  ``H5SIDECAR_REDIRECT_HOSTS`` (comma-separated ``host``, ``host:port``, ``*.domain`` for a
  domain's hosts, ``*`` for any host), or by a ``machine`` line of the ``.netrc`` in use (the
  login host of Earthdata's flow, which the user already trusts with a password);
* a host that is, or resolves to, an address that is not public (private, loopback,
  link-local, shared, reserved, multicast) is refused unless it is named exactly (not through a
  ``*``): a ``*`` admits the public internet, never the inside of the network.

Names are resolved with ``getaddrinfo`` (no connection); an IP literal is not resolved at all.
A host whose DNS answer changes between this check and the connection (DNS rebinding) is not
caught here: name such hosts exactly, or keep ``*`` out of the list.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from h5sidecar.credentials import origin_of
from h5sidecar.errors import SourceReadError

__all__ = ["EARTHDATA_REDIRECT_HOSTS", "REDIRECT_HOSTS_ENV", "RedirectPolicy"]

#: The variable listing the hosts redirects may lead to (besides the source's own origin).
REDIRECT_HOSTS_ENV = "H5SIDECAR_REDIRECT_HOSTS"

#: Where NASA Earthdata's download flow leads (its login host, then a signed URL on CloudFront
#: or S3): the redirect targets of a source on an Earthdata host while
#: ``H5SIDECAR_REDIRECT_HOSTS`` is unset, so an Earthdata granule reads without configuration.
#: Setting the variable (even to an empty string) replaces this list.  Wildcards admit public
#: addresses only, so none of these can lead inside the network.
EARTHDATA_REDIRECT_HOSTS = (
    "urs.earthdata.nasa.gov",
    "*.earthdata.nasa.gov",
    "*.earthdatacloud.nasa.gov",
    "*.cloudfront.net",
    "*.amazonaws.com",
)
#: The source hosts (suffixes) whose redirects get :data:`EARTHDATA_REDIRECT_HOSTS` by default.
_EARTHDATA_SOURCES = (".earthdata.nasa.gov", ".earthdatacloud.nasa.gov")

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class RedirectPolicy:
    """The hosts redirects may lead to (see the module docstring).

    Attributes
    ----------
    exact : frozenset of str
        Hosts (``host``) or host-and-port pairs (``host:port``) named exactly, lower-case.
    domains : tuple of str
        Suffixes of ``*.domain`` entries, with their leading dot (``.example.org``).
    any_public : bool
        ``*`` was given: any host whose addresses are all public.
    """

    exact: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()
    any_public: bool = False
    #: ``H5SIDECAR_REDIRECT_HOSTS`` was unset: Earthdata sources get
    #: :data:`EARTHDATA_REDIRECT_HOSTS` as well
    earthdata_default: bool = False

    @classmethod
    def from_entries(cls, entries: Iterable[str]) -> RedirectPolicy:
        """A policy from ``host``, ``host:port``, ``*.domain`` and ``*`` entries."""
        exact, domains, any_public = set(), [], False
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            if entry == "*":
                any_public = True
            elif entry.startswith("*."):
                domains.append(entry[1:])
            else:
                exact.add(entry)
        return cls(frozenset(exact), tuple(domains), any_public)

    @classmethod
    def from_env(cls, netrc_hosts: Iterable[str] = (),
                 env: Mapping[str, str] | None = None) -> RedirectPolicy:  # fmt: skip
        """The policy of ``H5SIDECAR_REDIRECT_HOSTS`` plus the ``.netrc`` machines."""
        env = os.environ if env is None else env
        value = env.get(REDIRECT_HOSTS_ENV)
        policy = cls.from_entries([*(value or "").split(","), *netrc_hosts])
        if value is None:
            policy = replace(policy, earthdata_default=True)
        return policy

    def describe(self) -> str:
        """The entries, for messages."""
        shown = sorted(self.exact) + [f"*{d}" for d in self.domains] + ["*"] * self.any_public
        return ", ".join(shown) or "none"

    def check(self, url: str, source_origin: str, nxt: str) -> None:
        """Refuse a redirect of source ``url`` (origin ``source_origin``) to ``nxt`` unless
        allowed; no connection is made to ``nxt`` (its name may be resolved).

        Raises
        ------
        SourceReadError
            The target's host is not allowed, or not public and not named exactly.
        """
        parts = urlsplit(nxt)
        if origin_of(nxt) == source_origin:
            return
        if self.earthdata_default and _on_earthdata(source_origin):
            extra = _EARTHDATA_POLICY
            merged = RedirectPolicy(self.exact | extra.exact, self.domains + extra.domains,
                                    self.any_public)  # fmt: skip
            return merged.check(url, source_origin, nxt)
        host = (parts.hostname or "").lower().rstrip(".")
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 0)
        named = host in self.exact or f"{_bracketed(host)}:{port}" in self.exact
        allowed = named or self.any_public or any(host.endswith(d) for d in self.domains)
        if not allowed:
            raise SourceReadError(
                f"GET {url} was redirected to {_bracketed(host)}:{port}, which is not an allowed "
                f"redirect target (allowed: {self.describe()}); refusing without connecting. If "
                f"that host is trusted, add it to {REDIRECT_HOSTS_ENV} (comma-separated host, "
                "host:port or *.domain)",
                url=url,
            )
        if named:
            return
        inside = _inside_addresses(url, host, port)
        if inside:
            raise SourceReadError(
                f"GET {url} was redirected to {_bracketed(host)}:{port}, which is the non-public "
                f"address {inside[0]} (private, loopback, link-local or reserved); refusing "
                f"without connecting. Only a host named exactly in {REDIRECT_HOSTS_ENV} may be "
                "inside the network",
                url=url,
            )


_EARTHDATA_POLICY = RedirectPolicy.from_entries(EARTHDATA_REDIRECT_HOSTS)


def _on_earthdata(origin: str) -> bool:
    host = (urlsplit(origin).hostname or "").lower().rstrip(".")
    return urlsplit(origin).scheme == "https" and host.endswith(_EARTHDATA_SOURCES)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 zone index is not an address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:169.254.169.254 is 169.254.169.254
    return ip.is_global and not ip.is_multicast


def _inside_addresses(url: str, host: str, port: int) -> list[str]:
    """The addresses of ``host`` that are not public (an IP literal is taken as it is)."""
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise SourceReadError(
                f"GET {url} was redirected to {host}, which does not resolve "
                f"({type(exc).__name__}); check the URL",
                url=url,
            ) from None
        addresses = [str(info[4][0]) for info in infos]
    return [a for a in addresses if not _public(a)]
