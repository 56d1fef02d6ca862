"""The one URL parser of the package: where a source lives, and the normalised spelling of a URL.

Accepted sources:

* ``s3://bucket/key`` and ``s3a://bucket/key`` (any case) -> ``s3://bucket/key``;
* ``/abs/path``, ``relative/path``, ``~/path`` and ``file:///abs/path`` (or
  ``file://localhost/abs/path``, percent-escapes decoded) -> an absolute local path without a
  scheme, ``..`` collapsed;
* ``https://host/path`` (and ``http://``) -> scheme and host lower-cased, the default port
  dropped, path and query kept as given (:mod:`h5sidecar.sources.web._http_client` reads them).

This is how sidecars record sources, how the store resolver finds them and how batch listings
name granules.  :func:`parse_url` parses one object's URL into a :class:`SourceLocation`;
:func:`normalize_url` spells any URL, prefix, glob or destination the same way without
requiring it to name one object.

A URL read from a sidecar is untrusted input (a planted reference may name ``/etc/passwd`` or a
path that climbs out of an allowed folder).  ``parse_url(url, untrusted=True)`` is the stricter
parse the allow-list compares: control characters, relative paths and other schemes are refused,
and local paths are resolved where they really point (symlinks and ``..``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import unquote, urlsplit

from h5sidecar.errors import (
    ForbiddenSourceError,
    InvalidReferenceError,
    SourceReadError,
    UnsupportedFeatureError,
)

__all__ = ["HTTP_SCHEMES", "S3_SCHEMES", "SourceLocation", "normalize_url", "parse_url"]

#: Schemes that name S3 objects; every one is spelled ``s3://`` once normalised.
S3_SCHEMES = ("s3", "s3a")

#: Schemes of web servers (NASA Earthdata and other HTTPS archives).
HTTP_SCHEMES = ("https", "http")

#: NUL and other control characters never appear in a real object key or path.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """Where a source lives, parsed and normalised (no store, no credentials).

    Attributes
    ----------
    url : str
        Normalised URL: ``s3://bucket/key``, ``https://host/path`` or an absolute local path
        without a scheme.  This is also the form allow-list prefixes are compared in.
    kind : "s3", "http" or "local"
    bucket : str or None
        The S3 bucket; for web sources the origin (``https://host[:port]``); ``None`` for local
        files.
    path : str
        The object's path inside its store: the S3 key, the path (and query) on the web server
        without its leading ``/``, or the absolute local path without its leading ``/`` (the
        shared :class:`~obstore.store.LocalStore` is rooted at ``/``).
    """

    url: str
    kind: Literal["s3", "local", "http"]
    bucket: str | None
    path: str

    @property
    def local_path(self) -> str:
        """The absolute local path (only for ``kind == "local"``)."""
        if self.kind != "local":
            raise ValueError(f"{self.url} is not a local file")
        return self.url


def parse_url(url: str | os.PathLike[str], *, untrusted: bool = False) -> SourceLocation:
    """Parse and normalise the URL of one source object.

    Parameters
    ----------
    url : str or path-like
        ``s3://bucket/key``, ``s3a://bucket/key``, ``file:///abs/path`` or a local path
        (absolute, relative to the working directory, or starting with ``~``).
    untrusted : bool
        The URL comes from a sidecar, not from the user: only absolute local paths,
        ``file:///`` URLs and S3 URLs are accepted, control characters are refused, and local
        paths are resolved (symlinks and ``..``) so they compare where they really point.
        Parses are cached.

    Returns
    -------
    SourceLocation

    Raises
    ------
    UnsupportedFeatureError
        For any other scheme (``gs://``, ``ftp://``, ...) or a ``file://`` URL on another host.
    SourceReadError
        For an S3 URL that names no object (no bucket, no key, a key ending in ``/``, or ``.``,
        ``..`` or empty key segments, which object stores cannot address).
    ForbiddenSourceError
        With ``untrusted=True``, instead of the two above, and for relative paths.
    InvalidReferenceError
        With ``untrusted=True``, for URLs holding NUL or other control characters (a corrupt or
        planted sidecar).
    """
    if untrusted:
        return _parse_untrusted(os.fspath(url))
    text = os.fspath(url)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return _local(os.path.abspath(os.path.expanduser(text)))
    scheme = scheme.lower()
    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise UnsupportedFeatureError(
                f"{text}: file:// URLs on another host ({parts.netloc}) are not supported; "
                "mount the share and pass its local path"
            )
        return _local(os.path.abspath(unquote(parts.path)))
    if scheme in S3_SCHEMES:
        bucket, key = _bucket_key(rest)
        if _unaddressable(bucket, key):
            raise SourceReadError(
                f"{text} does not name an object; expected s3://bucket/path/to/file.h5", url=text
            )
        return SourceLocation(url=f"s3://{bucket}/{key}", kind="s3", bucket=bucket, path=key)
    if scheme in HTTP_SCHEMES:
        return _http(text, SourceReadError)
    raise UnsupportedFeatureError(
        f"{text}: the {scheme}:// scheme is not supported; use s3://bucket/key, "
        "https://host/path or a local path"
    )


@lru_cache(maxsize=4096)
def _parse_untrusted(url: str) -> SourceLocation:
    if _CONTROL.search(url):
        raise InvalidReferenceError(
            f"source URL {url!r} contains a NUL or control character; the sidecar is corrupt: "
            "re-index the granule"
        )
    if url.startswith("/"):
        return _local(os.path.realpath(url))
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if sep and scheme == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ForbiddenSourceError(
                f"refusing {url!r}: file URLs must name an absolute local path (file:///...)"
            )
        return _local(os.path.realpath(unquote(parts.path)))
    if sep and scheme in HTTP_SCHEMES:
        return _http(url, ForbiddenSourceError, untrusted=True)
    if not sep or scheme not in S3_SCHEMES:
        raise ForbiddenSourceError(
            f"refusing {url!r}: sources are read only from absolute local paths, s3:// and "
            "https:// URLs; re-index the granule from such a location"
        )
    bucket, key = _bucket_key(rest)
    if not bucket or not key:
        raise ForbiddenSourceError(f"refusing {url!r}: expected s3://bucket/key")
    if _unaddressable(bucket, key):
        raise ForbiddenSourceError(
            f"refusing {url!r}: '.', '..' and empty key segments are not allowed"
        )
    return SourceLocation(url=f"s3://{bucket}/{key}", kind="s3", bucket=bucket, path=key)


#: Default ports, dropped from normalised URLs so ``https://h:443/x`` and ``https://h/x`` compare
#: equal.
_DEFAULT_PORTS = {"https": 443, "http": 80}


def _http(text: str, error: type[Exception], *, untrusted: bool = False) -> SourceLocation:
    """Parse an ``http(s)://`` URL: lower-case scheme and host, no default port, no fragment.

    Refused (``error``): no host, user info in the URL (credentials belong in the options or
    ``.netrc``, never in a URL a sidecar records), and, for untrusted URLs, backslashes and
    ``.``/``..`` path segments (also percent-encoded), which a server would resolve *after* the
    allow-list compared the prefix.
    """
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    host = (parts.hostname or "").lower()
    if not host or port == -1 or parts.username is not None or parts.password is not None:
        raise _refuse(error, text, "expected https://host[:port]/path with no user name or "
                      "password in it (give credentials as a token, headers or in ~/.netrc)")
    if untrusted and ("\\" in text or _has_dot_segment(parts.path)):
        raise _refuse(error, text, "'.', '..' and backslashes are not allowed in web paths")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    path = parts.path or "/"
    query = f"?{parts.query}" if parts.query else ""
    origin = f"{scheme}://{netloc}"
    return SourceLocation(url=f"{origin}{path}{query}", kind="http", bucket=origin,
                          path=path.lstrip("/") + query)  # fmt: skip


def _has_dot_segment(path: str) -> bool:
    return any(unquote(seg) in (".", "..") for seg in path.split("/"))


def _refuse(error: type[Exception], text: str, why: str) -> Exception:
    if error is SourceReadError:
        return SourceReadError(f"{text}: {why}", url=text)
    return error(f"refusing {text!r}: {why}")


def _local(absolute: str) -> SourceLocation:
    return SourceLocation(url=absolute, kind="local", bucket=None, path=absolute.lstrip("/"))


def _bucket_key(rest: str) -> tuple[str, str]:
    bucket, _, key = rest.partition("/")
    return bucket, key


def _unaddressable(bucket: str, key: str) -> bool:
    """Whether ``s3://bucket/key`` cannot name an object (object stores refuse ``.``, ``..`` and
    empty segments; a trailing ``/`` names a folder)."""
    return not bucket or not key or any(seg in ("", ".", "..") for seg in key.split("/"))


def normalize_url(url: str | os.PathLike[str]) -> str:
    """The normalised spelling of a source URL, prefix, glob or destination.

    Local paths (plain, ``~``, ``file://``) become absolute paths without a scheme (``..`` and a
    trailing ``/`` removed), ``s3a://`` becomes ``s3://``; the rest of an S3 URL is kept as given
    (a bucket, a prefix with its trailing ``/``, a glob); ``https://`` URLs are spelled as
    :func:`parse_url` spells them.  URLs of other schemes (fsspec
    destinations such as ``gs://`` or ``memory://``) are returned unchanged.  For the URL of one
    object this equals ``parse_url(url).url``.

    Raises
    ------
    UnsupportedFeatureError
        For a ``file://`` URL on another host.
    SourceReadError
        For an S3 URL with ``.`` or ``..`` key segments (no object store resolves them).
    """
    text = os.fspath(url)
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() == "file":
        return parse_url(text).url
    if scheme.lower() in S3_SCHEMES:
        if any(seg in (".", "..") for seg in rest.split("/")[1:]):
            raise SourceReadError(
                f"{text}: '.' and '..' segments cannot name S3 objects; spell the key out",
                url=text,
            )
        return f"s3://{rest}"
    if scheme.lower() in HTTP_SCHEMES:
        return parse_url(text).url
    return text
