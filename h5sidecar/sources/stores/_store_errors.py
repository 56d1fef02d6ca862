"""What a failed obstore request means: its HTTP status, its kind, and the error callers see.

obstore reports a failed request as one of its exceptions (or a builtin such as
``FileNotFoundError``) whose message carries the HTTP status and the server's words; the
readers classify it here (:func:`http_status`, :func:`range_mismatch`,
:func:`provider_failure`) to decide on a retry, and turn it into the h5sidecar error that says
what happened and what to check (:func:`translate_store_error`).
"""

from __future__ import annotations

import re

from obstore import exceptions as obstore_errors

from h5sidecar.errors import (
    CredentialsError,
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
)

__all__ = [
    "STORE_ERRORS",
    "http_status",
    "provider_failure",
    "range_mismatch",
    "translate_store_error",
]

#: What obstore raises for a failed request: its own tree plus builtins (FileNotFoundError, ...).
STORE_ERRORS: tuple[type[BaseException], ...] = (obstore_errors.BaseError, OSError, ValueError)

#: obstore puts the HTTP status of a failed request in its message as "status code: NNN".
_HTTP_STATUS = re.compile(r"status code: (\d{3})\b")


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed obstore request, or None for transport errors.

    Parsed from the message's ``status code: NNN`` only: a bare number search would also match
    ports and byte counts in the URL or the retry report.
    """
    match = _HTTP_STATUS.search(str(exc))
    return int(match.group(1)) if match else None


#: How object_store (under obstore) reports an answer holding another range than asked for
#: (``GetResultError``: a 200 to a ranged GET, no or a malformed ``Content-Range``, another
#: range): it checks ``Content-Range`` itself, so these are the server's, not the network's.
_RANGE_MISMATCH = re.compile(
    r"non-partial response when range requested|Content-Range header not present|"
    r"CONTENT_RANGE|Requested \d+\.\.\d+, got \d+\.\.\d+"
)


def range_mismatch(exc: BaseException) -> bool:
    """Whether a failed obstore GET was answered with another byte range than it asked for
    (a 200, or a 206 whose ``Content-Range`` names other bytes): not worth a retry."""
    return _RANGE_MISMATCH.search(str(exc)) is not None


def provider_failure(exc: BaseException, url: str) -> CredentialsError | None:
    """The :class:`~h5sidecar.errors.CredentialsError` of a request that failed because its
    credential provider raised (obstore reports it as unauthenticated), else None.  Not worth a
    retry, and not "access denied": the message is the provider's own."""
    text = str(exc)
    if "credential provider" not in text or "CredentialsError" not in text:
        return None
    why = text.split("CredentialsError:", 1)[1].strip().splitlines()[0][:400]
    return CredentialsError(f"reading {url}: {why}")


def translate_store_error(exc: BaseException, url: str, action: str) -> Exception:
    """Map an obstore exception to the h5sidecar error a caller should see.

    ``PreconditionError`` (the object changed under an ``If-Match``) becomes
    :class:`~h5sidecar.errors.StaleReferenceError`, a missing object
    :class:`~h5sidecar.errors.SourceNotFoundError`; everything else a
    :class:`~h5sidecar.errors.SourceReadError` naming the URL and what to check (wrong region,
    credentials, endpoint).  Regions are not discovered: give them in the options or the
    environment.
    """
    oe = obstore_errors
    failed_provider = provider_failure(exc, url)
    if failed_provider is not None:
        return failed_provider
    if isinstance(exc, oe.PreconditionError):
        return StaleReferenceError(
            f"{url} changed while it was being read ({action} failed its If-Match); the object "
            "was replaced: index it again once writers are done",
            url=url,
        )
    first_line = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        return SourceNotFoundError(f"{action} {url}: no such object; check the URL")
    if "incorrectly configured region" in first_line:  # S3's bare 301 for another region
        hint = (
            "the bucket lives in another region than the one configured; pass "
            "storage_options={'client_kwargs': {'region_name': REGION}} or set AWS_REGION"
        )
    elif range_mismatch(exc):
        hint = (
            "the endpoint (or a proxy in front of it) answered another byte range than the one "
            "asked for; refusing bytes that may not be the ones asked for: check the endpoint"
        )
    elif isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError, PermissionError)):
        hint = "access denied; check credentials (key/secret/token or AWS_* variables) and anon"
    else:
        hint = "the store failed after its retries; check the endpoint and network, then retry"
    return SourceReadError(f"{action} {url}: {hint} ({first_line})", url=url)
