"""The gateway's view of DEST: which granules it serves and which sources it may read.

``h5sidecar index SOURCE -o DEST`` writes one sidecar per granule (``DEST/<name>.parq`` or
``DEST/<name>.json``) and a run report: the record ``DEST/_h5sidecar.sqlite`` of a local DEST,
Parquet parts under ``DEST/_h5sidecar_record/`` on an object store (``DEST/_report.json`` where
an earlier version wrote it).  The gateway serves exactly the
sidecars found under DEST (nothing outside it is ever opened as a sidecar), named by their path
relative to DEST without the sidecar suffix.

Cubes (combined references written by ``h5sidecar cube``) are served beside the granules,
under the names the operator gives them (``h5sidecar serve DEST --cube [NAME=]CUBE``); a cube
written inside DEST is listed as a cube, not as a granule.  A cube written inside DEST and not
named with ``--cube`` is served under its sidecar name like a granule.

Sidecars are untrusted: anyone able to drop a file into DEST could point a reference at
``file:///etc/passwd`` or at another bucket.  So the sources the gateway may read come from the
*report* (written by the indexer: the source root of every run merged into it, and the source
URL of every granule indexed), plus the prefixes the operator allows explicitly (``--allow``),
never from the sidecars themselves.

A local DEST with a record is not listed: granules are looked up by name in the record
(:mod:`h5sidecar.dest._record_view`), one indexed query per request, and a sidecar present under
DEST but not recorded is still found by name (one ``stat``).  An object-store DEST with a record
in parts is served the same way from the record cache on this machine (the parts loaded into
SQLite, refreshed every ``refresh_seconds`` and on a miss: one LIST, then only new parts), not
from a listing and a tuple of every source.  Other DESTs (a folder of sidecars without a
record, a store without parts) are listed whole, every ``refresh_seconds``: the listing is
held as a sorted list, about 200 bytes per granule.

With the record cache turned off (``--record-cache off``) or unusable (a read-only or full
disk), the gateway keeps a cache of its own in a private temporary folder, removed when it
stops (or swept once stale after a kill): lookups and refreshes stay those of the cache (a
refresh reads only the new parts), never a listing and a tuple of every source.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import sqlite3
import threading
import time
import weakref
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from typing import Any

import fsspec

from h5sidecar.credentials import fsspec_options
from h5sidecar.dest import FillProgress, RecordView, cached_record, safe_name, scratch_folder
from h5sidecar.errors import RecordBusyError, SourceReadError
from h5sidecar.gateway._dest_snapshot import DestSnapshot
from h5sidecar.gateway._report_sources import REPORT_NAME, report_sources
from h5sidecar.settings import RecordSettings, from_env

__all__ = ["REPORT_NAME", "SIDECAR_SUFFIXES", "DestIndex", "DestSnapshot"]

log = logging.getLogger("h5sidecar.gateway")

#: The record of a local DEST (an SQLite database written by ``h5sidecar index``; its schema is
#: in :mod:`h5sidecar.dest._record_db`, above this package): it replaces the report there.
RECORD_NAME = "_h5sidecar.sqlite"
#: File-name suffix of each sidecar format written by ``h5sidecar index``.
SIDECAR_SUFFIXES = (".parq", ".json")
#: Folders below DEST visited when listing (sidecars of nested granule names live deeper).
MAX_DEPTH = 8


def _is_hidden(name: str) -> bool:
    # interrupted writes leave ".name.tmp-..." siblings; "_report.json" is not a sidecar
    return name.startswith((".", "_"))


class DestIndex:
    """Lists DEST (local folder or ``s3://`` prefix) and reads its report; refreshes on demand.

    Parameters
    ----------
    dest : str
        The folder or S3 prefix given to ``h5sidecar index -o``.
    storage_options : mapping, optional
        fsspec options to list DEST and read the report.
    refresh_seconds : float
        A listing older than this is redone before answering :meth:`snapshot`.
    cubes : mapping, optional
        Cube name -> URL of the cube's references (local path or ``s3://``), served beside the
        granules; a cube inside DEST is not listed as a granule too.
    record_settings : RecordSettings, optional
        The record cache of an object-store DEST (default: ``from_env(RecordSettings)``); with
        the cache off, a private one is kept for the life of this object (see :meth:`close`).
    """

    def __init__(
        self,
        dest: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        refresh_seconds: float = 30.0,
        cubes: Mapping[str, str] | None = None,
        record_settings: RecordSettings | None = None,
    ) -> None:
        self._record_settings = record_settings or from_env(RecordSettings)
        self._private: str | None = None  # the folder of a private record cache, once made
        self._options = dict(storage_options or {})
        self._provider = self._options.get("credential_provider") is not None
        self._fs, root = fsspec.core.url_to_fs(dest, **fsspec_options(dest, storage_options))
        self.cubes = {n: self._canonical(u, storage_options) for n, u in (cubes or {}).items()}
        self._hidden: set[str] = set()  # granule names hidden by a cube (warned once)
        self.root = root.rstrip("/") or "/"
        self.dest = dest
        self.refresh_seconds = refresh_seconds
        self._lock = threading.Lock()
        self._snapshot: DestSnapshot | None = None
        self._record: RecordView | None = None
        self._seen = False
        #: How far the first fill of DEST's record cache got (an object-store DEST whose cache
        #: was empty): what the gateway says while it warms up.
        self.fill = FillProgress()

    @property
    def counted(self) -> int | None:
        """Granules in the record when last counted (None before the first count)."""
        return None if self._record is None else self._record.counted

    @property
    def fs(self) -> Any:
        """The filesystem of DEST; with a ``credential_provider``, made again when the
        provider's keys change (fsspec caches one instance per set of keys), so a long-running
        gateway outlives temporary keys."""
        if self._provider:
            self._fs = fsspec.core.url_to_fs(self.dest, **fsspec_options(self.dest, self._options))[0]
        return self._fs

    def url_of(self, path: str) -> str:
        """The URL of a listed path (``s3://bucket/key`` or a local path) for fsspec/readers."""
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        return path if "file" in protocols else self.fs.unstrip_protocol(path)

    @staticmethod
    def _canonical(url: str, storage_options: Mapping[str, Any] | None) -> str:
        """``url`` as a listing spells it (absolute local path, ``s3://bucket/key``)."""
        fs, path = fsspec.core.url_to_fs(url, **fsspec_options(url, storage_options))
        path = path.rstrip("/")
        protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        return path if "file" in protocols else fs.unstrip_protocol(path)

    def snapshot(self, *, max_age: float | None = None) -> DestSnapshot:
        """The current listing, redone when older than ``max_age`` (default ``refresh_seconds``).

        Blocking (file system I/O): call it from a thread in async code.
        """
        limit = self.refresh_seconds if max_age is None else max_age
        with self._lock:
            snap = self._snapshot
            if snap is None or time.monotonic() - snap.listed_at > limit:
                snap = self._snapshot = self._list()
                log.info("DEST %s: %s granule(s)%s, %d allowed source(s)%s", self.dest, snap.count,
                         " in its record" if snap.record else "", len(snap.sources),
                         "" if snap.report_found else " (no run report)")  # fmt: skip
            return snap

    # -- listing -------------------------------------------------------------------------------
    def _local_record(self) -> str | None:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        return f"{self.root}/{RECORD_NAME}" if "file" in protocols else None

    def _list(self) -> DestSnapshot:
        path = self._local_record()
        if path is not None and (self._record is not None or os.path.exists(path)):
            # once served from its record, DEST stays so: a removed record is an error
            # (reported by /healthz), not a silent fall back to listing a million sidecars
            if not os.path.isdir(self.root):
                raise SourceReadError(f"DEST {self.dest} is gone: the gateway cannot serve "
                                      "until it is back")  # fmt: skip
            self._record = self._record or RecordView(path, self.dest)
            return self._from_record(self._record, relist_on_miss=False)
        cached = None if path is not None else self._cached_record()
        if cached is not None:
            if self._record is None or self._record.path != cached:
                self._record = RecordView(cached, self.dest)
            return self._from_record(self._record, relist_on_miss=True)
        return self._walk()

    def _from_record(self, record: RecordView, *, relist_on_miss: bool) -> DestSnapshot:
        for name in self.cubes:
            if name not in self._hidden and record.locate([name]) is not None:
                self._hidden.add(name)
                log.warning("granule %s is hidden by the cube of the same name: name the "
                            "cube otherwise (--cube NAME=PATH)", name)  # fmt: skip
        return DestSnapshot({}, record.roots(), True, time.monotonic(), dict(self.cubes), record,
                            record.recount(), relist_on_miss=relist_on_miss)  # fmt: skip

    def _cached_record(self) -> str | None:
        """The record cache of an object-store DEST, refreshed (None: no parts, list DEST)."""
        if self._private is None and self._record_settings.cache_folder() is None:
            self._use_private_cache("the record cache is off")
        # only the first fill is counted: a refresh is quick, and the gateway serves meanwhile
        progress = self.fill if self._record is None else None
        try:
            try:
                return cached_record(self.fs, self.root, self._record_settings,
                                     progress=progress)  # fmt: skip
            except sqlite3.DatabaseError as exc:  # the cache's own failure, not the store's
                if self._private is not None:
                    raise
                # the shared cache cannot be made or read (read-only or full disk, a damaged
                # file): a private one, rather than holding every source in memory
                self._use_private_cache(f"the record cache is unusable ({exc})")
                return cached_record(self.fs, self.root, self._record_settings,
                                     progress=progress)  # fmt: skip
        except RecordBusyError as exc:
            if self._record is None:
                raise SourceReadError(f"the record cache of DEST {self.dest} is busy: "
                                      f"{exc}") from exc  # fmt: skip
            # another process holds the cache in a long refresh: serve what it held
            log.warning("the record cache of DEST %s is busy (%s): serving it as it was",
                        self.dest, exc)  # fmt: skip
            return self._record.path
        except (OSError, sqlite3.DatabaseError, ValueError) as exc:  # the store cannot be
            # listed or read, or a part is damaged (Arrow's errors are ValueErrors)
            raise SourceReadError(f"reading the record of {self.dest} failed: {exc}") from exc

    def _use_private_cache(self, why: str) -> None:
        """From now on, keep DEST's record cache in a private temporary folder (removed by
        :meth:`close`, or when this object is collected or the process exits)."""
        folder = self._private = scratch_folder()
        weakref.finalize(self, shutil.rmtree, folder, True)
        self._record_settings = RecordSettings(record_cache=folder, record_cache_max_age_days=0.0)
        log.info("%s: DEST %s's record is kept in a private cache (%s) while serving", why,
                 self.dest, folder)  # fmt: skip

    def close(self) -> None:
        """Remove the private record cache, if one was made (the gateway stops)."""
        folder, self._private = self._private, None
        if folder is not None:
            self._record, self._snapshot = None, None
            self._record_settings = RecordSettings(record_cache="")  # a new one if used again
            shutil.rmtree(folder, ignore_errors=True)

    def probe(self, snapshot: DestSnapshot) -> None:
        """Raise unless DEST (and its record) can be read now; lists nothing."""
        if snapshot.record is not None:
            if self._local_record() is not None:
                if not os.path.isdir(self.root):
                    raise SourceReadError(f"DEST {self.dest} is gone: the gateway cannot serve "
                                          "until it is back")  # fmt: skip
                snapshot.record.probe()
                return
            snapshot.record.probe()  # the cache of an object-store DEST: the store is probed too
        try:
            found = self.fs.exists(self.root)
        except OSError as exc:
            raise SourceReadError(f"DEST {self.dest} cannot be read: {exc}") from exc
        # a DEST not written yet is empty, not gone: only one seen before can be gone
        self._seen = self._seen or found
        if self._seen and not found:
            raise SourceReadError(f"DEST {self.dest} is gone: the gateway cannot serve "
                                  "until it is back")  # fmt: skip

    def _walk(self) -> DestSnapshot:
        self.fs.invalidate_cache()
        sidecars: dict[str, str] = {}
        level = [self.root]
        for _ in range(MAX_DEPTH):
            below: list[str] = []
            for folder in level:
                for entry in self._ls(folder):
                    path = entry["name"].rstrip("/")
                    base = posixpath.basename(path)
                    if _is_hidden(base):
                        continue
                    is_dir = entry.get("type") == "directory"
                    suffix = next((s for s in SIDECAR_SUFFIXES if base.endswith(s)), None)
                    if (suffix == ".parq" and is_dir) or (suffix == ".json" and not is_dir):
                        name = posixpath.relpath(path, self.root)[: -len(suffix)]
                        sidecars[name] = self.url_of(path)
                    elif is_dir:
                        below.append(path)
            if not below:
                break
            level = below
        sources, found = report_sources(self.fs, self.root, self.dest)
        granules = self._granules_only(sidecars)
        return DestSnapshot(granules, sources, found, time.monotonic(), dict(self.cubes),
                            count=len(granules), names=tuple(granules))  # fmt: skip

    def _granules_only(self, sidecars: dict[str, str]) -> dict[str, str]:
        """The sidecars but the cubes: a cube inside DEST is listed once, as a cube."""
        urls = set(self.cubes.values())
        out = {}
        for name, url in sorted(sidecars.items()):
            if url in urls:
                continue
            if name in self.cubes:  # the operator named a cube so: the cube is served
                if name not in self._hidden:
                    self._hidden.add(name)
                    log.warning("granule %s is hidden by the cube of the same name: name the "
                                "cube otherwise (--cube NAME=PATH)", name)  # fmt: skip
                continue
            out[name] = url
        return out

    def _ls(self, folder: str) -> list[dict[str, Any]]:
        try:
            return list(self.fs.ls(folder, detail=True))
        except FileNotFoundError:
            return []
        except OSError as exc:  # network, permissions: the gateway cannot see DEST
            raise SourceReadError(
                f"listing DEST {self.dest} failed: {exc}. Check the endpoint, credentials and "
                "storage options the gateway was started with."
            ) from exc

    # -- lookup ----------------------------------------------------------------------------------
    def find(self, snapshot: DestSnapshot, path: str) -> tuple[str, str, str | None] | None:
        """``(name, rest, source)`` for a request path ``"<name>/<key>"``: the longest granule
        or cube name it starts with; ``source`` is the recorded source of a recorded granule.

        Blocking for a DEST with a record (one query): call it from a thread in async code.
        """
        heads = [path]
        pos = path.rfind("/")
        while pos > 0:
            heads.append(path[:pos])
            pos = path.rfind("/", 0, pos)
        if snapshot.record is None:
            head = next((h for h in heads if snapshot.url_of(h) is not None), None)
            return None if head is None else (head, path[len(head) + 1 :], None)
        found = snapshot.record.locate(heads)
        best = found.name if found is not None else ""
        for head in heads:
            if len(head) < len(best):
                break
            # a cube (it hides a granule of its name), or a sidecar under DEST the record does
            # not hold (written by hand, or a cube built into DEST): found as a listing would
            if head in snapshot.cubes or (head != best and self._sidecar_file(head) is not None):
                return head, path[len(head) + 1 :], None
        if found is None:
            return None
        return found.name, path[len(found.name) + 1 :], found.source

    def locate(self, snapshot: DestSnapshot, name: str) -> tuple[str, str | None] | None:
        """``(url, source)`` of the references of granule or cube ``name`` (see :meth:`find`)."""
        url = snapshot.url_of(name)
        if url is not None or snapshot.record is None:
            return None if url is None else (url, None)
        found = snapshot.record.locate([name])
        if found is not None:
            return self.url_of(f"{self.root}/{found.name}{found.suffix}"), found.source
        path = self._sidecar_file(name)
        return None if path is None else (self.url_of(path), None)

    def _sidecar_file(self, name: str) -> str | None:
        """A sidecar of a local DEST not in its record (written by hand), found by name (one
        ``stat``; on an object store that would be a request per lookup: not looked for)."""
        if not safe_name(name) or self._local_record() is None:
            return None
        base = f"{self.root}/{name}"
        if os.path.isdir(base + ".parq"):
            path = base + ".parq"
        elif os.path.isfile(base + ".json"):
            path = base + ".json"
        else:
            return None
        # a cube written into DEST is served under its cube name only, as a listing does
        return None if self.url_of(path) in self.cubes.values() else path

    def page(self, snapshot: DestSnapshot, after: str, limit: int, *, prefix: str = "",
             contains: str = "") -> list[str]:
        """Up to ``limit`` granule names after ``after`` (code-point order), starting with
        ``prefix`` and holding ``contains``.  Blocking for a DEST with a record."""
        if snapshot.record is not None:
            return snapshot.record.page(after, limit, prefix=prefix, contains=contains)
        names = snapshot.names
        out: list[str] = []
        start = bisect_right(names, after)
        if prefix:
            start = max(start, bisect_left(names, prefix))
        for name in names[start:]:
            if prefix and not name.startswith(prefix):
                break
            if contains in name:
                out.append(name)
                if len(out) >= limit:
                    break
        return out
