"""One granule as the gateway holds it: its sidecar, its granule reader (one fetcher, the key
space of each Zarr view), and the metadata documents each view serves (consolidated per group,
sharded on request).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import ujson

from h5sidecar.gateway._http_rules import BadRequestError
from h5sidecar.gateway._shard import MAX_SHARD_FACTOR, ShardLayout, sharded_documents
from h5sidecar.read import ChunkRef, GranuleKeys, GranuleReader, RechunkSpec, source_key
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import ArrayRefs, GranuleRefs, key_problem, key_safe_name
from h5sidecar.settings import ReadSettings
from h5sidecar.sources import ChunkFetcher

__all__ = ["GranuleEntry", "Resolved", "View"]


def _dumps(obj: object) -> bytes:
    # the options of the key space's own documents (and of the JSON sidecar writer)
    return ujson.dumps(obj, escape_forward_slashes=False, ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True, slots=True)
class View:
    """Which Zarr view of a granule a request addresses.

    Attributes
    ----------
    zarr_format : 2 or 3
    shard : int
        Chunks per shard along the first dimension (v3 only); 0 serves chunks unsharded.
    rechunk : RechunkSpec or None
        Virtual re-chunking of plain arrays (:mod:`~h5sidecar.gateway._rechunk_view`).
    """

    zarr_format: Literal[2, 3] = 2
    shard: int = 0
    rechunk: RechunkSpec | None = None

    def __post_init__(self) -> None:
        if self.shard and self.zarr_format != 3:
            raise BadRequestError("virtual shards exist only in the Zarr v3 view (/zarr3/...)")
        if self.shard and self.rechunk is not None:
            raise BadRequestError("a view is either sharded or re-chunked, not both")
        if not 0 <= self.shard <= MAX_SHARD_FACTOR:
            raise BadRequestError(
                f"chunks per shard must lie in 1..{MAX_SHARD_FACTOR}, got {self.shard}"
            )

    @property
    def name(self) -> str:
        """``"v2"``, ``"v3"``, ``"v3-shard<K>"`` or ``"v<N>-rechunk<spec>"`` (for messages,
        ETags and cache keys)."""
        rechunk = f"-rechunk{self.rechunk.name}" if self.rechunk is not None else ""
        return f"v{self.zarr_format}" + (f"-shard{self.shard}" if self.shard else "") + rechunk


@dataclass(frozen=True, slots=True)
class Resolved:
    """What one key of one view holds, known without reading the source.

    Attributes
    ----------
    kind : "metadata", "chunk" or "shard"
    size : int
        Size of the full value in bytes.
    etag : str
        Strong ETag: the document's digest, or the source identity + view + key + reference.
    data : bytes or None
        The value when held in memory (documents, inline chunks).
    ref : (url, offset, length) or None
        The chunk's bytes in the source.
    layout : ShardLayout or None
        The pieces of a virtual shard.
    """

    granule: str
    key: str
    view: View
    kind: Literal["metadata", "chunk", "shard"]
    size: int
    etag: str
    data: bytes | None = None
    ref: ChunkRef | None = None
    layout: ShardLayout | None = None
    fetcher: ChunkFetcher | None = None
    source_id: str = ""

    @property
    def needs_upstream(self) -> bool:
        """True when serving the whole value reads a source."""
        return self.data is None


class GranuleEntry:
    """A granule's references and its Zarr views (v3 built on first use).

    Parameters
    ----------
    name, sidecar : str
        Granule name under DEST and the URL of its sidecar.
    identity : tuple
        The sidecar's identity when it was read (size + ETag/mtime).
    refs : GranuleRefs
    read_settings : ReadSettings
        Settings of the fetcher (allow-list included).
    storage_options : mapping
        Options to read the sources.
    """

    def __init__(
        self,
        name: str,
        sidecar: str,
        identity: tuple[Any, ...],
        refs: GranuleRefs,
        read_settings: ReadSettings,
        storage_options: dict[str, Any],
    ) -> None:
        self.name = name
        self.sidecar = sidecar
        self.identity = identity
        self.refs = refs
        self.checked_at = time.monotonic()
        # a cube's: a digest of every member's identity (a rebuilt cube never reuses the
        # cached chunks or ETags of a member replaced since)
        self.source_id = source_key(refs)
        # chunk_cache=None: the gateway keeps hot chunks in its own cache, bounded by
        # GatewaySettings.cache_bytes, not in the process-wide one
        self.reader = GranuleReader(refs, settings=read_settings, storage_options=storage_options,
                                    chunk_cache=None)

    def model_key(self, key: str) -> str:
        """``key`` with its node names written as the sidecar writes them.

        A name the indexer escaped (``.zarray`` -> ``%2Ezarray``, ``a#b`` -> ``a%23b``) reaches
        the gateway as its HDF5 name from clients that do not percent-encode Zarr keys
        (fsspec's HTTP client under zarr-python sends ``%2E`` as ``.`` and ``%23`` as sent, which
        the server decodes): such a name is taken for the node whose escaped name it has.  The
        indexer never gives one node the escaped form of another's name, so this is never
        ambiguous.  The last name (a metadata key or a chunk index) is never changed.
        """
        parts = key.split("/")
        if all(key_problem(p) is None for p in parts[:-1]):
            return key
        nodes = (self.refs.groups, self.refs.arrays)
        prefix = ""
        for i, part in enumerate(parts[:-1]):
            path = f"{prefix}/{part}" if prefix else part
            if not any(path in n for n in nodes):
                escaped = f"{prefix}/{key_safe_name(part)}" if prefix else key_safe_name(part)
                if not any(escaped in n for n in nodes):
                    break
                parts[i], path = key_safe_name(part), escaped
            if path in self.refs.arrays:
                break  # what follows is a chunk key
            prefix = path
        return "/".join(parts)

    # -- views --------------------------------------------------------------------------------
    @property
    def fetcher(self) -> ChunkFetcher:
        """The fetcher every view of this granule reads with (one allow-list, one freshness
        state)."""
        return self.reader.fetcher

    def store(self, zarr_format: Literal[2, 3] = 2) -> SidecarStore:
        """The SidecarStore serving ``zarr_format`` over this granule's reader (built on first
        use)."""
        return SidecarStore.for_reader(self.reader, zarr_format)

    def has_view(self, zarr_format: Literal[2, 3]) -> bool:
        """True when the key space of ``zarr_format`` is built."""
        return self.reader.has_keys(zarr_format)

    def keys(self, zarr_format: Literal[2, 3]) -> GranuleKeys:
        """The key space of ``zarr_format``."""
        return self.reader.keys(zarr_format)

    @property
    def nbytes(self) -> int:
        """Approximate memory held: manifests + metadata documents (x2 for parsed objects)."""
        self.keys(2)  # the v2 view is always served: charged from the start
        docs = sum(len(d) for f in (2, 3) if self.has_view(f)
                   for d in self.keys(f).documents.values())  # fmt: skip
        return self.refs.nbytes + 2 * docs

    def unsupported_reason(self, zarr_format: Literal[2, 3], key: str) -> str:
        """Why the array of ``key`` is absent from the view (v3 cannot express some types)."""
        unsupported = self.keys(zarr_format).unsupported
        path = key.rpartition("/")[0]
        while path:
            if path in unsupported:
                return unsupported[path]
            path = path.rpartition("/")[0]
        return ""

    # -- documents ----------------------------------------------------------------------------
    def document(self, view: View, key: str) -> bytes | None:
        """The metadata document ``key`` of ``view``, or None when ``key`` is not one."""
        if view.zarr_format == 2:
            docs = self.keys(2).documents
            if key in docs:
                return docs[key]
            if key.endswith("/.zmetadata"):
                return self._group_zmetadata(key[: -len("/.zmetadata")])
            return None
        if key != "zarr.json" and not key.endswith("/zarr.json"):
            return None
        node = key[: -len("zarr.json")].rstrip("/")
        docs = self.keys(3).documents
        if key not in docs:
            return None
        if node in self.refs.groups and node:
            doc: dict[str, Any] | None = self._group_doc_v3(node)
        elif view.shard or node == "":
            doc = ujson.loads(docs[key])
        else:
            return docs[key]
        if view.shard:
            doc = sharded_documents({key: doc}, view.shard)[key]
        return _dumps(doc)

    def is_synthesized(self, view: View, key: str) -> bool:
        """True when :meth:`document` builds the document per request (worth caching)."""
        return not (view.zarr_format == 2 and key in self.keys(2).documents) and not (
            view.zarr_format == 3 and not view.shard and key in self.keys(3).documents
            and key[: -len("zarr.json")].rstrip("/") not in self.refs.groups
        )  # fmt: skip

    def _group_zmetadata(self, group: str) -> bytes | None:
        """Consolidated v2 metadata of the subtree of ``group`` (keys relative to it)."""
        if group not in self.refs.groups or not group:
            return None
        prefix = group + "/"
        meta = {k[len(prefix) :]: v for k, v in self.refs.zmetadata().items()
                if k.startswith(prefix)}  # fmt: skip
        return _dumps({"zarr_consolidated_format": 1, "metadata": meta})

    def _group_doc_v3(self, group: str) -> dict[str, Any]:
        """A group's v3 document with its subtree as inline consolidated metadata."""
        root = ujson.loads(self.keys(3).documents["zarr.json"])
        nodes = root["consolidated_metadata"]["metadata"]
        prefix = group + "/"
        doc = dict(nodes[group])
        doc["consolidated_metadata"] = {
            "kind": "inline",
            "must_understand": False,
            "metadata": {p[len(prefix) :]: d for p, d in sorted(nodes.items())
                         if p.startswith(prefix)},
        }
        return doc

    # -- shard keys --------------------------------------------------------------------------------
    def split_shard_key(self, key: str) -> tuple[ArrayRefs, tuple[int, ...]] | None:
        """``(array, shard index)`` of a shard key of the v3 view, or None (not a chunk key)."""
        path, _, name = key.rpartition("/")
        arr = self.keys(3).arrays.get(path)
        if arr is None or not name:
            return None
        ndim = len(arr.meta.shape)
        if ndim == 0:
            return (arr, ()) if name == "0" else None
        parts = name.split(".")
        if len(parts) != ndim or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        index = tuple(int(p) for p in parts)
        if any(str(i) != p for i, p in zip(index, parts, strict=True)):
            return None  # only canonical spellings ("1", not "01") name a shard
        return arr, index
