"""Refreshing S3 credential providers: a user's callable and an Earthdata-style endpoint.

:class:`RefreshingCredentials` keeps the keys a callable returns until shortly before they
expire; :class:`EndpointCredentials` gets them from a credentials endpoint with a bearer token.
Both serve obstore (the ``credential_provider`` protocol) and s3fs (:meth:`current`).  Secrets
stay in memory: no ``repr`` shows them and an :class:`EndpointCredentials` pickles without them.
The order in which credentials are looked for is in :mod:`h5sidecar.credentials._s3_chain`.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from h5sidecar.errors import CredentialsError

__all__ = [
    "EndpointCredentials",
    "RefreshingCredentials",
    "S3Credentials",
    "as_credentials",
    "as_provider",
]


class S3Credentials(NamedTuple):
    """One set of S3 credentials; ``expiry`` (timezone-aware) is None for keys that never expire."""

    key: str
    secret: str
    token: str | None = None
    expiry: datetime | None = None

    def __repr__(self) -> str:
        return f"S3Credentials(key={self.key!r}, secret=<redacted>, expiry={self.expiry})"


def as_credentials(value: Any) -> S3Credentials:
    """:class:`S3Credentials` from what a provider returned: a ``(key, secret, token, expiry)``
    tuple, obstore's dict (``access_key_id``...) or the JSON of an Earthdata-style endpoint
    (``accessKeyId``, ``secretAccessKey``, ``sessionToken``, ``expiration``)."""
    if isinstance(value, Mapping):
        pick = {k.lower().replace("_", ""): v for k, v in value.items()}
        key = pick.get("accesskeyid") or pick.get("key")
        secret = pick.get("secretaccesskey") or pick.get("secret")
        token = pick.get("sessiontoken") or pick.get("token")
        expiry = pick.get("expiration") or pick.get("expiresat") or pick.get("expiry")
    else:
        key, secret, token, expiry = (*tuple(value), None, None)[:4]
    if not (key and secret):
        raise CredentialsError(
            "the credential provider returned no access key and secret: it must return "
            "(key, secret, token, expiry) or a mapping with accessKeyId/secretAccessKey"
        )
    return S3Credentials(str(key), str(secret), token or None, _as_datetime(expiry))


def _as_datetime(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        when = value
    elif isinstance(value, (int, float)):
        when = datetime.fromtimestamp(value, UTC)
    else:  # "2026-11-24 17:00:00+00:00", "2026-11-24T17:00:00Z"
        when = datetime.fromisoformat(str(value))  # 3.11 reads "Z"
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # AWS and Earthdata expiries are UTC
    return when


class RefreshingCredentials:
    """Credentials from a callable, kept until shortly before they expire, then fetched again.

    Both readers use it: obstore calls it (the ``credential_provider`` protocol: a dict with
    ``expires_at``), s3fs gets :meth:`current`.  Thread-safe; one fetch at a time.

    Parameters
    ----------
    fetch : callable
        Returns ``(key, secret, token, expiry)`` (see :func:`as_credentials` for other forms).
    refresh_margin : float
        Fetch again this many seconds before the expiry (at most a quarter of the lifetime of
        short-lived keys, so keys valid for seconds are not fetched on every request).
    """

    def __init__(self, fetch: Callable[[], Any], *, refresh_margin: float = 300.0) -> None:
        self._fetch = fetch
        self._margin = float(refresh_margin)
        self._lock = threading.Lock()
        self._current: S3Credentials | None = None
        self._refresh_at = 0.0
        #: How many times ``fetch`` was called (tests and logs read it).
        self.fetches = 0

    def current(self) -> S3Credentials:
        """Valid credentials, fetched again when the held ones are about to expire."""
        with self._lock:
            if self._current is None or time.time() >= self._refresh_at:
                self._current = self._fetch_once()
                self._refresh_at = self._next_refresh(self._current)
            return self._current

    def _fetch_once(self) -> S3Credentials:
        self.fetches += 1
        try:
            return as_credentials(self._fetch())
        except CredentialsError:
            raise
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise CredentialsError(
                f"the S3 credential provider {self!r} failed: {exc}; check the provider (its "
                "URL, token or login)"
            ) from exc

    def _next_refresh(self, creds: S3Credentials) -> float:
        if creds.expiry is None:
            return float("inf")
        expires = creds.expiry.timestamp()
        lifetime = max(0.0, expires - time.time())
        return expires - min(self._margin, lifetime / 4)

    def __call__(self) -> dict[str, Any]:
        """The obstore ``credential_provider`` protocol."""
        c = self.current()
        # obstore keeps the keys until ``expires_at``: hand it our refresh time, not the expiry
        at = None if self._refresh_at == float("inf") else datetime.fromtimestamp(
            self._refresh_at, UTC)  # fmt: skip
        return {"access_key_id": c.key, "secret_access_key": c.secret, "token": c.token,
                "expires_at": at}  # fmt: skip

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self._fetch, '__name__', 'provider')})"

    def __reduce__(self) -> Any:
        raise TypeError(
            "refusing to pickle an S3 credential provider (it may hold secrets): give each "
            "process its own provider, or use EndpointCredentials, which pickles without them"
        )


class EndpointCredentials(RefreshingCredentials):
    """Temporary S3 credentials from an Earthdata-style endpoint (a DAAC's ``s3credentials``).

    ``GET url`` with ``Authorization: Bearer TOKEN`` answers JSON ``{"accessKeyId",
    "secretAccessKey", "sessionToken", "expiration"}``; the keys are fetched again
    ``refresh_margin`` seconds before they expire, so long runs outlive them.

    Parameters
    ----------
    url : str
        The credentials endpoint (``https://data.lpdaac.earthdatacloud.nasa.gov/s3credentials``).
    token : str, optional
        The bearer token.  Not pickled: a copy in another process reads ``token_env``.
    token_env : str
        Environment variable holding the token when ``token`` is not given (default
        ``EARTHDATA_TOKEN``).  With neither, the request goes without a token (an endpoint that
        authenticates otherwise).
    timeout : float
        Seconds to wait for the endpoint.
    refresh_margin : float
        See :class:`RefreshingCredentials`.

    Examples
    --------
    >>> creds = EndpointCredentials("https://data.daac.example/s3credentials")  # doctest: +SKIP
    >>> xr.open_dataset("s3://my-sidecars/G.h5.parq", engine="h5sidecar",
    ...                 storage_options={"credential_provider": creds})  # doctest: +SKIP
    """

    #: Kept when storage options are scrubbed for pickling: the copy holds no token or keys.
    pickles_without_secrets = True

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_env: str = "EARTHDATA_TOKEN",
        timeout: float = 30.0,
        refresh_margin: float = 300.0,
    ) -> None:
        super().__init__(self._get, refresh_margin=refresh_margin)
        self.url, self.token_env, self.timeout = url, token_env, float(timeout)
        self._token = token

    def _get(self) -> Any:
        token = self._token or os.environ.get(self.token_env)
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            what = "no token was sent: set " + self.token_env if not token else (
                f"check the token (from {'the token argument' if self._token else self.token_env})")  # fmt: skip
            raise CredentialsError(
                f"the credentials endpoint {self.url} answered HTTP {exc.code}; {what}"
            ) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise CredentialsError(
                f"could not get S3 credentials from {self.url}: {exc}; check the URL and network"
            ) from exc

    def __repr__(self) -> str:
        return f"EndpointCredentials({self.url!r}, token_env={self.token_env!r})"

    def __reduce__(self) -> Any:
        # no token, no keys: the copy fetches its own with the token of its environment
        return (_endpoint, (self.url, self.token_env, self.timeout, self._margin))


def _endpoint(url: str, token_env: str, timeout: float, margin: float) -> EndpointCredentials:
    return EndpointCredentials(url, token_env=token_env, timeout=timeout, refresh_margin=margin)


#: One wrapper per user callable, so every store and filesystem built from the same options
#: shares one cache of credentials (and one count of fetches).
_WRAPPED: weakref.WeakKeyDictionary[Any, RefreshingCredentials] = weakref.WeakKeyDictionary()


def as_provider(provider: Any) -> RefreshingCredentials:
    """A :class:`RefreshingCredentials` for a ``credential_provider`` option (itself when it
    already is one)."""
    if isinstance(provider, RefreshingCredentials):
        return provider
    if not callable(provider):
        raise CredentialsError(
            f"storage option credential_provider must be a callable, got {type(provider).__name__}"
        )
    try:
        wrapped = _WRAPPED.get(provider)
    except TypeError:  # not weak-referenceable: wrap without sharing
        return RefreshingCredentials(provider)
    if wrapped is None:
        wrapped = _WRAPPED[provider] = RefreshingCredentials(provider)
    return wrapped
