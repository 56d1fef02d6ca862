"""Batch workflows: index many granules, inspect and verify sidecars, the demo.

Everything the ``h5sidecar`` command line does is a function here first:

- :func:`index_many` lists a folder, glob or S3 prefix and indexes each granule with
  :func:`index_one` (a picklable task for any executor), skipping up-to-date sidecars, and writes
  a :class:`RunReport` in DEST (its SQLite record locally, ``_report.json`` on object stores);
- :func:`inspect_refs` summarises a sidecar; :func:`verify_refs` compares it with h5py;
  :func:`check_dmrpp` audits a granule's DMR++ document against the granule;
- :func:`build_cube` combines many granules' sidecars into one datacube reference set along a
  dimension (checked encodings, coordinate order, the coordinate held inline);
- :func:`run_demo` and :func:`write_samples` drive the demo;
- :func:`write_icechunk` writes references into an Icechunk repository as virtual chunk
  references, and :func:`open_icechunk` opens one authorized to read its sources;
- :func:`dask_executor` runs :func:`index_many` on a Dask cluster (``--dask``);
  :func:`gridded_mean_height` / :func:`plot_grid`, an ICESat-2 analysis computed on the
  cluster, live outside the core in :mod:`h5sidecar.examples.icesat2` and are re-exported here.

Sub-packages by concept: ``listing/`` (what a batch indexes), ``index/`` (the run, its
executors, up-to-date checks), ``checks/`` (inspect, verify), ``cube/`` and ``icechunk/``.
DEST and its record (what runs write and the gateway and the catalog read) are
:mod:`h5sidecar.dest`.

Heavy modules (h5py, zarr, xarray) load on first use of the function that needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from h5sidecar._lazy import lazy_exports

__all__ = [
    "CubePart",
    "CubeResult",
    "build_cube",
    "check_dmrpp",
    "DEFAULT_PATTERNS",
    "DaskExecutor",
    "DmrppAudit",
    "DmrppFinding",
    "DemoSummary",
    "ErrorRecord",
    "Granule",
    "GranuleResult",
    "IndexOptions",
    "ProgressSink",
    "PruneEntry",
    "PruneResult",
    "RunReport",
    "SerialExecutor",
    "SidecarSummary",
    "VariableCheck",
    "VariableSummary",
    "VerifyReport",
    "dask_client",
    "dask_executor",
    "gridded_mean_height",
    "index_many",
    "index_one",
    "inspect_refs",
    "list_granules",
    "open_icechunk",
    "plot_grid",
    "process_pool",
    "prune",
    "read_report",
    "run_demo",
    "verify_refs",
    "write_icechunk",
    "write_report",
    "write_samples",
]

_LAZY = {
    "CubePart": "cube._build_cube",
    "CubeResult": "cube._build_cube",
    "build_cube": "cube._build_cube",
    "DEFAULT_PATTERNS": "h5sidecar.dest",
    "Granule": "listing._listing",
    "list_granules": "listing._listing",
    "ErrorRecord": "h5sidecar.dest",
    "GranuleResult": "h5sidecar.dest",
    "RunReport": "h5sidecar.dest",
    "read_report": "h5sidecar.dest",
    "write_report": "h5sidecar.dest",
    "PruneEntry": "_prune",
    "PruneResult": "_prune",
    "prune": "_prune",
    "SerialExecutor": "index._executors",
    "process_pool": "index._executors",
    "IndexOptions": "index._index_one",
    "ProgressSink": "index._index",
    "index_many": "index._index",
    "index_one": "index._index_one",
    "SidecarSummary": "checks._inspect",
    "VariableSummary": "checks._inspect",
    "inspect_refs": "checks._inspect",
    "VariableCheck": "checks._verify_array",
    "DmrppAudit": "checks._dmrpp_check",
    "DmrppFinding": "checks._dmrpp_check",
    "check_dmrpp": "checks._dmrpp_check",
    "VerifyReport": "checks._verify",
    "verify_refs": "checks._verify",
    "DaskExecutor": "index._dask",
    "dask_client": "index._dask",
    "dask_executor": "index._dask",
    "gridded_mean_height": "h5sidecar.examples",
    "plot_grid": "h5sidecar.examples",
    "DemoSummary": "_demo",
    "run_demo": "_demo",
    "write_samples": "_demo",
    "open_icechunk": "icechunk._icechunk_repo",
    "write_icechunk": "icechunk._icechunk",
    # for h5sidecar's own layers (served by the front, not advertised in __all__):
    "UrlList": "h5sidecar.workflows.listing._url_list",
}


if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from h5sidecar.dest import DEFAULT_PATTERNS as DEFAULT_PATTERNS
    from h5sidecar.dest import ErrorRecord as ErrorRecord
    from h5sidecar.dest import GranuleResult as GranuleResult
    from h5sidecar.dest import RunReport as RunReport
    from h5sidecar.dest import read_report as read_report
    from h5sidecar.dest import write_report as write_report
    from h5sidecar.examples import gridded_mean_height as gridded_mean_height
    from h5sidecar.examples import plot_grid as plot_grid
    from h5sidecar.workflows._demo import DemoSummary as DemoSummary
    from h5sidecar.workflows._demo import run_demo as run_demo
    from h5sidecar.workflows._demo import write_samples as write_samples
    from h5sidecar.workflows._prune import PruneEntry as PruneEntry
    from h5sidecar.workflows._prune import PruneResult as PruneResult
    from h5sidecar.workflows._prune import prune as prune
    from h5sidecar.workflows.checks._dmrpp_check import DmrppAudit as DmrppAudit
    from h5sidecar.workflows.checks._dmrpp_check import DmrppFinding as DmrppFinding
    from h5sidecar.workflows.checks._dmrpp_check import check_dmrpp as check_dmrpp
    from h5sidecar.workflows.checks._inspect import SidecarSummary as SidecarSummary
    from h5sidecar.workflows.checks._inspect import VariableSummary as VariableSummary
    from h5sidecar.workflows.checks._inspect import inspect_refs as inspect_refs
    from h5sidecar.workflows.checks._verify import VerifyReport as VerifyReport
    from h5sidecar.workflows.checks._verify import verify_refs as verify_refs
    from h5sidecar.workflows.checks._verify_array import VariableCheck as VariableCheck
    from h5sidecar.workflows.cube._build_cube import CubePart as CubePart
    from h5sidecar.workflows.cube._build_cube import CubeResult as CubeResult
    from h5sidecar.workflows.cube._build_cube import build_cube as build_cube
    from h5sidecar.workflows.icechunk._icechunk import write_icechunk as write_icechunk
    from h5sidecar.workflows.icechunk._icechunk_repo import open_icechunk as open_icechunk
    from h5sidecar.workflows.index._dask import DaskExecutor as DaskExecutor
    from h5sidecar.workflows.index._dask import dask_client as dask_client
    from h5sidecar.workflows.index._dask import dask_executor as dask_executor
    from h5sidecar.workflows.index._executors import SerialExecutor as SerialExecutor
    from h5sidecar.workflows.index._executors import process_pool as process_pool
    from h5sidecar.workflows.index._index import ProgressSink as ProgressSink
    from h5sidecar.workflows.index._index import index_many as index_many
    from h5sidecar.workflows.index._index_one import IndexOptions as IndexOptions
    from h5sidecar.workflows.index._index_one import index_one as index_one
    from h5sidecar.workflows.listing._listing import Granule as Granule
    from h5sidecar.workflows.listing._listing import list_granules as list_granules
    from h5sidecar.workflows.listing._url_list import UrlList as UrlList


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

