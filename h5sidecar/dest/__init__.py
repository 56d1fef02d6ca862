"""The DEST: where sidecars are written, and the record of what was indexed there.

One concept used by the workflows (which write it), the gateway and the catalog (which read it):
the run report's records, the local record (an SQLite database), the object-store record
(append-only Parquet parts and their local mirror), the lock, the walk over DEST's sidecars, and
the read-only views the gateway and the catalog serve from.

Its modules are private; the gateway, the catalog and the workflows import the names below from
this front (they load on first use, so ``import h5sidecar.dest`` stays cheap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from h5sidecar._lazy import lazy_exports

_LAZY: dict[str, str] = {
    # for h5sidecar's own layers (served by the front, not advertised in __all__):
    "CacheFile": "h5sidecar.dest._record_cache_files",
    "DEFAULT_PATTERNS": "h5sidecar.dest._locations",
    "ErrorRecord": "h5sidecar.dest._report",
    "FillProgress": "h5sidecar.dest._record_cache",
    "GranuleInfo": "h5sidecar.dest._sidecar_listing",
    "GranuleResult": "h5sidecar.dest._report",
    "LOOKUP_BATCH": "h5sidecar.dest._record_db",
    "Mirror": "h5sidecar.dest._record_store",
    "RECORD_NAME": "h5sidecar.dest._locations",
    "REPORT_NAME": "h5sidecar.dest._locations",
    "Record": "h5sidecar.dest._record_db",
    "RecordAllowList": "h5sidecar.dest._record_view",
    "RecordView": "h5sidecar.dest._record_view",
    "RunRecorder": "h5sidecar.dest._report_io",
    "RunReport": "h5sidecar.dest._report",
    "SIDECAR_SUFFIX": "h5sidecar.dest._locations",
    "StagedSidecars": "h5sidecar.dest._dest_walk",
    "URL_LIST_OPTION": "h5sidecar.dest._report",
    "cached_record": "h5sidecar.dest._record_store",
    "create_local_dest": "h5sidecar.dest._locations",
    "dest_fs": "h5sidecar.dest._sidecar_listing",
    "dest_lock": "h5sidecar.dest._dest_lock",
    "entry_mtime": "h5sidecar.dest._dest_walk",
    "error_record": "h5sidecar.dest._report",
    "source_roots": "h5sidecar.dest._report",
    "file_lock": "h5sidecar.dest._dest_lock",
    "filesystem": "h5sidecar.dest._locations",
    "forget_sidecars": "h5sidecar.dest._report_io",
    "has_parts": "h5sidecar.dest._record_store",
    "is_remote": "h5sidecar.dest._locations",
    "iter_sidecars": "h5sidecar.dest._sidecar_listing",
    "join_url": "h5sidecar.dest._locations",
    "latest_rows": "h5sidecar.dest._record_store",
    "list_cache": "h5sidecar.dest._record_cache_files",
    "list_indexed": "h5sidecar.dest._sidecar_listing",
    "list_parts": "h5sidecar.dest._record_parts",
    "newest_key": "h5sidecar.dest._record_store",
    "parts_root": "h5sidecar.dest._record_parts",
    "newest_part_mtime": "h5sidecar.dest._record_store",
    "open_record": "h5sidecar.dest._record_db",
    "prune_cache_files": "h5sidecar.dest._record_cache_files",
    "read_report": "h5sidecar.dest._report_io",
    "record_path": "h5sidecar.dest._record_db",
    "report_stream": "h5sidecar.dest._report_io",
    "roots_of": "h5sidecar.dest._record_store",
    "safe_name": "h5sidecar.dest._record_view",
    "scratch_db": "h5sidecar.dest._dest_walk",
    "sidecar_size": "h5sidecar.dest._sidecar_listing",
    "sidecar_stamp": "h5sidecar.dest._locations",
    "scratch_folder": "h5sidecar.dest._record_store",
    "store_of": "h5sidecar.dest._record_store",
    "written_since": "h5sidecar.dest._record_store",
    "walk_dest": "h5sidecar.dest._dest_walk",
    "write_report_json": "h5sidecar.dest._report_io",
    "write_report": "h5sidecar.dest._report_io",
}

__all__: list[str] = []


if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from h5sidecar.dest._dest_lock import dest_lock as dest_lock
    from h5sidecar.dest._dest_lock import file_lock as file_lock
    from h5sidecar.dest._dest_walk import StagedSidecars as StagedSidecars
    from h5sidecar.dest._dest_walk import entry_mtime as entry_mtime
    from h5sidecar.dest._dest_walk import scratch_db as scratch_db
    from h5sidecar.dest._dest_walk import walk_dest as walk_dest
    from h5sidecar.dest._locations import DEFAULT_PATTERNS as DEFAULT_PATTERNS
    from h5sidecar.dest._locations import RECORD_NAME as RECORD_NAME
    from h5sidecar.dest._locations import REPORT_NAME as REPORT_NAME
    from h5sidecar.dest._locations import SIDECAR_SUFFIX as SIDECAR_SUFFIX
    from h5sidecar.dest._locations import create_local_dest as create_local_dest
    from h5sidecar.dest._locations import filesystem as filesystem
    from h5sidecar.dest._locations import is_remote as is_remote
    from h5sidecar.dest._locations import join_url as join_url
    from h5sidecar.dest._locations import sidecar_stamp as sidecar_stamp
    from h5sidecar.dest._record_cache import FillProgress as FillProgress
    from h5sidecar.dest._record_cache_files import CacheFile as CacheFile
    from h5sidecar.dest._record_cache_files import list_cache as list_cache
    from h5sidecar.dest._record_cache_files import prune_cache_files as prune_cache_files
    from h5sidecar.dest._record_db import LOOKUP_BATCH as LOOKUP_BATCH
    from h5sidecar.dest._record_db import Record as Record
    from h5sidecar.dest._record_db import open_record as open_record
    from h5sidecar.dest._record_db import record_path as record_path
    from h5sidecar.dest._record_parts import list_parts as list_parts
    from h5sidecar.dest._record_parts import parts_root as parts_root
    from h5sidecar.dest._record_store import Mirror as Mirror
    from h5sidecar.dest._record_store import cached_record as cached_record
    from h5sidecar.dest._record_store import has_parts as has_parts
    from h5sidecar.dest._record_store import latest_rows as latest_rows
    from h5sidecar.dest._record_store import newest_key as newest_key
    from h5sidecar.dest._record_store import newest_part_mtime as newest_part_mtime
    from h5sidecar.dest._record_store import roots_of as roots_of
    from h5sidecar.dest._record_store import scratch_folder as scratch_folder
    from h5sidecar.dest._record_store import store_of as store_of
    from h5sidecar.dest._record_store import written_since as written_since
    from h5sidecar.dest._record_view import RecordAllowList as RecordAllowList
    from h5sidecar.dest._record_view import RecordView as RecordView
    from h5sidecar.dest._record_view import safe_name as safe_name
    from h5sidecar.dest._report import URL_LIST_OPTION as URL_LIST_OPTION
    from h5sidecar.dest._report import ErrorRecord as ErrorRecord
    from h5sidecar.dest._report import GranuleResult as GranuleResult
    from h5sidecar.dest._report import RunReport as RunReport
    from h5sidecar.dest._report import error_record as error_record
    from h5sidecar.dest._report import source_roots as source_roots
    from h5sidecar.dest._report_io import RunRecorder as RunRecorder
    from h5sidecar.dest._report_io import forget_sidecars as forget_sidecars
    from h5sidecar.dest._report_io import read_report as read_report
    from h5sidecar.dest._report_io import report_stream as report_stream
    from h5sidecar.dest._report_io import write_report as write_report
    from h5sidecar.dest._report_io import write_report_json as write_report_json
    from h5sidecar.dest._sidecar_listing import GranuleInfo as GranuleInfo
    from h5sidecar.dest._sidecar_listing import dest_fs as dest_fs
    from h5sidecar.dest._sidecar_listing import iter_sidecars as iter_sidecars
    from h5sidecar.dest._sidecar_listing import list_indexed as list_indexed
    from h5sidecar.dest._sidecar_listing import sidecar_size as sidecar_size


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
