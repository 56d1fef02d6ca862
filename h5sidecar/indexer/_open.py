"""Open a granule for h5py, and read byte ranges of it (and of its companion files).

The granule is read through :func:`h5sidecar.indexer._source.open_source` (few, large,
concurrent metadata requests; identity taken from the first response).  h5py opens the file
object it yields; a file HDF5 refuses is reported as :class:`~h5sidecar.errors.NotHDF5Error`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import h5py

from h5sidecar._stores import parse_url, source_identity
from h5sidecar.errors import NotHDF5Error, SourceReadError
from h5sidecar.indexer._common import H5PY_ERRORS, describe_h5_error, reraise_io_failure
from h5sidecar.references import SourceInfo
from h5sidecar.settings import IndexSettings

__all__ = ["OpenGranule", "RangeReader", "open_granule"]

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_DEFAULT_SETTINGS = IndexSettings()


@dataclass
class OpenGranule:
    """An open granule: the h5py file, the source's identity and the file object under it."""

    h5: h5py.File
    identity: SourceInfo
    fileobj: Any


def _source_opener() -> Any:
    try:
        from h5sidecar.indexer._source import open_source
    except ImportError:  # the tuned reader is optional: fall back to plain file objects
        return _plain_source
    return open_source


class _PlainSource:
    """A file object with ``.identity`` (fallback when the tuned reader is unavailable)."""

    def __init__(self, fh: Any, identity: SourceInfo) -> None:
        self._fh = fh
        self.identity = identity

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


@contextlib.contextmanager
def _plain_source(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    settings: IndexSettings = _DEFAULT_SETTINGS,
) -> Iterator[Any]:
    location = parse_url(url)
    identity = source_identity(location.url, storage_options)
    if location.kind == "local":
        with open(location.url, "rb") as fh:
            yield _PlainSource(fh, identity)
        return
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **dict(storage_options or {}))
    with fs.open(location.url, "rb", block_size=settings.metadata_block_size) as fh:
        yield _PlainSource(fh, identity)


def _not_hdf5(url: str, fileobj: Any, exc: BaseException) -> NotHDF5Error:
    head = b""
    with contextlib.suppress(OSError, ValueError):
        fileobj.seek(0)
        head = fileobj.read(8)
    if head[:3] == b"CDF":
        what = "a netCDF-3 (classic) file, not HDF5: only netCDF-4/HDF5 files can be indexed"
    elif not head:
        what = "empty"
    elif _HDF5_SIGNATURE not in head:
        what = "not an HDF5 file (no HDF5 signature at the start)"
    else:
        what = "an HDF5 file HDF5 cannot open: truncated or corrupt"
    return NotHDF5Error(
        f"{url} is {what} ({describe_h5_error(exc)}); check the object (e.g. h5dump -H) or "
        "fetch it again"
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
    SourceNotFoundError, SourceReadError
        The object cannot be read.
    """
    opener = _source_opener()
    with opener(url, storage_options=storage_options, settings=settings) as fileobj:
        identity = fileobj.identity
        try:
            h5 = h5py.File(fileobj, "r")
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            raise _not_hdf5(identity.url, fileobj, exc) from exc
        try:
            yield OpenGranule(h5, identity, fileobj)
        finally:
            h5.close()


class RangeReader:
    """Reads byte ranges of the granule (through its open file object) and of companion files.

    Companion files (external raw data) are opened on first use and closed by :meth:`close`.
    """

    def __init__(
        self, granule: OpenGranule, storage_options: Mapping[str, Any] | None = None
    ) -> None:
        self._granule = granule
        self._options = dict(storage_options or {})
        self._files: dict[str, Any] = {}
        self._stack = contextlib.ExitStack()

    def _file(self, url: str) -> Any:
        if url == self._granule.identity.url:
            return self._granule.fileobj
        if url not in self._files:
            location = parse_url(url)
            if location.kind == "local":
                fh = open(location.url, "rb")  # noqa: SIM115 - closed by the exit stack
                self._files[url] = self._stack.enter_context(fh)
            else:
                import fsspec

                fs = fsspec.filesystem("s3", skip_instance_cache=True, **self._options)
                self._files[url] = self._stack.enter_context(fs.open(location.url, "rb"))
        return self._files[url]

    def read(self, url: str, offset: int, length: int) -> bytes:
        """``length`` bytes of ``url`` at ``offset`` (short reads raise SourceReadError)."""
        fh = self._file(url)
        fh.seek(offset)
        data = fh.read(length)
        if len(data) != length:
            raise SourceReadError(
                f"{url}: expected {length} bytes at offset {offset}, got {len(data)}; the object "
                "is shorter than its references say (changed or truncated): index it again",
                url=url,
            )
        return bytes(data)

    def identity(self, url: str) -> dict[str, Any]:
        """``{"size": ...}`` of a companion file (raises SourceNotFoundError when absent)."""
        return source_identity(url, self._options).to_dict()

    def close(self) -> None:
        """Close the companion files opened so far."""
        self._stack.close()
