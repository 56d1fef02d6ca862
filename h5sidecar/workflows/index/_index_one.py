"""The per-granule task of a batch: index one granule into its sidecar, unless it is up to date.

``index_one`` is a picklable top-level function of plain arguments, so any executor (serial,
process pool, Dask) can run it.  It never raises for a bad granule: expected failures become a
``failed`` :class:`GranuleResult` with the error kind, message and what to do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from h5sidecar.dest import GranuleResult, error_record
from h5sidecar.errors import ErrorKind, H5SidecarError
from h5sidecar.indexer import FromDmrpp, index_source
from h5sidecar.references import GranuleRefs, SidecarFormat, SourceInfo, write_refs
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows.index._leftover_sweep import sweep_leftovers
from h5sidecar.workflows.index._up_to_date import check_up_to_date, sidecar_bytes

__all__ = ["IndexOptions", "SidecarFormat", "index_one"]

log = logging.getLogger("h5sidecar.workflows")

@dataclass(frozen=True, slots=True)
class IndexOptions:
    """Options of :func:`index_one` (the same for every granule of a run; picklable).

    Attributes
    ----------
    format : "parquet" or "json"
        Sidecar format.
    force : bool
        Re-index even when the sidecar records the source's current identity.
    settings : IndexSettings
        Indexer options (``on_unsupported``, ``checksums``, ...).
    storage_options : mapping or None
        fsspec/s3fs options for the source and the destination.  They travel to local worker
        processes with each task; to a Dask cluster without credentials (``key``, ``secret``,
        ``token``...): Dask workers resolve their own (``AWS_*``, ``AWS_PROFILE``, roles).
    from_dmrpp : "auto", "only" or "never"
        Index from the DMR++ beside each granule (see :func:`h5sidecar.indexer.index_source`).
    """

    format: SidecarFormat = "parquet"
    force: bool = False
    settings: IndexSettings = field(default_factory=IndexSettings)
    storage_options: Mapping[str, Any] | None = None
    from_dmrpp: FromDmrpp = "never"


def index_one(
    url: str,
    dest_url: str,
    options: IndexOptions,
    listed: SourceInfo | None = None,
    sweep: bool = True,
) -> GranuleResult:
    """Index one granule into its sidecar, unless the sidecar is already up to date.

    Parameters
    ----------
    url : str
        The granule (absolute local path or ``s3://bucket/key``).
    dest_url : str
        Its sidecar (``.parq`` directory or ``.json`` file), written atomically.
    options : IndexOptions
    listed : SourceInfo, optional
        The granule's identity from the listing; looked up when not given.
    sweep : bool
        Remove what an interrupted write of this sidecar left beside it (reads its folder;
        :func:`index_many` sweeps every folder once instead and passes False).

    Returns
    -------
    GranuleResult
        ``up_to_date`` when the existing sidecar records the current identity (and
        ``options.force`` is false), ``ok`` when written, ``failed`` with an error record when
        the granule cannot be indexed or its sidecar cannot be written.
    """
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        if sweep:
            sweep_leftovers(dest_url)
        if not options.force:
            done = check_up_to_date(
                url,
                dest_url,
                listed,
                storage_options=options.storage_options,
                settings=options.settings,
                from_dmrpp=options.from_dmrpp,
            )
            if done is not None:
                return done
        t1 = time.perf_counter()
        refs = index_source(url, from_dmrpp=options.from_dmrpp, storage_options=_opts(options),
                            settings=options.settings)  # fmt: skip
        t2 = time.perf_counter()
        seconds["index"] = t2 - t1
        write_refs(
            refs,
            dest_url,
            format=options.format,
            storage_options=_opts(options),
            layout=options.settings.layout,
        )
        seconds["write"] = time.perf_counter() - t2
        seconds["total"] = time.perf_counter() - t0
        log.info("indexed %s -> %s (%.2f s)", url, dest_url, seconds["total"])
        return _ok_result(url, dest_url, refs, seconds, options)
    except (H5SidecarError, OSError, MemoryError) as exc:
        # expected failures of one granule (not HDF5, unsupported, unreadable, unwritable, past
        # the worker's memory limit): recorded so the batch goes on
        seconds["total"] = time.perf_counter() - t0
        log.info("failed %s: %s", url, exc)
        return GranuleResult(
            url=url,
            sidecar=dest_url,
            status="failed",
            source=None if listed is None else listed.to_dict(),
            seconds=seconds,
            error=error_record(
                exc, kind=ErrorKind.MEMORY if isinstance(exc, MemoryError) else None
            ),
        )


def _opts(options: IndexOptions) -> dict[str, Any] | None:
    return None if options.storage_options is None else dict(options.storage_options)


def _ok_result(
    url: str, dest_url: str, refs: GranuleRefs, seconds: dict[str, float], options: IndexOptions
) -> GranuleResult:
    statuses = [a.status for a in refs.arrays.values()]
    return GranuleResult(
        url=url,
        sidecar=dest_url,
        status="ok",
        source=refs.source.to_dict(),
        n_virtual=statuses.count("virtual"),
        n_inlined=statuses.count("inlined"),
        n_skipped=len(refs.skipped),
        skipped=tuple(s.to_dict() for s in refs.skipped),
        n_chunks=sum(a.manifest.n_stored + a.manifest.n_inline for a in refs.arrays.values()),
        sidecar_bytes=sidecar_bytes(dest_url, options.storage_options),
        seconds=seconds,
    )
