"""The exception tree of h5sidecar.

Every error raised on purpose by h5sidecar derives from :class:`H5SidecarError` *and* from the
builtin exception callers already catch (``OSError``, ``ValueError``, ...), so code written against
plain fsspec/zarr keeps working.  Messages say what happened and what to do next.

Each class carries a ``kind`` code, a member of :class:`ErrorKind`: the one list of every code
h5sidecar writes into run reports, sidecars (skipped variables), catalog results and HTTP error
bodies.  Which HTTP status each class gets is the gateway's business
(:data:`h5sidecar.gateway._http_rules.STATUS`).
"""

from __future__ import annotations

import difflib
import enum
import importlib
from collections.abc import Iterable
from typing import Any

__all__ = [
    "ChunkDecodeError",
    "CorruptFileError",
    "CredentialsError",
    "ErrorKind",
    "ForbiddenSourceError",
    "GranuleLimitError",
    "GranuleTimeoutError",
    "H5SidecarError",
    "IncompatibleGranulesError",
    "InvalidDmrppError",
    "InvalidReferenceError",
    "InvalidRequestError",
    "MissingExtraError",
    "NotHDF5Error",
    "NotIndexedError",
    "RecordBusyError",
    "STACValidationError",
    "SourceNotFoundError",
    "SourceAuthError",
    "SourceReadError",
    "StaleReferenceError",
    "UnguardedMainError",
    "UnsupportedFeatureError",
    "did_you_mean",
    "require_extra",
]


@enum.unique
class ErrorKind(enum.StrEnum):
    """Every kind code h5sidecar emits, in one place.

    Append-only: never rename, remove or reuse a value.  Run reports (``DEST/_report.json``),
    sidecars (the ``kind`` of each skipped variable), catalog results and HTTP error bodies
    carry these strings, and readers of older files match on them.  Add new codes at the end.
    A member *is* its string (``ErrorKind.NOT_HDF5 == "not_hdf5"``), so JSON, Parquet and
    f-strings write the plain value.
    """

    # -- the ``kind`` of each error class (``H5SidecarError.kind``) ---------------------------
    ERROR = "error"
    UNSUPPORTED = "unsupported"
    INVALID_REFERENCE = "invalid_reference"
    NOT_HDF5 = "not_hdf5"
    CORRUPT = "corrupt"
    LIMIT_EXCEEDED = "limit_exceeded"
    TIMEOUT = "timeout"
    SOURCE_READ = "source_read"
    STALE_REFERENCE = "stale_reference"
    FORBIDDEN_SOURCE = "forbidden_source"
    NOT_INDEXED = "not_indexed"
    SOURCE_NOT_FOUND = "source_not_found"
    INCOMPATIBLE_GRANULES = "incompatible_granules"
    INVALID_REQUEST = "invalid_request"
    CHUNK_DECODE = "chunk_decode"
    INVALID_STAC = "invalid_stac"
    # -- errors of the HTTP gateway (classes in ``gateway/_http_rules.py``, bodies of ``gateway/app``)
    BAD_REQUEST = "bad_request"
    KEY_TOO_LONG = "key_too_long"
    RANGE_NOT_SATISFIABLE = "range_not_satisfiable"
    RESPONSE_TOO_LARGE = "response_too_large"
    SATURATED = "saturated"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNAUTHORIZED = "unauthorized"
    HTTP = "http"
    INTERNAL = "internal"
    # -- a failed granule of a run report that raised no H5SidecarError ------------------------
    OS_ERROR = "os_error"
    MEMORY = "memory"
    WORKER_CRASHED = "worker_crashed"
    BUG = "bug"
    # -- a granule left out of a STAC catalog ---------------------------------------------------
    NO_TIME = "no_time"
    # -- why a variable was skipped (``Skipped.kind`` in sidecars and reports) -------------------
    UNSUPPORTED_FILTER = "unsupported_filter"
    UNSUPPORTED_DTYPE = "unsupported_dtype"
    UNSUPPORTED_LAYOUT = "unsupported_layout"
    EXTERNAL_LINK = "external_link"
    SOFT_LINK_DANGLING = "soft_link_dangling"
    VIRTUAL_DATASET = "virtual_dataset"
    EXTERNAL_STORAGE = "external_storage"
    UNREADABLE = "unreadable"
    TOO_LARGE_TO_MATERIALIZE = "too_large_to_materialize"
    OTHER = "other"
    INTERNAL_ERROR = "internal_error"
    # -- no usable S3 credentials (``CredentialsError``) -----------------------------------------
    NO_CREDENTIALS = "no_credentials"
    # -- append new codes here ------------------------------------------------------------------
    SOURCE_AUTH = "source_auth"
    # -- DEST's record cannot be written (``RecordBusyError``) ---------------------------------
    RECORD_BUSY = "record_busy"
    # -- a DMR++ document that cannot be used (``InvalidDmrppError``) ---------------------------
    INVALID_DMRPP = "invalid_dmrpp"
    # -- an optional dependency is not installed (``MissingExtraError``) -----------------------
    MISSING_EXTRA = "missing_extra"
    # -- worker processes would re-run an unguarded script (``UnguardedMainError``) ------------
    UNGUARDED_MAIN = "unguarded_main"
    # -- the gateway is loading DEST's record, or loading it failed (gateway's HTTP errors) --
    WARMING = "warming"
    RECORD_UNAVAILABLE = "record_unavailable"


class H5SidecarError(Exception):
    """Base class of every error h5sidecar raises on purpose.

    ``hint``, when set on an instance, is what to do about this case in particular; run reports
    show it instead of the hint of the error's kind (a netCDF-3 file is a ``not_hdf5`` error,
    but re-staging it, the kind's advice, does not help).
    """

    kind: ErrorKind = ErrorKind.ERROR
    hint: str | None = None

    def with_hint(self, hint: str) -> H5SidecarError:
        """This error with ``hint`` (``raise NotHDF5Error(...).with_hint(...)``)."""
        self.hint = hint
        return self


class UnsupportedFeatureError(H5SidecarError, NotImplementedError):
    """An HDF5 feature (filter, datatype, layout, link) that cannot be expressed as Zarr references.

    The indexer raises it with ``on_unsupported="raise"`` and records it as a skipped variable
    with ``on_unsupported="skip"`` (the default of the batch workflow).
    """

    kind = ErrorKind.UNSUPPORTED


class InvalidReferenceError(H5SidecarError, ValueError):
    """A sidecar (reference file) is malformed, truncated or inconsistent."""

    kind = ErrorKind.INVALID_REFERENCE


class InvalidDmrppError(InvalidReferenceError):
    """A DMR++ document cannot be used: it is not XML, or it contradicts itself or the granule
    (a chunk past the end of the data file, a chunk grid that does not cover the shape)."""

    kind = ErrorKind.INVALID_DMRPP


class NotHDF5Error(H5SidecarError, ValueError):
    """The object is not an HDF5 file (no signature), or is truncated or corrupt."""

    kind = ErrorKind.NOT_HDF5


class CorruptFileError(NotHDF5Error):
    """The object starts like HDF5 but its metadata is inconsistent: a length or address past
    the end of the object, a chunk index pointing outside it, structures HDF5 refuses."""

    kind = ErrorKind.CORRUPT


class GranuleLimitError(H5SidecarError, RuntimeError):
    """Indexing one granule went past a per-granule bound (HDF5 read calls or bytes read, see
    ``IndexSettings.max_hdf5_reads`` / ``max_hdf5_read_bytes``): its metadata most likely loops
    (a corrupt file); raise the bound only for a file known to be sound."""

    kind = ErrorKind.LIMIT_EXCEEDED


class GranuleTimeoutError(GranuleLimitError, TimeoutError):
    """Indexing one granule took longer than ``IndexSettings.max_granule_seconds``."""

    kind = ErrorKind.TIMEOUT


class SourceReadError(H5SidecarError, OSError):
    """Reading bytes of a source object failed after retries (network fault, short read, 5xx)."""

    kind = ErrorKind.SOURCE_READ

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class CredentialsError(H5SidecarError, PermissionError):
    """No usable S3 credentials: none found anywhere in the chain, an unknown profile, or a
    credential provider that failed.  The message names what was tried and how to give some
    (``AWS_PROFILE``, ``AWS_*`` variables, ``storage_options``, ``anon=True`` for public
    buckets)."""

    kind = ErrorKind.NO_CREDENTIALS


class SourceAuthError(SourceReadError):
    """A web source refused the request (HTTP 401/403): credentials are missing or not accepted.

    Set ``EARTHDATA_TOKEN`` (or ``storage_options={"token": ...}``) or a ``.netrc`` login for the
    archive's login host; the message names what was configured, never a secret.
    """

    kind = ErrorKind.SOURCE_AUTH


class StaleReferenceError(H5SidecarError, OSError):
    """The source object changed (size, ETag or mtime) since its sidecar was written.

    Re-index the granule (``h5sidecar index SOURCE -o DEST``; changed sources are re-indexed).
    """

    kind = ErrorKind.STALE_REFERENCE

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class ForbiddenSourceError(H5SidecarError, PermissionError):
    """A sidecar points at a URL outside the allowed source prefixes; it is never fetched."""

    kind = ErrorKind.FORBIDDEN_SOURCE


class NotIndexedError(H5SidecarError, FileNotFoundError):
    """No sidecar exists for the requested granule (or key)."""

    kind = ErrorKind.NOT_INDEXED


class SourceNotFoundError(H5SidecarError, FileNotFoundError):
    """A source given to index (file, folder, glob or S3 prefix) does not exist or matches nothing."""

    kind = ErrorKind.SOURCE_NOT_FOUND


class IncompatibleGranulesError(H5SidecarError, ValueError):
    """Granules cannot be combined safely: their CF encodings or units differ in a way the
    requested decoding would not reconcile (e.g. ``scale_factor`` differs but
    ``mask_and_scale=False``).  The message names the granules, variables and attributes."""

    kind = ErrorKind.INCOMPATIBLE_GRANULES


class InvalidRequestError(H5SidecarError, ValueError):
    """A request's parameters are malformed (e.g. a STAC item search with a bad ``bbox`` or
    ``datetime``); the message names the parameter and the expected form."""

    kind = ErrorKind.INVALID_REQUEST


class ChunkDecodeError(H5SidecarError, ValueError):
    """A chunk's bytes did not decode with the codecs its sidecar names, or decoded to the
    wrong size: the source no longer holds what was indexed (or the sidecar is corrupt).
    Re-index the granule."""

    kind = ErrorKind.CHUNK_DECODE


class STACValidationError(H5SidecarError, ValueError):
    """A STAC document does not validate; ``errors`` holds every schema violation."""

    kind = ErrorKind.INVALID_STAC

    def __init__(self, message: str, errors: list[Any]) -> None:
        super().__init__(message)
        self.errors = errors


def did_you_mean(name: str, choices: Iterable[str], *, listed: int = 20) -> str:
    """The end of a "no such name" message: the closest names, else the first ``listed``.

    ``"did you mean 'gt1l/heights'?"`` for a typo among 140 groups, instead of the first 20 in
    alphabetical order, which rarely hold the one meant.
    """
    pool = sorted(set(choices))
    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.6)
    if not close:  # a typo in the last part of a path: compare the last parts
        tail = name.rsplit("/", 1)[-1]
        by_tail = {c.rsplit("/", 1)[-1]: c for c in pool if c.count("/") == name.count("/")}
        close = [by_tail[t] for t in difflib.get_close_matches(tail, list(by_tail), n=3)]
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    # nothing close: the names at the asked depth (top-level groups for "zzz") say where to look
    depth = name.count("/")
    level = [c for c in pool if c and c.count("/") == depth] or pool
    more = f" ... ({len(level)} of {len(pool)} in all)" if len(level) > listed else ""
    scope = "at that level " if level is not pool else ""
    return f"the names {scope}are {level[:listed]}{more}"


class RecordBusyError(H5SidecarError, OSError):
    """DEST's record (its SQLite database) cannot be written: another process held its write
    lock past the wait (``database is locked``), or DEST is read-only.  The message names the
    record and what to do; nothing was half-written."""

    kind = ErrorKind.RECORD_BUSY


class MissingExtraError(H5SidecarError, ImportError):
    """A feature needs an optional dependency that is not installed.

    The message names the package(s) and the extra that installs them
    (``pip install "h5sidecar[gateway]"``); the command line prints it on one line, exit 2.
    ``ImportError`` stays a base so code that guarded the import keeps catching it.
    """

    kind = ErrorKind.MISSING_EXTRA


class UnguardedMainError(H5SidecarError, RuntimeError):
    """Worker processes would run the user's script again: ``index_many`` was called at the top
    level of a script, outside ``if __name__ == "__main__":``.  Worker processes start by
    importing the script (spawn and forkserver start methods), so each would start a batch of
    its own.  Raised before any worker starts; the message names the script and the line."""

    kind = ErrorKind.UNGUARDED_MAIN


def require_extra(extra: str, *modules: str, feature: str) -> None:
    """Import ``modules`` or raise :class:`MissingExtraError` naming ``extra``.

    Called where a command or public function starts, before any work, so a base install
    says what to install instead of failing midway with a bare ``ModuleNotFoundError``.

    Parameters
    ----------
    extra : str
        The optional-dependency group of ``pyproject.toml`` that installs ``modules``
        (``"gateway"``, ``"catalog"``, ``"dask"``, ...).
    *modules : str
        Importable names the feature needs (``"starlette"``, ``"distributed"``).
    feature : str
        What needs them, as the user asked for it (``"h5sidecar serve"``).

    Raises
    ------
    MissingExtraError
        When any of ``modules`` does not import.
    """
    missing: list[str] = []
    cause: ImportError | None = None
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # not installed, or installed without its own dependencies
            missing.append(name)
            cause = cause or exc
    if missing:
        raise MissingExtraError(
            f"{feature} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            f' not installed: pip install "h5sidecar[{extra}]"'
        ) from cause
