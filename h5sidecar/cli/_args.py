"""The ``h5sidecar`` command line's arguments: one parser for every command.

:mod:`h5sidecar.cli` runs the command a parse names (``args.command``); this module only
describes the options, so ``--help`` needs no library import.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from h5sidecar._version import __version__

if TYPE_CHECKING:
    from h5sidecar.settings import RecordSettings

__all__ = ["build_parser", "record_settings", "storage_options"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = argparse.ArgumentParser(
        prog="h5sidecar",
        description="Index HDF5/netCDF-4 granules into kerchunk-compatible sidecars; inspect "
        "and verify them.",
        epilog="exit codes: 0 ok, 1 failures or differences, 2 bad usage or input, "
        "130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"h5sidecar {__version__}")
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v", "--verbose", action="count", default=0, help="log progress (-v) or debug (-vv)"
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, dest="verbose_global",
                        help="log progress (-v) or debug (-vv); also accepted after COMMAND")
    parser.set_defaults(verbose=0)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)

    p = sub.add_parser("index", parents=[verbose], help="index granules into sidecars",
                       description="Index every granule of SOURCE into DEST/<name>.parq (or "
                       ".json), skipping granules whose sidecar is up to date, and record each granule in "
                       "DEST's run report (`h5sidecar report DEST`).")
    p.add_argument("source", nargs="?", default=None,
                   help="a file, a folder, a glob, s3://bucket/prefix or one https:// URL")
    p.add_argument("--url-list", metavar="FILE", default=None,
                   help="index the URLs listed in FILE instead, one per line (https://, "
                   "s3:// or paths; blank lines and # comments skipped)")
    p.add_argument("-o", "--output", dest="dest", required=True, help="folder or S3 prefix")
    p.add_argument("--format", choices=["parquet", "json", "dmrpp"], default="parquet",
                   help="sidecar format: kerchunk Parquet or JSON, or a DMR++ document "
                   "(GRANULE.dmrpp, for DMR++ readers; what DMR++ cannot say is left out)")
    p.add_argument("--layout", choices=["kerchunk", "compact"], default=None,
                   help="Parquet sidecar layout: kerchunk (record files per variable, read by "
                   "plain fsspec/kerchunk) or compact (2-3 objects per granule, h5sidecar and "
                   "its gateway only); default: H5SIDECAR_LAYOUT or kerchunk")
    p.add_argument("--workers", type=_positive, default=None,
                   help="worker processes (default: one per CPU)")
    p.add_argument("--serial", action="store_true", help="index in this process, one by one")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="run on a Dask cluster: a scheduler address (tcp://host:8786) or "
                   "local:N for a LocalCluster of N worker processes on this machine")
    p.add_argument("--retries", type=int, default=2, metavar="N",
                   help="with --dask: extra attempts for a granule that failed with a "
                   "transient read error (default 2)")
    p.add_argument("--max-granule-seconds", type=_non_negative, default=None, metavar="S",
                   help="time limit of one granule; past it the granule fails with kind "
                   "timeout and the batch goes on (0: none; default: "
                   "H5SIDECAR_MAX_GRANULE_SECONDS, else 300)")
    p.add_argument("--force", action="store_true", help="re-index up-to-date granules too")
    p.add_argument("--checksums", action="store_true",
                   help="record a checksum of every chunk (reads all the data)")
    p.add_argument("--on-unsupported", choices=["skip", "raise"], default="skip",
                   help="skip unsupported variables (recorded with the reason) or fail the "
                   "granule (default: skip)")
    p.add_argument("--from-dmrpp", choices=["auto", "only", "never"], default="never",
                   help="index each granule from the DMR++ beside it (GRANULE.dmrpp): auto "
                   "where one exists, else from the HDF5; only: fail granules without one "
                   "(default: never)")
    p.add_argument("--pattern", action="append", dest="patterns", metavar="GLOB",
                   help="file names to index in a folder/prefix (repeatable; default: *.h5 "
                   "*.hdf5 *.he5 *.nc *.nc4)")
    p.add_argument("--json", action="store_true", help="print the run report as JSON")
    _storage_option_arg(p)
    _record_cache_arg(p)
    p.set_defaults(command="index")

    p = sub.add_parser("inspect", parents=[verbose], help="show what a sidecar holds",
                       description="List the variables of a sidecar (status, shape, dtype, "
                       "chunks, bytes, codecs), the skipped ones with reasons, and the source.")
    p.add_argument("ref", help="a .parq or .json sidecar (local or s3://)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    _all_rows_arg(p)
    _storage_option_arg(p)
    p.set_defaults(command="inspect")

    p = sub.add_parser("verify", parents=[verbose], help="compare a sidecar with its source",
                       description="Decode chunks through the sidecar (plain fsspec "
                       "reference:// + zarr) and compare with h5py on the source, and with "
                       "recorded checksums; exit 1 on any difference.")
    p.add_argument("ref", help="a .parq or .json sidecar (local or s3://)")
    p.add_argument("--sample", type=_sample, default=3, metavar="N",
                   help="chunks checked per variable (0 or 'all': every chunk; default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the chunk sample (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _all_rows_arg(p)
    _storage_option_arg(p)
    p.set_defaults(command="verify")

    p = sub.add_parser("dmrpp-check", parents=[verbose],
                       help="audit a DMR++ document against its granule",
                       description="Index GRANULE from its HDF5 metadata and from its DMR++ "
                       "document, and list every disagreement (a variable missing on either "
                       "side, another shape, dtype, chunk shape, chunk offset or length, "
                       "filters, fill value or attribute); exit 1 when any is found.")
    p.add_argument("granule", help="the HDF5 / netCDF-4 granule (path, s3:// or https://)")
    p.add_argument("dmrpp", nargs="?", default=None,
                   help="its DMR++ document (default: GRANULE.dmrpp)")
    p.add_argument("--byte-order", choices=["LE", "BE"], default=None,
                   help="byte order of multi-byte variables whose document gives none "
                   "(default: such variables are not checked)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _storage_option_arg(p)
    p.set_defaults(command="dmrpp-check")

    p = sub.add_parser("catalog", parents=[verbose], help="write a STAC catalog of DEST",
                       description="Write (or update) a static STAC 1.1 catalog in STACDIR: a "
                       "Collection with one Item per granule indexed under DEST (footprint and "
                       "time range read from the data; assets: original file, sidecar, and the "
                       "gateway's Zarr store with --gateway-url), also written as stac-geoparquet. "
                       "Re-runs read only new or changed sidecars and drop removed ones. The "
                       "collection, the root and one item per document shape are validated "
                       "against the STAC schemas offline.")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("-o", "--output", dest="stacdir", required=True, help="catalog folder")
    p.add_argument("--gateway-url", default=None, metavar="URL",
                   help="base URL of `h5sidecar serve DEST`: adds a 'zarr' asset to each item")
    p.add_argument("--collection-id", default=None, metavar="ID",
                   help="collection id (default: the products' short_name, else DEST's name)")
    p.add_argument("--references-base-url", default=None, metavar="URL",
                   help="URL where DEST is published: 'references' assets point there")
    p.add_argument("--title", default=None, help="collection title")
    p.add_argument("--description", default=None, help="collection description")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--cube", action="append", default=[], metavar="[NAME=]CUBE",
                   help="add this datacube (written by `h5sidecar cube`) as a collection asset "
                   "(repeatable; cubes inside DEST are found by themselves)")
    p.add_argument("--pgstac", default=None, metavar="DSN",
                   help="also upsert the catalog's collections and items into the pgstac "
                   "database at this libpq DSN (password from PGPASSWORD or ~/.pgpass)")
    p.add_argument("--json-tree", action=argparse.BooleanOptionalAction, default=None,
                   help="write one JSON document per item, linked from the collection "
                   "(default: for collections of at most 10,000 items)")
    p.add_argument("--read-track-footprints", dest="track_footprints", action="store_const",
                   const="read", default="recorded",
                   help="read every along-track granule's positions for a footprint polygon that "
                        "follows its tracks (default: the box of what the indexer recorded, or "
                        "of its ACDD bounds, without reading the source)")
    p.add_argument("--no-geoparquet", dest="geoparquet", action="store_false",
                   help="do not write the collection's items.parquet (stac-geoparquet)")
    _storage_option_arg(p)
    _record_cache_arg(p)
    p.set_defaults(command="catalog")

    p = sub.add_parser("cube", parents=[verbose], help="combine sidecars into one datacube",
                       description="Combine the sidecars under DEST into one kerchunk reference "
                       "set along a dimension (a datacube), from the sidecars only. Granules are "
                       "ordered by their coordinate values; granules encoded differently "
                       "(scale_factor, add_offset, _FillValue, units, calendar, dtype, codecs, "
                       "chunks) are refused, or split into one cube per encoding.")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("-o", "--output", required=True,
                   help="the cube (CUBE.parq directory or CUBE.json; local or s3://)")
    p.add_argument("--concat-dim", default="time",
                   help="dimension to concatenate along (default: time)")
    p.add_argument("--group", default=None, help="group whose variables make the cube (root)")
    p.add_argument("--variables", nargs="+", default=None, metavar="VAR",
                   help="variables to keep (default: all of the group)")
    p.add_argument("--format", choices=["parquet", "json", "icechunk"], default="parquet",
                   help="kerchunk Parquet (default) or JSON, or a commit of an Icechunk "
                   "repository at CUBE")
    p.add_argument("--on-mismatch", choices=["raise", "split"], default="raise",
                   help="granules encoded differently: refuse (default) or write one cube per "
                   "encoding (CUBE-0.parq, CUBE-1.parq, ... in coordinate order)")
    p.add_argument("--append", action="store_true",
                   help="add to the existing CUBE only the granules not yet in it and replace "
                   "members whose source changed (nothing is written when nothing changed)")
    p.add_argument("--on-out-of-order", choices=["raise", "rebuild"], default="raise",
                   help="with --append, a granule that does not follow the cube: refuse "
                   "(default) or rebuild the cube from all of DEST")
    p.add_argument("--recheck", action="store_true",
                   help="with --append, list DEST and compare every member's sidecar, instead "
                   "of asking DEST's record what was indexed since the cube was written (finds "
                   "sidecars rewritten behind the record's back)")
    p.add_argument("--normalize-time", action="store_true",
                   help="accept granules whose concat coordinate has other time units: hold "
                   "its times in one units (exactly, else refused)")
    p.add_argument("--time-units", default=None, metavar="UNITS",
                   help="with --normalize-time, the new cube's time units (default: the first "
                   "sidecar's), e.g. 'hours since 2020-01-01'")
    _storage_option_arg(p)
    _record_cache_arg(p)
    p.set_defaults(command="cube")

    p = sub.add_parser("prune", parents=[verbose], help="list (or remove) sidecars no one needs",
                       description="Find sidecars whose source no longer exists (orphaned), "
                       "sidecars in a format no longer indexed (other_format) and temporaries "
                       "of interrupted writes (staging) under DEST. A dry run unless --apply.")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("--apply", action="store_true", help="remove them (default: only list)")
    p.add_argument("--only", nargs="+", choices=["orphaned", "other_format", "staging"],
                   default=None, metavar="KIND", help="orphaned, other_format and/or staging")
    p.add_argument("--staging-age", type=float, default=3600.0, metavar="SECONDS",
                   help="leave younger temporaries alone (a running index owns them; 3600)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    _storage_option_arg(p)
    _record_cache_arg(p)
    p.set_defaults(command="prune")

    p = sub.add_parser("report", parents=[verbose], help="show the run report of DEST",
                       description="Show what DEST's record holds: granules per status, "
                       "failures and what to do about them. --json writes the whole report "
                       "document (the former DEST/_report.json) to stdout. Exit code 1 when "
                       "a granule failed or the last run was interrupted.")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("--json", action="store_true", help="write the report document to stdout")
    _storage_option_arg(p)
    _record_cache_arg(p)
    p.set_defaults(command="report")

    p = sub.add_parser("sample", parents=[verbose], help="write sample ATL03-like granules",
                       description="Write small synthetic ATL03-like HDF5 granules (and "
                       "optionally a netCDF-4 file) to OUTDIR.")
    p.add_argument("outdir", help="folder to write the samples into (created if missing)")
    p.add_argument("--granules", type=_positive, default=2,
                   help="ATL03-like granules to write (default 2)")
    p.add_argument("--photons", type=_positive, default=None,
                   help="photons per granule, over its six beams (default 200,000: ~10 MB)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the first granule; each granule gets its own track, time and "
                   "values (default 0)")
    p.add_argument("--netcdf", action="store_true", help="also write a netCDF-4 sample")
    p.add_argument("--collection", action="store_true",
                   help="write a collection of daily gridded netCDF-4 granules instead (the "
                   "datacube sample, with one extra granule packed differently)")
    p.add_argument("--days", type=_positive, default=6,
                   help="days in the --collection (default 6)")
    p.set_defaults(command="sample")

    p = sub.add_parser("demo", parents=[verbose], help="sample -> index -> open -> compare",
                       description="Write sample granules into OUTDIR, index them, open one "
                       "with xarray through its sidecar and compare values with h5py.")
    p.add_argument("outdir", nargs="?", default="demo-output",
                   help="folder for the granules and their sidecars (default demo-output); a "
                   "second run finds them up to date")
    p.set_defaults(command="demo")

    p = sub.add_parser("serve", parents=[verbose], help="serve sidecars as Zarr over HTTP",
                       description="Serve every granule indexed under DEST as Zarr v2 "
                       "(/zarr/G/), Zarr v3 (/zarr3/G/) and sharded Zarr v3 (/zarr3-shard/K/G/) "
                       "stores (and each --cube datacube the same way), with a landing page at "
                       "/. Settings also come from H5SIDECAR_* "
                       "variables (H5SIDECAR_TOKEN keeps the token out of the process list).")
    p.add_argument("dest", help="folder or S3 prefix written by `h5sidecar index -o`")
    p.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8000)")
    p.add_argument("--allow", action="append", default=[], metavar="PREFIX",
                   help="also allow reading sources under PREFIX (repeatable; default: only the "
                   "sources listed in DEST's run report)")
    p.add_argument("--token", default=None,
                   help="require 'Authorization: Bearer TOKEN' on every route but /healthz and "
                        "/readyz")
    p.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="allow this browser origin (repeatable; default '*')")
    p.add_argument("--no-cors", action="store_true", help="send no CORS headers")
    p.add_argument("--stac", default=None, metavar="STACDIR",
                   help="serve this catalog (written by `h5sidecar catalog`) under /stac/, with "
                   "a STAC API item search at /stac/search")
    p.add_argument("--stac-backend", default=None, metavar="pgstac:DSN",
                   help="answer /stac/ from the pgstac database at this libpq DSN (loaded with "
                   "`h5sidecar catalog --pgstac DSN`) instead of a catalog folder")
    p.add_argument("--cube", action="append", default=[], metavar="[NAME=]CUBE",
                   help="also serve this datacube (written by `h5sidecar cube`) as /zarr/NAME/, "
                   "... (repeatable; NAME defaults to the file name without .parq/.json)")
    _storage_option_arg(p)
    _record_cache_arg(p)
    p.set_defaults(command="serve")
    _cache_parsers(sub, verbose)
    return parser


def _cache_parsers(sub: Any, verbose: argparse.ArgumentParser) -> None:
    p = sub.add_parser("cache", parents=[verbose], help="list or prune the record cache",
                       description="The record cache keeps, on this machine, a local SQLite "
                       "copy of the record of each object-store DEST read here (index, report, "
                       "prune, catalog, serve), so that a later command reads only what was "
                       "written since. One file per DEST; removing one costs only a full read "
                       "of that record next time.")
    p.set_defaults(command="cache")
    cache = p.add_subparsers(title="actions", metavar="ACTION", dest="action", required=True)
    q = cache.add_parser("list", parents=[verbose], help="show each cache file: its DEST, "
                         "size and last use")
    _cache_folder_arg(q)
    q.add_argument("--json", action="store_true", help="print JSON instead of a table")
    q = cache.add_parser("prune", parents=[verbose], help="remove the cache files not used "
                         "for some days")
    _cache_folder_arg(q)
    q.add_argument("--older-than", type=_non_negative_days, default=None, metavar="DAYS",
                   help="remove the files not used for DAYS days (0: every file; default: "
                   "H5SIDECAR_RECORD_CACHE_MAX_AGE_DAYS, else 30)")
    q.add_argument("--json", action="store_true", help="print the files removed as JSON")


def _cache_folder_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record-cache", metavar="DIR", default=None,
                   help="the cache folder (default: H5SIDECAR_RECORD_CACHE, else "
                   "~/.cache/h5sidecar/records)")


def _non_negative_days(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number of days >= 0, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text}")
    return value


def _sample(text: str) -> int:
    if text.strip().lower() == "all":
        return 0
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 (all), 'all' or a positive number")
    return value


def _all_rows_arg(p: argparse.ArgumentParser) -> None:
    # the threshold is cli._summaries.SUMMARY_ABOVE; not imported: --help loads no table code
    p.add_argument("--all", action="store_true",
                   help="a row for every variable (default above 50 variables: one row per "
                   "top-level group, and each variable with a problem)")


def _storage_option_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-option", action="append", dest="storage_options", default=[],
                   metavar="K=V", type=_key_value,
                   help="fsspec/s3fs option, repeatable; V is parsed as JSON when it can be "
                   "(anon=true); dotted keys nest (client_kwargs.region_name=us-west-2)")


def _record_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record-cache", metavar="DIR|off", default=None,
                   help="folder of the record cache of an object-store DEST (a local SQLite "
                   "copy of its record, so that only what later runs wrote is read again; one "
                   "file per DEST, see `h5sidecar cache list`), or 'off' (every read loads the "
                   "whole record into a temporary copy; the gateway keeps a private one). "
                   "Default: H5SIDECAR_RECORD_CACHE, else ~/.cache/h5sidecar/records")


def record_settings(args: argparse.Namespace) -> RecordSettings:
    """The record settings of a parse: ``--record-cache`` over ``H5SIDECAR_RECORD_*``."""
    from h5sidecar.settings import RecordSettings, from_env

    given = getattr(args, "record_cache", None)
    return from_env(RecordSettings, record_cache="" if given == "off" else given)


def _key_value(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def storage_options(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """``[("a.b", 1), ("c", 2)]`` -> ``{"a": {"b": 1}, "c": 2}`` (None when empty)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out or None
