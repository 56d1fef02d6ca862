"""Run-report records of the batch workflow (``h5sidecar report DEST --json``).

Records are frozen dataclasses of plain values so they pickle cheaply between worker processes
and serialise to JSON without custom encoders.  The report format is documented in the README
("Run report"); merging and atomic persistence are in :mod:`h5sidecar.dest._report_io`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from h5sidecar.errors import ErrorKind, H5SidecarError
from h5sidecar.indexer import skip_loses_data

__all__ = [
    "REPORT_VERSION",
    "ErrorRecord",
    "GranuleResult",
    "GranuleStatus",
    "URL_LIST_OPTION",
    "RunReport",
    "error_record",
    "source_roots",
]

log = logging.getLogger("h5sidecar.workflows")

REPORT_VERSION = 1

#: The ``options`` entry of a run given a list of URLs: how many, their digest and the file
#: they came from (the URLs themselves are the granules' rows, not kept again as roots).
URL_LIST_OPTION = "url_list"

#: Skip kind of a variable lost to an unexpected error: its granule is reported as partial.
PARTIAL_KIND = ErrorKind.INTERNAL_ERROR

#: Outcome of one granule in a run.
GranuleStatus = Literal["ok", "failed", "up_to_date"]

#: What to do about each kind of failure (``kind`` codes of :mod:`h5sidecar.errors`).
_HINTS: dict[str, str] = {
    ErrorKind.NOT_HDF5: "the object is not a readable HDF5/netCDF-4 file (truncated, corrupt or "
    "another format): re-stage it from its origin, or leave it out with --pattern",
    ErrorKind.UNSUPPORTED: "a variable cannot be expressed as Zarr references: re-run with "
    "--on-unsupported skip to index the rest and record the variable as skipped",
    ErrorKind.SOURCE_READ: "reading the object failed: check the network, endpoint and "
    "credentials, then re-run (finished granules are not redone)",
    ErrorKind.NO_CREDENTIALS: "no usable S3 credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/"
    "AWS_SECRET_ACCESS_KEY (on the workers too), pass --storage-option profile=NAME, or "
    "--storage-option anon=true for a public bucket; then re-run",
    ErrorKind.STALE_REFERENCE: "the object changed while it was being indexed: re-run to index "
    "its current version",
    ErrorKind.FORBIDDEN_SOURCE: "the object lies outside the allowed source prefixes: allow it or "
    "move it",
    ErrorKind.INVALID_REFERENCE: "a reference could not be built or written consistently: re-run "
    "with --force for this granule and report the file if it persists",
    ErrorKind.SOURCE_NOT_FOUND: "the object disappeared after listing: re-run to refresh the "
    "listing",
    ErrorKind.OS_ERROR: "the operating system refused a read or write: check that the source is "
    "readable and the destination writable (permissions, free space), then re-run",
    ErrorKind.WORKER_CRASHED: "the worker process died while indexing this granule (the HDF5 "
    "library can crash on corrupt files): check the file with h5dump, re-stage it, or leave it "
    "out",
    ErrorKind.CORRUPT: "the file is HDF5 but its structures are damaged: check it with h5dump, "
    "re-stage it from its origin, or leave it out with --pattern",
    ErrorKind.LIMIT_EXCEEDED: "reading the file went past a per-granule bound (its metadata "
    "loops: a corrupt file): check it with h5dump; raise the H5SIDECAR_MAX_HDF5_* setting only "
    "for a file known to be sound",
    ErrorKind.MEMORY: "indexing the granule needed more memory than H5SIDECAR_MAX_WORKER_MEMORY "
    "(most likely a corrupt file claiming huge structures): check it with h5dump, or raise the "
    "limit",
    ErrorKind.TIMEOUT: "the granule took longer than H5SIDECAR_MAX_GRANULE_SECONDS (a slow source "
    "or a corrupt file): re-run, or raise the limit for large granules on slow storage",
    ErrorKind.BUG: "an unexpected error inside h5sidecar: re-run with -v and report it with the "
    "file",
}


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """Why a granule failed: error kind code, message and what to do about it."""

    kind: str
    message: str
    hint: str
    type: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"kind": self.kind, "type": self.type, "message": self.message, "hint": self.hint}


def error_record(exc: BaseException, *, kind: str | None = None) -> ErrorRecord:
    """An :class:`ErrorRecord` for an exception (its own ``hint``, else its ``kind`` code's)."""
    if kind is None:
        kind = exc.kind if isinstance(exc, H5SidecarError) else ErrorKind.OS_ERROR
    own = exc.hint if isinstance(exc, H5SidecarError) else None
    return ErrorRecord(
        kind=kind,
        message=str(exc) or type(exc).__name__,
        hint=own or _HINTS.get(kind, _HINTS[ErrorKind.BUG]),
        type=type(exc).__name__,
    )


@dataclass(frozen=True, slots=True)
class GranuleResult:
    """Outcome of indexing one granule.

    Attributes
    ----------
    url : str
        The granule.
    sidecar : str
        Its sidecar (written, or found up to date).
    status : "ok", "failed" or "up_to_date"
    name : str
        Path relative to the listing root.
    source : dict or None
        Source identity recorded in the sidecar (``url``, ``size``, ``etag``, ``mtime``); for a
        failed granule, the identity seen by the listing.
    n_virtual, n_inlined, n_skipped : int
        Variables held as byte ranges, held inside the sidecar, and left out.
    skipped : tuple of dict
        ``{"path", "kind", "reason"}`` of each skipped variable.
    n_chunks : int
        Chunk references in the sidecar (byte ranges + inline).
    sidecar_bytes : int
        Size of the sidecar.
    seconds : dict
        Wall-clock seconds per step (``check``, ``index``, ``write``, ``total``).
    error : ErrorRecord or None
    """

    url: str
    sidecar: str
    status: GranuleStatus
    name: str = ""
    source: Mapping[str, Any] | None = None
    n_virtual: int = 0
    n_inlined: int = 0
    n_skipped: int = 0
    skipped: tuple[Mapping[str, str], ...] = ()
    n_chunks: int = 0
    sidecar_bytes: int = 0
    seconds: Mapping[str, float] = field(default_factory=dict)
    error: ErrorRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "url": self.url,
            "sidecar": self.sidecar,
            "status": self.status,
            "source": None if self.source is None else dict(self.source),
            "variables": {
                "virtual": self.n_virtual,
                "inlined": self.n_inlined,
                "skipped": self.n_skipped,
                "skipped_with_data": self.n_lost,
            },
            "skipped": [dict(s) for s in self.skipped],
            "n_chunks": self.n_chunks,
            "sidecar_bytes": self.sidecar_bytes,
            "seconds": dict(self.seconds),
            "error": None if self.error is None else self.error.to_dict(),
            "partial": self.partial,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GranuleResult:
        """Inverse of :meth:`to_dict`."""
        err = d.get("error")
        variables = d.get("variables", {})
        return cls(
            url=d["url"],
            sidecar=d["sidecar"],
            status=d["status"],
            name=d.get("name", ""),
            source=d.get("source"),
            n_virtual=int(variables.get("virtual", 0)),
            n_inlined=int(variables.get("inlined", 0)),
            n_skipped=int(variables.get("skipped", 0)),
            skipped=tuple(d.get("skipped", ())),
            n_chunks=int(d.get("n_chunks", 0)),
            sidecar_bytes=int(d.get("sidecar_bytes", 0)),
            seconds=dict(d.get("seconds", {})),
            error=None if err is None else ErrorRecord(**err),
        )

    @property
    def n_lost(self) -> int:
        """Skipped entries that leave data out; the rest of ``n_skipped`` hold none (links to
        groups, dimension-only datasets, null dataspaces, dangling links)."""
        return sum(skip_loses_data(s.get("kind", ""), s.get("reason", "")) for s in self.skipped)

    @property
    def partial(self) -> bool:
        """True when a variable was left out by an unexpected error of h5sidecar
        (``internal_error``): the sidecar holds the rest of the granule."""
        return any(s.get("kind") == PARTIAL_KIND for s in self.skipped)

    def renamed(self, name: str) -> GranuleResult:
        """A copy with ``name`` set (workers do not know the listing root)."""
        return replace(self, name=name)


@dataclass(frozen=True, slots=True)
class RunReport:
    """Outcome of a batch run (what ``DEST/_report.json`` holds).

    Attributes
    ----------
    source, dest : str
    format : "parquet" or "json"
    options : dict
        The run's options (force, checksums, on_unsupported, workers, executor).
    started, finished : str
        ISO-8601 UTC times.
    seconds : float
        Wall-clock duration.
    granules : tuple of GranuleResult
        One per listed granule, sorted by name.
    complete : bool
        False when the run was interrupted before every granule was processed.
    roots : tuple of str
        The source roots (``source``) of every run merged into this report, oldest first: the
        prefixes the gateway allows (see :func:`merge_reports`).  Empty means ``(source,)``,
        or nothing for a run given a list of URLs (see :func:`source_roots`).
    carried_over : int
        Granules kept from earlier reports because this run did not process them.
    orphaned : tuple of str
        Carried-over granules whose sources this run's listing showed gone.
    omitted : dict
        Granules of this run not held in ``granules``, per status: a run over more than
        10,000 granules returns its failures and counts only (DEST's record holds every
        granule: :func:`read_report`, ``h5sidecar report DEST``).  Empty otherwise.
    """

    source: str
    dest: str
    format: str
    options: Mapping[str, Any]
    started: str
    finished: str
    seconds: float
    granules: tuple[GranuleResult, ...]
    complete: bool = True
    version: str = ""
    roots: tuple[str, ...] = ()
    carried_over: int = 0
    orphaned: tuple[str, ...] = ()
    omitted: Mapping[str, int] = field(default_factory=dict)

    @property
    def source_roots(self) -> tuple[str, ...]:
        """The source roots this report stands for (:func:`source_roots`)."""
        return source_roots(self.roots, self.source, self.options)

    @property
    def counts(self) -> dict[str, int]:
        """Granules per status (``omitted`` ones included)."""
        out = {"ok": 0, "failed": 0, "up_to_date": 0}
        for g in self.granules:
            out[g.status] += 1
        for status, n in self.omitted.items():
            out[status] += n
        return out

    @property
    def n_granules(self) -> int:
        """Granules of the report, held in ``granules`` or ``omitted``."""
        return len(self.granules) + sum(self.omitted.values())

    @property
    def failed(self) -> tuple[GranuleResult, ...]:
        """The granules that failed."""
        return tuple(g for g in self.granules if g.status == "failed")

    @property
    def partial(self) -> tuple[GranuleResult, ...]:
        """The granules indexed without some variable because of an unexpected error."""
        return tuple(g for g in self.granules if g.partial)

    @property
    def ok(self) -> bool:
        """True when the run completed, no granule failed and none is partial."""
        return self.complete and not self.failed and not self.partial

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``_report.json`` document)."""
        return {
            "report_version": REPORT_VERSION,
            "h5sidecar_version": self.version,
            "source": self.source,
            "dest": self.dest,
            "format": self.format,
            "options": dict(self.options),
            "started": self.started,
            "finished": self.finished,
            "seconds": self.seconds,
            "complete": self.complete,
            "roots": list(self.roots),
            "carried_over": self.carried_over,
            "orphaned": list(self.orphaned),
            "counts": self.counts,
            **({"omitted": dict(self.omitted)} if self.omitted else {}),
            "granules": [g.to_dict() for g in self.granules],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunReport:
        """Inverse of :meth:`to_dict`."""
        return cls(
            source=d["source"],
            dest=d["dest"],
            format=d["format"],
            options=dict(d.get("options", {})),
            started=d["started"],
            finished=d["finished"],
            seconds=float(d["seconds"]),
            granules=tuple(GranuleResult.from_dict(g) for g in d["granules"]),
            complete=bool(d.get("complete", True)),
            version=str(d.get("h5sidecar_version", "")),
            roots=tuple(str(r) for r in d.get("roots", ())),
            carried_over=int(d.get("carried_over", 0)),
            orphaned=tuple(str(n) for n in d.get("orphaned", ())),
            omitted={str(k): int(v) for k, v in d.get("omitted", {}).items()},
        )


def source_roots(roots: Iterable[str], source: str, options: Mapping[str, Any]
                 ) -> tuple[str, ...]:  # fmt: skip
    """The source roots of a report (or a part's header): its ``roots``, else its ``source``.

    A run given a list of URLs has none of its own: its ``source`` names the list, not a
    prefix, and the URLs are its granules' rows (which the gateway allows one by one), so a
    million-URL list costs nothing here.  Runs recorded before kept every URL as a root; those
    still read as they are.
    """
    kept = tuple(roots)
    if kept:
        return kept
    return () if URL_LIST_OPTION in options else (source,)
