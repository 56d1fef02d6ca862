"""Storage options without their secrets: what pickles and what cache keys keep of them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["scrub_credentials"]

#: Option names that carry secrets (matched as substrings, case-insensitively).
_SECRET_MARKERS = ("key", "secret", "token", "password", "credential", "session",
                   "authorization", "cookie")  # fmt: skip


def scrub_credentials(options: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of s3fs-style ``options`` without secrets (keys, tokens, passwords), recursively.

    What pickles (sidecar readers, fetchers, stores) and what keys caches keep of storage
    options: workers and caches never see credentials.  A credential provider that pickles
    without secrets (``pickles_without_secrets = True``, as ``EndpointCredentials``) is kept,
    so workers fetch their own keys with it.
    """
    out: dict[str, Any] = {}
    for k, v in options.items():
        if getattr(v, "pickles_without_secrets", False) is True:
            out[k] = v
            continue
        if any(m in str(k).lower() for m in _SECRET_MARKERS):
            continue
        out[k] = scrub_credentials(v) if isinstance(v, Mapping) else v
    return out
