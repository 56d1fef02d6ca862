"""What the indexer does when something fails: the skip signal, and which errors are HDF5's.

A variable that cannot be represented raises :class:`Skip` (recorded with its reason, or raised
with ``on_unsupported="raise"``); an error out of h5py is told apart from a failure to read the
source (:func:`is_io_failure`), which must abort the granule instead.  Also :func:`dcpl`, the
one copy of a dataset's creation property list that the indexer's stages share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from h5sidecar._compat.h5py import creation_plist
from h5sidecar.errors import H5SidecarError
from h5sidecar.references import SkipKind

if TYPE_CHECKING:
    import h5py

__all__ = [
    "H5PY_ERRORS",
    "Skip",
    "dcpl",
    "describe_h5_error",
    "fail",
    "is_io_failure",
    "raised_by_h5py",
    "reraise_io_failure",
]

#: What h5py raises when HDF5 refuses an operation (translated from the HDF5 error stack).
H5PY_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    KeyError,
    ValueError,
    TypeError,
    RuntimeError,
)


class Skip(Exception):
    """Internal signal: this variable cannot be represented; record it (or raise) with a reason.

    Attributes
    ----------
    kind : SkipKind
        Category recorded in :class:`~h5sidecar.references.Skipped`.
    reason : str
        What is unsupported and why, written for the person reading the report.
    """

    def __init__(self, kind: SkipKind, reason: str) -> None:
        super().__init__(reason)
        self.kind: SkipKind = kind
        self.reason = reason


def is_io_failure(exc: BaseException) -> bool:
    """True when ``exc`` is a failure to *read the source*, not HDF5 refusing an object.

    h5py lets exceptions raised by a Python file object propagate unchanged, so a network
    fault surfaces as ``SourceReadError``/``StaleReferenceError`` (or a builtin ``OSError``
    subclass such as ``ConnectionError``) in the middle of an h5py call.  Those must abort the
    granule instead of being recorded as "unreadable variable".  HDF5's own errors are plain
    ``OSError``/``KeyError``/... instances, never subclasses.
    """
    if isinstance(exc, H5SidecarError):
        return True
    return isinstance(exc, OSError) and type(exc) is not OSError


def reraise_io_failure(exc: BaseException) -> None:
    """Re-raise ``exc`` when it is a source read failure (see :func:`is_io_failure`)."""
    if is_io_failure(exc):
        raise exc


def raised_by_h5py(exc: BaseException) -> bool:
    """True when ``exc`` came out of h5py (its innermost frame is in h5py), i.e. HDF5 refused
    something about the file, rather than a bug of ours raising the same builtin type."""
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and ("h5py" in last.replace("\\", "/").split("/"))


def describe_h5_error(exc: BaseException) -> str:
    """A one-line description of an h5py/HDF5 error for reasons and notes."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.strip("'\"")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fail(kind: SkipKind, reason: str) -> NoReturn:
    """Raise :class:`Skip` (a helper so call sites read as one statement)."""
    raise Skip(kind, reason)


def dcpl(dset: h5py.Dataset) -> Any:
    """The creation property list of ``dset``, copied out of HDF5 once per dataset object
    (h5py's own cached copy: see :func:`h5sidecar._compat.h5py.creation_plist`)."""
    return creation_plist(dset)
