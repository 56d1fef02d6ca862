"""Map a source URL (+ s3fs-style storage options) to an obstore store and a path in it.

URLs are parsed by :func:`h5sidecar.sources.stores._urls.parse_url` (re-exported here, with
:class:`SourceLocation` and :func:`normalize_url`):

* ``s3://bucket/key`` (and ``s3a://``) -> :class:`obstore.store.S3Store` for the bucket;
* ``/abs/path``, ``relative/path``, ``~/path`` and ``file:///abs/path`` -> one shared
  :class:`obstore.store.LocalStore` rooted at ``/``.

Options follow s3fs, so the same ``storage_options`` a user passes to fsspec work here:
``key``, ``secret``, ``token``, ``endpoint_url`` (also inside ``client_kwargs``),
``client_kwargs.region_name``, ``anon`` and ``requester_pays``.  Missing values come from the
standard variables ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` and ``AWS_REGION`` / ``AWS_DEFAULT_REGION``.
Explicit credentials replace the environment's as a whole (as in botocore): an explicit ``key``
is never signed with a session token taken from the environment.  ``profile`` (or
``AWS_PROFILE``) selects a profile of the shared files, ``credential_provider`` a refreshing
provider; with no keys given, botocore's standard chain is resolved here (profiles, web identity,
container, instance metadata) and handed to obstore, so reads see what s3fs listings see, and a
missing credential is a :class:`~h5sidecar.errors.CredentialsError` (see
:mod:`h5sidecar.credentials._s3_chain` for the order).

Stores are cached (bounded, least recently used) by bucket and a digest of the resolved options,
so repeated calls share one HTTP connection pool.  Credentials never appear in a ``repr`` and
refuse to be pickled: ship ``storage_options`` to a worker and resolve there.

obstore's own ``from_url`` builds a store from a URL too, but takes obstore's option names, not
the s3fs-style ``storage_options`` users already pass to fsspec, resolves no botocore credential
chain and caches nothing: this module does those three and then builds obstore's stores.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from obstore.store import LocalStore, S3Store

from h5sidecar.credentials import (
    RefreshingCredentials,
    as_provider,
    chain_provider,
    profile_settings,
)
from h5sidecar.errors import SourceReadError, UnsupportedFeatureError
from h5sidecar.sources.stores._urls import SourceLocation, normalize_url, parse_url

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = [
    "MAX_CACHED_STORES",
    "SourceLocation",
    "cached_store_count",
    "clear_store_cache",
    "normalize_url",
    "parse_url",
    "resolve_store",
]

#: How many distinct (bucket, options) stores are kept alive at once.
MAX_CACHED_STORES = 32

# s3fs options that only tune s3fs itself (caching, listings, event loop): accepted and ignored so
# that one storage_options dict serves both fsspec and this module.
_IGNORED_OPTIONS = frozenset(
    {
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "default_block_size",
        "default_fill_cache",
        "default_cache_type",
        "cache_regions",
        "asynchronous",
        "loop",
        "version_aware",
        "use_ssl",
        "config_kwargs",
        "max_concurrency",
        "fixed_upload_size",
    }
)
_MAPPED_OPTIONS = frozenset(
    {"key", "secret", "token", "endpoint_url", "client_kwargs", "anon", "requester_pays",
     "profile", "credential_provider"}
)
_CLIENT_KWARGS = frozenset({"region_name", "endpoint_url"})


# -- credentials ---------------------------------------------------------------------------------
class _StaticCredentials:
    """An obstore credential provider holding explicit credentials, hidden from repr and pickle.

    Passing credentials through a provider (rather than the store config) keeps them out of
    ``S3Store.config`` and stops obstore from merging in a session token from the environment.
    """

    __slots__ = ("_creds",)

    def __init__(self, key: str, secret: str, token: str | None) -> None:
        self._creds = {
            "access_key_id": key,
            "secret_access_key": secret,
            "token": token,
            "expires_at": None,
        }

    def __call__(self) -> dict[str, Any]:
        return dict(self._creds)

    def __repr__(self) -> str:
        return "_StaticCredentials(<redacted>)"

    def __reduce__(self) -> Any:
        raise TypeError(
            "refusing to pickle a store holding S3 credentials; send the storage_options (or set "
            "AWS_* variables) to the other process and call h5sidecar resolve_store() there"
        )


@dataclass(frozen=True, slots=True)
class _S3Options:
    """Resolved S3 options; ``secret`` and ``token`` excluded from repr."""

    endpoint: str | None
    region: str | None
    anon: bool
    requester_pays: bool
    key: str | None
    secret: str | None = None
    token: str | None = None
    #: refreshing credentials (a provider, a profile or botocore's chain) when no keys are given
    provider: RefreshingCredentials | None = None

    def __repr__(self) -> str:
        return (
            f"_S3Options(endpoint={self.endpoint!r}, region={self.region!r}, anon={self.anon}, "
            f"requester_pays={self.requester_pays}, key={'<set>' if self.key else None}, "
            f"provider={self.provider!r})"
        )

    def digest(self) -> str:
        """A fingerprint of every field (credentials included) for the cache key."""
        fields: list[object] = [self.endpoint, self.region, self.anon, self.requester_pays]
        fields += [self.key, self.secret, self.token, id(self.provider) if self.provider else None]
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


def _resolve_s3_options(
    storage_options: Mapping[str, Any] | None, env: Mapping[str, str], *, chain: bool = False
) -> _S3Options:
    """Endpoint, region and credentials for an S3 store.  ``chain``: when no keys are given,
    resolve botocore's chain (profiles, web identity, container, instance metadata) from the
    process environment; without it obstore's own default chain is left to decide."""
    opts = dict(storage_options or {})
    unknown = set(opts) - _MAPPED_OPTIONS - _IGNORED_OPTIONS
    client_kwargs = dict(opts.get("client_kwargs") or {})
    unknown |= {f"client_kwargs.{k}" for k in set(client_kwargs) - _CLIENT_KWARGS}
    if unknown:
        raise UnsupportedFeatureError(
            f"storage option(s) {sorted(unknown)} are not supported by h5sidecar's S3 reader; "
            f"use {sorted(_MAPPED_OPTIONS)} (client_kwargs: {sorted(_CLIENT_KWARGS)}) or the "
            "AWS_* environment variables"
        )
    endpoint = (
        opts.get("endpoint_url")
        or client_kwargs.get("endpoint_url")
        or env.get("AWS_ENDPOINT_URL_S3")
        or env.get("AWS_ENDPOINT_URL")
        or None
    )
    region = (
        client_kwargs.get("region_name") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    )
    profile = opts.get("profile") or None
    if chain and not (endpoint and region):  # the profile's config, as s3fs/botocore read it
        p_endpoint, p_region = profile_settings(profile)
        endpoint, region = endpoint or p_endpoint, region or p_region
    anon = bool(opts.get("anon", False))
    if anon:
        return _S3Options(endpoint, region or None, True, bool(opts.get("requester_pays")), None)
    provider = None
    if opts.get("key") or opts.get("secret"):
        if not (opts.get("key") and opts.get("secret")):
            raise SourceReadError("storage_options must give both 'key' and 'secret' (or neither)")
        key, secret, token = opts["key"], opts["secret"], opts.get("token")
    elif opts.get("credential_provider") is not None:
        key = secret = token = None
        provider = as_provider(opts["credential_provider"])
    elif profile and chain:  # an explicit profile wins over keys in the environment (botocore)
        key = secret = token = None
        provider = chain_provider(profile)
    else:
        key = env.get("AWS_ACCESS_KEY_ID")
        secret = env.get("AWS_SECRET_ACCESS_KEY")
        token = opts.get("token") or env.get("AWS_SESSION_TOKEN")
        if not (key and secret):
            key = secret = token = None
            # botocore's chain, as s3fs resolves it (obstore's own chain knows no profiles)
            provider = chain_provider(profile) if chain else None
    return _S3Options(
        endpoint=endpoint,
        region=region or None,
        anon=False,
        requester_pays=bool(opts.get("requester_pays", False)),
        key=key or None,
        secret=secret or None,
        token=token or None,
        provider=provider,
    )


# -- the store cache -----------------------------------------------------------------------------
_LOCAL_STORE: LocalStore | None = None
_S3_STORES: OrderedDict[tuple[str, str], S3Store] = OrderedDict()
_LOCK = threading.Lock()


def _local_store() -> LocalStore:
    global _LOCAL_STORE
    with _LOCK:
        if _LOCAL_STORE is None:
            _LOCAL_STORE = LocalStore()
        return _LOCAL_STORE


def _build_s3_store(
    bucket: str, o: _S3Options, retry_config: Mapping[str, Any] | None = None
) -> S3Store:
    config: dict[str, Any] = {}
    client_options: dict[str, Any] = {}
    if o.endpoint:
        config["endpoint"] = o.endpoint
        # obstore speaks https only unless told otherwise; a local/test endpoint is plain http
        client_options["allow_http"] = o.endpoint.lower().startswith("http://")
    if o.region:
        config["region"] = o.region
    if o.anon:
        config["skip_signature"] = True
    if o.requester_pays:
        config["request_payer"] = True
    provider: Any = _StaticCredentials(o.key, o.secret, o.token) if o.key and o.secret else None
    return S3Store(
        bucket,
        config=config,  # type: ignore[arg-type]
        client_options=client_options or None,  # type: ignore[arg-type]
        credential_provider=provider or o.provider,  # type: ignore[arg-type]
        retry_config=None if retry_config is None else dict(retry_config),  # type: ignore[arg-type]
    )


def resolve_store(
    url: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    retry_config: Mapping[str, Any] | None = None,
) -> tuple[ObjectStore, SourceLocation]:
    """The (cached) obstore store holding ``url`` and the parsed location.

    Parameters
    ----------
    url : str or path-like
        Source URL (see :func:`parse_url`).
    storage_options : mapping, optional
        s3fs-style options (see the module docstring).  Ignored for local files.
    env : mapping, optional
        Environment to read ``AWS_*`` variables from (default ``os.environ``, and then, with no
        keys in the options or the environment, botocore's chain: ``AWS_PROFILE`` and the shared
        files, web identity, container and instance credentials).
    retry_config : mapping, optional
        obstore ``RetryConfig`` for the S3 client (default: obstore's own retries).  The fetch
        executor passes ``{"max_retries": 0}`` because it retries, counts and backs off itself.

    Returns
    -------
    store : obstore store
        Use ``location.path`` as the path inside it.
    location : SourceLocation

    Raises
    ------
    UnsupportedFeatureError
        Unknown scheme or storage option.
    CredentialsError
        No credentials anywhere (and not ``anon``), an unknown profile, or a failed provider.

    Examples
    --------
    >>> store, loc = resolve_store("s3://bucket/ATL03.h5", {"anon": True})  # doctest: +SKIP
    >>> obstore.get_range(store, loc.path, start=0, length=8)  # doctest: +SKIP
    """
    location = parse_url(url)
    if location.kind == "local":
        return _local_store(), location
    if location.kind == "http":  # web sources: redirects and Earthdata auth (sources/web/_http_client.py)
        from h5sidecar.sources.web._http_store import HttpStore

        return HttpStore(location.url, storage_options), location  # type: ignore[return-value]
    assert location.bucket is not None
    options = _resolve_s3_options(
        storage_options, os.environ if env is None else env, chain=env is None
    )
    retry_key = json.dumps(retry_config, sort_keys=True, default=str)  # timedeltas as text
    cache_key = (location.bucket, options.digest() + retry_key)
    with _LOCK:
        store = _S3_STORES.get(cache_key)
        if store is not None:
            _S3_STORES.move_to_end(cache_key)
            return store, location
    store = _build_s3_store(location.bucket, options, retry_config)
    with _LOCK:
        store = _S3_STORES.setdefault(cache_key, store)
        _S3_STORES.move_to_end(cache_key)
        while len(_S3_STORES) > MAX_CACHED_STORES:
            _S3_STORES.popitem(last=False)
    return store, location


def clear_store_cache() -> None:
    """Forget every cached store (e.g. after rotating credentials)."""
    with _LOCK:
        _S3_STORES.clear()


def cached_store_count() -> int:
    """Number of S3 stores currently cached (at most :data:`MAX_CACHED_STORES`)."""
    with _LOCK:
        return len(_S3_STORES)
