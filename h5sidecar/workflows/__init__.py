"""Batch workflows: index many granules, inspect and verify sidecars, the demo.

Everything the ``h5sidecar`` command line does is a function here first:

- :func:`index_many` lists a folder, glob or S3 prefix and indexes each granule with
  :func:`index_one` (a picklable task for any executor), skipping up-to-date sidecars, and writes
  a :class:`RunReport` in DEST (its SQLite record locally, ``_report.json`` on object stores);
- :func:`inspect_refs` summarises a sidecar; :func:`verify_refs` compares it with h5py;
- :func:`build_cube` combines many granules' sidecars into one datacube reference set along a
  dimension (checked encodings, coordinate order, the coordinate held inline);
- :func:`run_demo` and :func:`write_samples` drive the demo;
- :func:`write_icechunk` writes references into an Icechunk repository as virtual chunk
  references, and :func:`open_icechunk` opens one authorized to read its sources;
- :func:`dask_executor` runs :func:`index_many` on a Dask cluster (``--dask``), and
  :func:`gridded_mean_height` / :func:`plot_grid` are an analysis computed on the cluster.

Heavy modules (h5py, zarr, xarray) load on first use of the function that needs them.
"""

from __future__ import annotations

from h5sidecar._lazy import lazy_exports

__all__ = [
    "CubePart",
    "CubeResult",
    "build_cube",
    "DEFAULT_PATTERNS",
    "DaskExecutor",
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
    "CubePart": "_cube",
    "CubeResult": "_cube",
    "build_cube": "_cube",
    "DEFAULT_PATTERNS": "_listing",
    "Granule": "_listing",
    "list_granules": "_listing",
    "ErrorRecord": "_report",
    "GranuleResult": "_report",
    "RunReport": "_report",
    "read_report": "_report_io",
    "write_report": "_report_io",
    "PruneEntry": "_prune",
    "PruneResult": "_prune",
    "prune": "_prune",
    "SerialExecutor": "_executors",
    "process_pool": "_executors",
    "IndexOptions": "_index",
    "ProgressSink": "_index",
    "index_many": "_index",
    "index_one": "_index",
    "SidecarSummary": "_inspect",
    "VariableSummary": "_inspect",
    "inspect_refs": "_inspect",
    "VariableCheck": "_verify",
    "VerifyReport": "_verify",
    "verify_refs": "_verify",
    "DaskExecutor": "_dask",
    "dask_client": "_dask",
    "dask_executor": "_dask",
    "gridded_mean_height": "_analysis",
    "plot_grid": "_analysis",
    "DemoSummary": "_demo",
    "run_demo": "_demo",
    "write_samples": "_demo",
    "open_icechunk": "_icechunk_repo",
    "write_icechunk": "_icechunk",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

