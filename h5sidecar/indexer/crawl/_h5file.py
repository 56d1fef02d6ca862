"""Open a granule for h5py.

The granule is read through :func:`h5sidecar.indexer.crawl._source_file.open_source` (few, large,
concurrent metadata requests; identity taken from the first response).  h5py opens the file
object it yields (byte ranges of it and of its companion files are read with
:class:`h5sidecar.sources.fetch._ranged.RangeReader`); a file HDF5 refuses is reported as :class:`~h5sidecar.errors.NotHDF5Error`,
and an HDF5 error escaping the per-variable handling while the open granule is indexed (the
group tree or the file's own structures are unreadable) as
:class:`~h5sidecar.errors.CorruptFileError`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import h5py

from h5sidecar.errors import CorruptFileError, NotHDF5Error
from h5sidecar.indexer._failures import (
    H5PY_ERRORS,
    describe_h5_error,
    raised_by_h5py,
    reraise_io_failure,
)
from h5sidecar.indexer.crawl._source_file import open_source
from h5sidecar.references import SourceInfo
from h5sidecar.settings import IndexSettings

__all__ = ["OpenGranule", "open_granule"]

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


#: HDF5's page buffer for files written with paged aggregation (HDF5 ignores it for the
#: others).  Metadata of such files is gathered in pages, and with the buffer HDF5 reads a
#: whole page on its first miss instead of each object header, heap block and B-tree node on
#: its own: an ATL03-like paged granule (1 MiB pages) took ~6,600 reads through the file
#: object without it and ~30 with it, and over S3 ~70 requests one after another instead of a
#: few.  The buffer only holds pages HDF5 read; this is its upper bound.
PAGE_BUFFER_BYTES = 64 << 20


def _open_h5(fileobj: Any) -> h5py.File:
    """``h5py.File`` over ``fileobj`` with the page buffer; without it when HDF5 refuses the
    buffer (a paged file whose page is larger than :data:`PAGE_BUFFER_BYTES`)."""
    try:
        return h5py.File(fileobj, "r", page_buf_size=PAGE_BUFFER_BYTES)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        fileobj.seek(0)
        return h5py.File(fileobj, "r")


#: Held while a granule is open for indexing (re-entrant: a granule may open another file).
_ONE_GRANULE_AT_A_TIME = threading.RLock()


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
    # one granule at a time per process: HDF5 reading through h5py's file-object driver is not
    # thread-safe (under a thread pool HDF5 failed on random variables, "no VOL object wrap
    # context", which would have left them out of an "ok" sidecar).  Processes, the default
    # executor, and Dask worker processes index in parallel.
    with _ONE_GRANULE_AT_A_TIME, open_source(url, storage_options=storage_options,
                                             settings=settings) as fileobj:
        identity = fileobj.identity
        try:
            h5 = _open_h5(fileobj)
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
