"""S3 credentials: the standard AWS chain (through botocore), profiles and refreshing providers.

One resolution order serves every S3 request h5sidecar makes, listings and sidecars (s3fs) as
well as source reads (obstore), so they can never disagree:

1. ``anon=True`` in ``storage_options``: unsigned requests;
2. ``key`` + ``secret`` (+ ``token``) in ``storage_options``;
3. ``credential_provider`` in ``storage_options``: a callable returning :class:`S3Credentials`
   (or an :class:`EndpointCredentials`), called again before the credentials expire;
4. ``profile`` in ``storage_options``: that profile of the shared files (environment keys are
   then ignored, as botocore does);
5. ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``);
6. botocore's chain: ``AWS_PROFILE`` (or ``default``) in ``AWS_SHARED_CREDENTIALS_FILE`` /
   ``AWS_CONFIG_FILE`` (assume-role, SSO and ``credential_process`` included), web identity
   (``AWS_WEB_IDENTITY_TOKEN_FILE``), container credentials (``AWS_CONTAINER_CREDENTIALS_*``)
   and instance metadata.

When nothing yields credentials the caller gets a :class:`~h5sidecar.errors.CredentialsError`
naming what was tried and what to do, not botocore's ``NoCredentialsError`` at the first request.

Providers hold secrets only in memory: they refuse to appear in a ``repr``, and an
:class:`EndpointCredentials` pickles its URL and the *name* of the variable holding its token,
never the token or the keys.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from h5sidecar.errors import CredentialsError

__all__ = [
    "EndpointCredentials",
    "RefreshingCredentials",
    "S3Credentials",
    "as_provider",
    "chain_provider",
    "fsspec_options",
    "profile_settings",
]

#: Variables that change what botocore's chain finds: part of the cache key of resolved chains.
_CHAIN_VARS = (
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_EC2_METADATA_DISABLED",
)  # fmt: skip


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


# -- botocore's chain -----------------------------------------------------------------------------
_SESSIONS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CHAINS: OrderedDict[tuple[Any, ...], RefreshingCredentials] = OrderedDict()
_LOCK = threading.Lock()
_MAX_CACHED = 16


def _env_key(profile: str | None) -> tuple[Any, ...]:
    return (profile, *(os.environ.get(k) for k in _CHAIN_VARS))


def _session(profile: str | None) -> Any:
    import botocore.session

    key = _env_key(profile)
    with _LOCK:
        if key in _SESSIONS:
            return _SESSIONS[key]
    session = botocore.session.Session(profile=profile)
    with _LOCK:
        _SESSIONS[key] = session
        while len(_SESSIONS) > _MAX_CACHED:
            _SESSIONS.popitem(last=False)
    return session


def _profile_name(profile: str | None) -> str:
    return profile or os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or (
        "default")  # fmt: skip


def _translate(exc: Exception, profile: str | None) -> CredentialsError:
    from botocore.exceptions import ProfileNotFound

    if isinstance(exc, ProfileNotFound):
        name = _profile_name(profile)
        try:
            import botocore.session

            known = sorted(botocore.session.Session().available_profiles)
        except Exception:  # noqa: BLE001 - only the list of names in the message is lost
            known = []
        files = (os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials") + ", "
                 + os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"))  # fmt: skip
        return CredentialsError(
            f"AWS profile {name!r} does not exist in {files} (profiles there: {known or 'none'}); "
            "fix AWS_PROFILE / --storage-option profile=NAME, or create it with "
            f"`aws configure --profile {name}`"
        )
    return CredentialsError(f"resolving AWS credentials (profile {_profile_name(profile)!r}) "
                            f"failed: {exc}")  # fmt: skip


def _no_credentials(profile: str | None) -> CredentialsError:
    imds = "disabled by AWS_EC2_METADATA_DISABLED" if os.environ.get(
        "AWS_EC2_METADATA_DISABLED", "").lower() == "true" else "no answer"  # fmt: skip
    return CredentialsError(
        "no AWS credentials found for S3. Tried: storage_options key/secret and "
        "credential_provider; AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; profile "
        f"{_profile_name(profile)!r} in "
        f"{os.environ.get('AWS_SHARED_CREDENTIALS_FILE', '~/.aws/credentials')} and "
        f"{os.environ.get('AWS_CONFIG_FILE', '~/.aws/config')}; web identity "
        "(AWS_WEB_IDENTITY_TOKEN_FILE); container credentials (AWS_CONTAINER_CREDENTIALS_*); "
        f"instance metadata ({imds}). Set AWS_PROFILE (or --storage-option profile=NAME) or "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or pass --storage-option anon=true "
        "(storage_options={'anon': True}) for a public bucket"
    )


def chain_provider(profile: str | None = None) -> RefreshingCredentials:
    """Credentials from botocore's standard chain (for ``profile``, else ``AWS_PROFILE``).

    Raises
    ------
    CredentialsError
        Nothing in the chain has credentials, or the profile does not exist.
    """
    from botocore.exceptions import BotoCoreError

    key = _env_key(profile)
    with _LOCK:
        if key in _CHAINS:
            return _CHAINS[key]
    try:
        found = _session(profile).get_credentials()
    except BotoCoreError as exc:
        raise _translate(exc, profile) from exc
    if found is None:
        raise _no_credentials(profile)
    provider = RefreshingCredentials(_frozen(found, profile), refresh_margin=60.0)
    with _LOCK:
        _CHAINS[key] = provider
        while len(_CHAINS) > _MAX_CACHED:
            _CHAINS.popitem(last=False)
    return provider


def _frozen(found: Any, profile: str | None) -> Callable[[], S3Credentials]:
    from botocore.credentials import RefreshableCredentials
    from botocore.exceptions import BotoCoreError

    refreshable = isinstance(found, RefreshableCredentials)

    def chain() -> S3Credentials:
        try:
            f = found.get_frozen_credentials()  # botocore refreshes role/container/IMDS keys
        except BotoCoreError as exc:
            raise _translate(exc, profile) from exc
        # ask again every few minutes: botocore decides whether that means a refresh
        expiry = datetime.now(UTC) + timedelta(minutes=5) if refreshable else None
        return S3Credentials(f.access_key, f.secret_key, f.token, expiry)

    chain.__name__ = f"aws-chain:{found.method}"
    return chain


def profile_settings(profile: str | None) -> tuple[str | None, str | None]:
    """``(endpoint_url, region)`` of the active profile's config (the ``services`` section's
    ``s3`` endpoint first), as botocore would use them; ``(None, None)`` when unset."""
    from botocore.exceptions import BotoCoreError

    session = _session(profile)
    try:
        config = session.get_scoped_config()
        services = session.full_config.get("services", {}).get(config.get("services", ""), {})
    except BotoCoreError as exc:
        raise _translate(exc, profile) from exc
    endpoint = (services.get("s3") or {}).get("endpoint_url") or config.get("endpoint_url")
    return endpoint or None, config.get("region") or None


# -- s3fs -----------------------------------------------------------------------------------------
def fsspec_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options to give fsspec/s3fs for ``url``, resolved the way the readers resolve them.

    A ``credential_provider`` becomes its current ``key``/``secret``/``token`` (s3fs has no
    provider hook; callers build their filesystem per operation, so each gets fresh keys).
    With no credentials given, botocore's chain is consulted once up front so that a missing
    credential or profile is a :class:`~h5sidecar.errors.CredentialsError` here, not a
    ``NoCredentialsError`` traceback at the first request.
    """
    opts = dict(storage_options or {})
    provider = opts.pop("credential_provider", None)
    if not str(url).startswith(("s3://", "s3a://")):
        return opts
    if opts.get("anon") or opts.get("key") or opts.get("secret") or opts.get("session"):
        return opts
    if provider is not None:
        c = as_provider(provider).current()
        opts.update(key=c.key, secret=c.secret, token=c.token)
        return opts
    if opts.get("profile") or not (
        os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")
    ):
        chain_provider(opts.get("profile"))
    return opts
