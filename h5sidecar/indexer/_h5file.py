"""Open a granule for h5py, and read byte ranges of it (and of its companion files).

The granule is read through :func:`h5sidecar.indexer._source.open_source` (few, large,
concurrent metadata requests; identity taken from the first response).  h5py opens the file
object it yields; a file HDF5 refuses is reported as :class:`~h5sidecar.errors.NotHDF5Error`,
and an HDF5 error escaping the per-variable handling while the open granule is indexed (the
group tree or the file's own structures are unreadable) as
:class:`~h5sidecar.errors.CorruptFileError`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import obstore

from h5sidecar.errors import CorruptFileError, NotHDF5Error, SourceReadError
from h5sidecar.indexer._common import (
    H5PY_ERRORS,
    describe_h5_error,
    raised_by_h5py,
    reraise_io_failure,
)
from h5sidecar.indexer._source import open_regular, open_source
from h5sidecar.references import SourceInfo
from h5sidecar.settings import IndexSettings
from h5sidecar.sources._stores import (
    STORE_ERRORS,
    resolve_store,
    source_identity,
    translate_store_error,
)

__all__ = ["OpenGranule", "RangeReader", "open_granule"]

_DEFAULT_SETTINGS = IndexSettings()


@dataclass
class OpenGranule:
    """An open granule: the h5py file, the source's identity and the file object under it."""

    h5: h5py.File
    identity: SourceInfo
    fileobj: Any


def _not_hdf5(url: str, exc: BaseException) -> NotHDF5Error:
    # the source already refused objects without a signature or shorter than the superblock
    # says: what is left is a file HDF5 itself cannot make sense of
    return NotHDF5Error(
        f"{url} has an HDF5 signature but HDF5 cannot open it ({describe_h5_error(exc)}): it is "
        "truncated or corrupt; check it with h5dump -H or fetch it again"
    )


@contextlib.contextmanager
def open_granule(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    settings: IndexSettings = _DEFAULT_SETTINGS,
) -> Iterator[OpenGranule]:
    """Open ``url`` for indexing (see the module docstring).

    Raises
    ------
    NotHDF5Error
        The object is not HDF5, or is truncated or corrupt.
    CorruptFileError
        HDF5 failed on the file's structures while it was being indexed.
    SourceNotFoundError, SourceReadError
        The object cannot be read.
    GranuleLimitError, GranuleTimeoutError
        A per-granule bound was reached (see :class:`~h5sidecar.settings.IndexSettings`).
    """
    with open_source(url, storage_options=storage_options, settings=settings) as fileobj:
        identity = fileobj.identity
        try:
            h5 = h5py.File(fileobj, "r")
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            raise _not_hdf5(identity.url, exc) from exc
        try:
            yield OpenGranule(h5, identity, fileobj)
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            if not raised_by_h5py(exc):
                raise  # a bug of ours, not the file
            raise CorruptFileError(
                f"HDF5 failed on the structures of {identity.url} ({describe_h5_error(exc)}): "
                "the file is corrupt; check it with h5dump, or re-stage it from its origin"
            ) from exc
        finally:
            h5.close()


class RangeReader:
    """Reads byte ranges of the granule and of its companion files (external raw data, VDS
    sources), for inlining small chunks and for checksums.

    The granule's ranges go through its source object (``read_ranges``: coalesced, concurrent
    and pinned to the version being indexed on S3); companion files are read with ``pread``
    locally or obstore's ``get_ranges`` on S3.
    """

    def __init__(
        self, granule: OpenGranule, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self._granule = granule
        self._options = dict(storage_options or {})
        self._fds: dict[str, int] = {}

    def read_many(self, url: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of ``(offset, length)`` ranges of ``url`` (short reads raise)."""
        if not ranges:
            return []
        if url == self._granule.identity.url:
            out = [bytes(b) for b in self._granule.fileobj.read_ranges(list(ranges))]
        else:
            out = self._companion(url, ranges)
        for (offset, length), data in zip(ranges, out, strict=True):
            if len(data) != length:
                raise SourceReadError(
                    f"{url}: expected {length} bytes at offset {offset}, got {len(data)}; the "
                    "object is shorter than its references say (changed or truncated): index "
                    "it again",
                    url=url,
                )
        return out

    def read(self, url: str, offset: int, length: int) -> bytes:
        """``length`` bytes of ``url`` at ``offset``."""
        return self.read_many(url, [(offset, length)])[0]

    def _companion(self, url: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        store, location = resolve_store(url, self._options)
        if location.kind == "local":
            if url not in self._fds:
                self._fds[url] = open_regular(location.url)  # never a FIFO that blocks
            return [os.pread(self._fds[url], length, offset) for offset, length in ranges]
        try:
            got = obstore.get_ranges(
                store, location.path, starts=[o for o, _ in ranges], lengths=[n for _, n in ranges]
            )
        except STORE_ERRORS as exc:
            raise translate_store_error(exc, url, "GET") from exc
        return [bytes(b) for b in got]

    def identity(self, url: str) -> dict[str, Any]:
        """``{"size": ...}`` of a companion file (raises SourceNotFoundError when absent)."""
        return source_identity(url, self._options).to_dict()

    def close(self) -> None:
        """Close the companion files opened so far."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
