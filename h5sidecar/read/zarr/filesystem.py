"""``H5SidecarFileSystem``: fsspec protocol ``"h5sidecar"`` exposing a granule as Zarr v2 keys.

It is what fsspec's ``ReferenceFileSystem`` is for kerchunk references, with h5sidecar's read
path underneath: every chunk read goes through one
:class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher` (coalescing, concurrency, retries, allow-list,
freshness guard), and batched reads (``cat`` of many keys, ``cat_ranges``, zarr's
``get_partial_values``) are planned together so neighbouring chunks share requests.

Examples
--------
>>> fs = fsspec.filesystem("h5sidecar", fo="s3://bucket/ATL03_x.h5.parq",
...                        target_options={"anon": False},
...                        remote_options={"anon": False})             # doctest: +SKIP
>>> store = zarr.storage.FsspecStore(fs, read_only=True, path="")    # doctest: +SKIP
>>> zarr.open_group(store, mode="r")["gt1l/heights/h_ph"][:5]       # doctest: +SKIP
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

from fsspec.asyn import AsyncFileSystem

from h5sidecar.credentials import scrub_credentials
from h5sidecar.read._granule_fetch import ReadBatcher
from h5sidecar.read._granule_reader import GranuleReader
from h5sidecar.read.zarr._byte_windows import clamped_window
from h5sidecar.read.zarr._keyspace import ChunkRef, Resolved
from h5sidecar.references import GranuleRefs
from h5sidecar.settings import ReadSettings

__all__ = ["H5SidecarFileSystem"]


class H5SidecarFileSystem(AsyncFileSystem):
    """Read-only filesystem of one granule's Zarr v2 keys, backed by its sidecar.

    Parameters
    ----------
    fo : str, path-like or GranuleRefs
        The sidecar (kerchunk JSON file or Parquet directory, local or remote) or references.
    target_options : mapping, optional
        fsspec options to read the sidecar itself.
    remote_options : mapping, optional
        Options to read the source objects (s3fs-style: ``endpoint_url``, ``key``, ...);
        defaults to ``target_options``.  Credentials are never pickled.
    settings : ReadSettings, optional
        Fetch settings (coalescing, concurrency, retries, allow-list).
    **kwargs
        Passed to :class:`fsspec.asyn.AsyncFileSystem` (``asynchronous``, ``loop``).
    """

    protocol = ("h5sidecar",)
    root_marker = ""
    # Instances are not cached: two different GranuleRefs can have equal reprs (manifests show
    # only their counts), and fsspec's cache tokens are built from reprs.
    cachable = False

    def __init__(
        self,
        fo: str | os.PathLike[str] | GranuleRefs,
        *,
        target_options: Mapping[str, Any] | None = None,
        remote_options: Mapping[str, Any] | None = None,
        settings: ReadSettings | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._target_options = dict(target_options or {})
        self._remote_options = (
            dict(remote_options) if remote_options is not None else dict(self._target_options)
        )
        # chunk_cache=None: as a plain fsspec filesystem it caches nothing (fsspec's own caches
        # wrap it when asked)
        self.reader = GranuleReader.open(fo, settings=settings,
                                         storage_options=self._target_options,
                                         remote_options=self._remote_options, chunk_cache=None)
        self._sidecar = self.reader.sidecar
        self.refs = self.reader.refs
        self.settings = self.reader.settings
        self.keyspace = self.reader.keys(2)
        self.fetcher = self.reader.fetcher
        # zarr's FsspecStore reads each chunk with its own _cat_file call, concurrently: the
        # batcher turns one event-loop turn of them into one planned fetch
        self._batcher = ReadBatcher(self.fetcher.fetch)

    def __reduce__(self) -> tuple[Any, ...]:
        # fsspec pickles the constructor arguments; ours may carry credentials, so rebuild from
        # scrubbed options (workers resolve credentials from their environment).
        fo = self._sidecar if self._sidecar is not None else self.refs
        return (
            _rebuild,
            (
                type(self),
                fo,
                scrub_credentials(self._target_options),
                scrub_credentials(self._remote_options),
                self.settings,
            ),
        )

    @property
    def stats(self) -> dict[str, Any]:
        """The fetcher's counters (requests, bytes fetched/used, over-read ratio, retries...)."""
        return self.fetcher.stats.snapshot()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        path = path.removeprefix("h5sidecar://")
        return path.strip("/")

    # -- metadata ---------------------------------------------------------------------------------
    def _resolve(self, path: str) -> Resolved:
        return self.keyspace.resolve(self._strip_protocol(path))

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        key = self._strip_protocol(path)
        if self.keyspace.is_node(key):
            return {"name": key, "size": 0, "type": "directory"}
        await self.keyspace.load_manifests([key])  # lazy sidecars: never block fsspec's loop
        size = self.keyspace.size(key)
        if size is None:
            raise FileNotFoundError(path)
        return {"name": key, "size": size, "type": "file"}

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        node = self._strip_protocol(path)
        if not self.keyspace.is_node(node):
            if self.keyspace.size(node) is not None:
                info = await self._info(node)
                return [info] if detail else [node]
            raise FileNotFoundError(path)
        names = [f"{node}/{n}" if node else n for n in self.keyspace.list_dir(node)]
        if not detail:
            return names
        return [await self._info(n) for n in names]

    # -- reads ---------------------------------------------------------------------------------
    async def _fetch(self, requests: list[ChunkRef]) -> list[Any]:
        return await self.fetcher.fetch(requests) if requests else []

    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        await self.keyspace.load_manifests([self._strip_protocol(path)])
        ref = self._resolve(path)
        if ref is None:
            raise FileNotFoundError(path)
        size = len(ref) if isinstance(ref, bytes) else ref[2]
        lo, hi = clamped_window(size, start, end)
        if isinstance(ref, bytes):
            return ref[lo:hi]
        if hi == lo:
            return b""
        return bytes(await self._batcher.read((ref[0], ref[1] + lo, hi - lo)))

    async def _cat_ranges(
        self,
        paths: list[str],
        starts: Any,
        ends: Any,
        max_gap: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[Any]:
        """Byte ranges of many keys, fetched as ONE planned batch (neighbours coalesce)."""
        n = len(paths)
        starts = starts if isinstance(starts, list) else [starts] * n
        ends = ends if isinstance(ends, list) else [ends] * n
        out: list[Any] = [None] * n
        requests: list[ChunkRef] = []
        where: list[int] = []
        await self.keyspace.load_manifests(self._strip_protocol(list(paths)))
        for i, (path, start, end) in enumerate(zip(paths, starts, ends, strict=True)):
            ref = self._resolve(path)
            if ref is None:
                exc = FileNotFoundError(path)
                if on_error == "raise":
                    raise exc
                out[i] = exc
                continue
            size = len(ref) if isinstance(ref, bytes) else ref[2]
            lo, hi = clamped_window(size, start, end)
            if isinstance(ref, bytes):
                out[i] = ref[lo:hi]
            elif hi == lo:
                out[i] = b""
            else:
                requests.append((ref[0], ref[1] + lo, hi - lo))
                where.append(i)
        for i, data in zip(where, await self._fetch(requests), strict=True):
            out[i] = bytes(data)
        return out

    async def _cat(
        self,
        path: Any,
        recursive: bool = False,
        on_error: str = "raise",
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Whole values of one or many keys (many: one batch, returned as a dict)."""
        paths = await self._expand_path(path, recursive=recursive)
        files = [p for p in paths if not self.keyspace.is_node(p)]
        data = await self._cat_ranges(files, None, None, on_error=on_error)
        if isinstance(path, list) or len(paths) > 1 or paths[0] != self._strip_protocol(path):
            return {
                p: d
                for p, d in zip(files, data, strict=True)
                if not (on_error == "omit" and isinstance(d, Exception))
            }
        if isinstance(data[0], Exception):
            raise data[0]
        return data[0]

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> io.BytesIO:
        if mode != "rb":
            raise PermissionError(
                f"h5sidecar filesystems are read-only (asked to open {path!r} with mode {mode!r})"
            )
        return io.BytesIO(self.cat_file(path))


def _rebuild(
    cls: type[H5SidecarFileSystem],
    fo: Any,
    target_options: dict[str, Any],
    remote_options: dict[str, Any],
    settings: ReadSettings,
) -> H5SidecarFileSystem:
    return cls(fo, target_options=target_options, remote_options=remote_options, settings=settings)
