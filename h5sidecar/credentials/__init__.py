"""Credentials: who signs a request, with what, and what never leaves with it.

* :mod:`h5sidecar.credentials._s3_chain` -- the one S3 resolution order (``anon``, keys,
  ``credential_provider``, ``profile``, environment, botocore's chain) that s3fs listings and
  obstore reads share (:func:`fsspec_options`, :func:`chain_provider`, :func:`profile_settings`);
* :mod:`h5sidecar.credentials._providers` -- refreshing S3 credential providers
  (:class:`S3Credentials`, :class:`RefreshingCredentials`, :class:`EndpointCredentials`);
* :mod:`h5sidecar.credentials._http_auth` -- web-source auth (bearer token, headers,
  ``.netrc``) bound to its origin (:class:`HttpAuth`);
* :mod:`h5sidecar.credentials._scrub` -- storage options without secrets, for pickles and
  cache keys (:func:`scrub_credentials`).

Imports nothing of h5sidecar but :mod:`h5sidecar.errors`, so references, sources and every
reader above them may use it.
"""

from h5sidecar.credentials._http_auth import (
    HTTP_OPTIONS,
    HttpAuth,
    origin_of,
    secure_for_credentials,
)
from h5sidecar.credentials._providers import (
    EndpointCredentials,
    RefreshingCredentials,
    S3Credentials,
    as_credentials,
    as_provider,
)
from h5sidecar.credentials._s3_chain import chain_provider, fsspec_options, profile_settings
from h5sidecar.credentials._scrub import scrub_credentials

__all__ = [
    "HTTP_OPTIONS",
    "EndpointCredentials",
    "HttpAuth",
    "RefreshingCredentials",
    "S3Credentials",
    "as_credentials",
    "as_provider",
    "chain_provider",
    "fsspec_options",
    "origin_of",
    "profile_settings",
    "scrub_credentials",
    "secure_for_credentials",
]
