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

The providers themselves (:class:`RefreshingCredentials`, :class:`EndpointCredentials`) live in
:mod:`h5sidecar.credentials._providers`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from h5sidecar.credentials._providers import (
    EndpointCredentials,
    RefreshingCredentials,
    S3Credentials,
    as_provider,
)
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
