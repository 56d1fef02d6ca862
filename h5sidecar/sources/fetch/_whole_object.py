"""One small object read whole (a DMR++ document beside its granule), with its identity, and a
few ranges of an object read once (a chunk checked).

Object stores answer a whole read in one GET, whose response carries the identity; a web
source costs a one-byte probe (its identity) and one ranged GET; a local file one ``fstat`` and
one read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import obstore

from h5sidecar.errors import SourceNotFoundError, SourceReadError
from h5sidecar.references import SourceInfo
from h5sidecar.sources._source_identity import identity_from_meta, identity_from_stat
from h5sidecar.sources.fetch._ranged import open_regular
from h5sidecar.sources.stores._store_cache import resolve_store
from h5sidecar.sources.stores._store_errors import STORE_ERRORS, translate_store_error

__all__ = ["read_object", "read_ranges"]


def _too_large(url: str, size: int, max_bytes: int) -> SourceReadError:
    return SourceReadError(
        f"{url} is {size} bytes, more than the {max_bytes} bytes allowed for a document read "
        "whole; is it the right object?",
        url=url,
    )


def read_object(
    url: str, storage_options: Mapping[str, Any] | None = None, *, max_bytes: int = 256 * 2**20
) -> tuple[bytes, SourceInfo]:
    """The bytes of a whole object and its identity.

    Raises
    ------
    SourceNotFoundError
        The object does not exist.
    SourceReadError
        It cannot be read, or is larger than ``max_bytes``.
    """
    store, loc = resolve_store(url, storage_options)
    if loc.kind == "local":
        try:
            fd = open_regular(loc.url)
        except FileNotFoundError as exc:
            raise SourceNotFoundError(f"{loc.url} does not exist; check the path") from exc
        try:
            ident = identity_from_stat(loc.url, os.fstat(fd))
            if ident.size > max_bytes:
                raise _too_large(loc.url, ident.size, max_bytes)
            return os.pread(fd, ident.size, 0), ident
        finally:
            os.close(fd)
    if loc.kind == "http":
        from h5sidecar.sources.web._http_store import http_identity

        ident = http_identity(loc.url, storage_options)
        if ident.size > max_bytes:
            raise _too_large(loc.url, ident.size, max_bytes)
        return store.read_range(0, ident.size), ident  # type: ignore[union-attr]
    try:
        result = obstore.get(store, loc.path)
        ident = identity_from_meta(loc.url, result.meta)
        if ident.size > max_bytes:
            raise _too_large(loc.url, ident.size, max_bytes)
        return bytes(result.bytes()), ident
    except STORE_ERRORS as exc:
        raise translate_store_error(exc, loc.url, "GET") from exc


def read_ranges(
    url: str, ranges: list[tuple[int, int]], storage_options: Mapping[str, Any] | None = None
) -> list[bytes]:
    """The bytes of a few ``(offset, length)`` ranges of an object (one request each, or one
    ``get_ranges`` on object stores): checks of a few chunks, not bulk reads.

    Raises
    ------
    SourceNotFoundError, SourceReadError
        The object cannot be read, or is shorter than a range.
    """
    store, loc = resolve_store(url, storage_options)
    if loc.kind == "local":
        fd = open_regular(loc.url)
        try:
            out = [os.pread(fd, n, o) for o, n in ranges]
        finally:
            os.close(fd)
    elif loc.kind == "http":
        out = [store.read_range(o, n) for o, n in ranges]  # type: ignore[union-attr]
    else:
        try:
            got = obstore.get_ranges(
                store, loc.path, starts=[o for o, _ in ranges], lengths=[n for _, n in ranges]
            )
        except STORE_ERRORS as exc:
            raise translate_store_error(exc, loc.url, "GET") from exc
        out = [bytes(b) for b in got]
    for (o, n), data in zip(ranges, out, strict=True):
        if len(data) != n:
            raise SourceReadError(f"{loc.url}: {len(data)} bytes at {o}, expected {n}", url=loc.url)
    return out
