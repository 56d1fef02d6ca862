"""The exception tree of h5sidecar.

Every error raised on purpose by h5sidecar derives from :class:`H5SidecarError` *and* from the
builtin exception callers already catch (``OSError``, ``ValueError``, ...), so code written against
plain fsspec/zarr keeps working.  Messages say what happened and what to do next.

Each class carries an append-only ``kind`` code, used in run reports and mapped to HTTP status
codes by the gateway in one table (``HTTP_STATUS``).
"""

from __future__ import annotations

__all__ = [
    "HTTP_STATUS",
    "ChunkDecodeError",
    "CorruptFileError",
    "ForbiddenSourceError",
    "GranuleLimitError",
    "GranuleTimeoutError",
    "H5SidecarError",
    "IncompatibleGranulesError",
    "InvalidReferenceError",
    "InvalidRequestError",
    "NotHDF5Error",
    "NotIndexedError",
    "SourceNotFoundError",
    "SourceReadError",
    "StaleReferenceError",
    "UnsupportedFeatureError",
]


class H5SidecarError(Exception):
    """Base class of every error h5sidecar raises on purpose."""

    kind: str = "error"


class UnsupportedFeatureError(H5SidecarError, NotImplementedError):
    """An HDF5 feature (filter, datatype, layout, link) that cannot be expressed as Zarr references.

    The indexer raises it with ``on_unsupported="raise"`` and records it as a skipped variable
    with ``on_unsupported="skip"`` (the default of the batch workflow).
    """

    kind = "unsupported"


class InvalidReferenceError(H5SidecarError, ValueError):
    """A sidecar (reference file) is malformed, truncated or inconsistent."""

    kind = "invalid_reference"


class NotHDF5Error(H5SidecarError, ValueError):
    """The object is not an HDF5 file (no signature), or is truncated or corrupt."""

    kind = "not_hdf5"


class CorruptFileError(NotHDF5Error):
    """The object starts like HDF5 but its metadata is inconsistent: a length or address past
    the end of the object, a chunk index pointing outside it, structures HDF5 refuses."""

    kind = "corrupt"


class GranuleLimitError(H5SidecarError, RuntimeError):
    """Indexing one granule went past a per-granule bound (HDF5 read calls or bytes read, see
    ``IndexSettings.max_hdf5_reads`` / ``max_hdf5_read_bytes``): its metadata most likely loops
    (a corrupt file); raise the bound only for a file known to be sound."""

    kind = "limit_exceeded"


class GranuleTimeoutError(GranuleLimitError, TimeoutError):
    """Indexing one granule took longer than ``IndexSettings.max_granule_seconds``."""

    kind = "timeout"


class SourceReadError(H5SidecarError, OSError):
    """Reading bytes of a source object failed after retries (network fault, short read, 5xx)."""

    kind = "source_read"

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class StaleReferenceError(H5SidecarError, OSError):
    """The source object changed (size, ETag or mtime) since its sidecar was written.

    Re-index the granule (``h5sidecar index SOURCE -o DEST``; changed sources are re-indexed).
    """

    kind = "stale_reference"

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class ForbiddenSourceError(H5SidecarError, PermissionError):
    """A sidecar points at a URL outside the allowed source prefixes; it is never fetched."""

    kind = "forbidden_source"


class NotIndexedError(H5SidecarError, FileNotFoundError):
    """No sidecar exists for the requested granule (or key)."""

    kind = "not_indexed"


class SourceNotFoundError(H5SidecarError, FileNotFoundError):
    """A source given to index (file, folder, glob or S3 prefix) does not exist or matches nothing."""

    kind = "source_not_found"


class IncompatibleGranulesError(H5SidecarError, ValueError):
    """Granules cannot be combined safely: their CF encodings or units differ in a way the
    requested decoding would not reconcile (e.g. ``scale_factor`` differs but
    ``mask_and_scale=False``).  The message names the granules, variables and attributes."""

    kind = "incompatible_granules"


class InvalidRequestError(H5SidecarError, ValueError):
    """A request's parameters are malformed (e.g. a STAC item search with a bad ``bbox`` or
    ``datetime``); the message names the parameter and the expected form."""

    kind = "invalid_request"


class ChunkDecodeError(H5SidecarError, ValueError):
    """A chunk's bytes did not decode with the codecs its sidecar names, or decoded to the
    wrong size: the source no longer holds what was indexed (or the sidecar is corrupt).
    Re-index the granule."""

    kind = "chunk_decode"


#: HTTP status code for each error class, used by the gateway (most specific class first).
HTTP_STATUS: dict[type[H5SidecarError], int] = {
    NotIndexedError: 404,
    SourceNotFoundError: 404,
    ForbiddenSourceError: 403,
    InvalidReferenceError: 422,
    IncompatibleGranulesError: 422,
    InvalidRequestError: 400,
    UnsupportedFeatureError: 501,
    StaleReferenceError: 409,
    NotHDF5Error: 422,
    SourceReadError: 502,
    ChunkDecodeError: 502,
    H5SidecarError: 500,
}
