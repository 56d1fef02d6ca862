"""Typed, immutable records of a granule's references.

``GranuleRefs`` is what the indexer produces and what every reader consumes: the source's identity
(:class:`SourceInfo`), the group tree with attributes, one :class:`ArrayRefs` per representable
variable (Zarr v2 metadata in an :class:`~h5sidecar.references._array_meta.ArrayMeta` + a
columnar :class:`ChunkManifest`), and the variables that were skipped, each with its reason
(:class:`Skipped`).

Zarr metadata is kept in Zarr v2 form because that is what kerchunk sidecars persist and what
fsspec's reference filesystem serves; readers that want Zarr v3 synthesize it (see
:mod:`h5sidecar.read.zarr._v3_metadata`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from h5sidecar.errors import ErrorKind, InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._cf import cf_fill_value
from h5sidecar.references._manifest import ChunkManifest
from h5sidecar.references._names import check_node_path
from h5sidecar.references._source_info import SourceInfo
from h5sidecar.references.datacube._member_table import MemberTable

__all__ = [
    "ArrayRefs",
    "GranuleRefs",
    "DIMENSION_ONLY_REASON",
    "SkipKind",
    "Skipped",
    "SourceInfo",
    "VariableStatus",
]

#: How a variable is represented: byte ranges into the source, bytes held in the sidecar, or not.
VariableStatus = Literal["virtual", "inlined", "skipped"]

#: Why a variable was skipped: the skip codes of :class:`~h5sidecar.errors.ErrorKind`
#: (append-only, like every kind).
SkipKind = Literal[
    ErrorKind.UNSUPPORTED_FILTER,
    ErrorKind.UNSUPPORTED_DTYPE,
    ErrorKind.UNSUPPORTED_LAYOUT,
    ErrorKind.EXTERNAL_LINK,
    ErrorKind.SOFT_LINK_DANGLING,
    ErrorKind.VIRTUAL_DATASET,
    ErrorKind.EXTERNAL_STORAGE,
    ErrorKind.UNREADABLE,
    ErrorKind.TOO_LARGE_TO_MATERIALIZE,
    ErrorKind.OTHER,
    ErrorKind.INTERNAL_ERROR,
]


@dataclass(frozen=True, slots=True)
class ArrayRefs:
    """One representable variable: its metadata, its chunk manifest and how it is held.

    Attributes
    ----------
    path : str
        Path in the hierarchy without a leading slash (``"gt1l/heights/h_ph"``).
    meta : ArrayMeta
    manifest : ChunkManifest
    status : "virtual" or "inlined"
        ``virtual`` when any chunk is a byte range in the source, ``inlined`` when every stored
        chunk lives in the sidecar (compact datasets, materialised strings, ...).
    note : str
        Why the variable was inlined or transformed (empty for plain virtual variables).
    checksums : numpy.ndarray or None
        uint64[grid] content hashes of the *encoded* chunks (``--checksums``), 0 where missing.
    """

    path: str
    meta: ArrayMeta
    manifest: ChunkManifest
    status: Literal["virtual", "inlined"] = "virtual"
    note: str = ""
    checksums: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.path.startswith("/") or self.path.endswith("/") or not self.path:
            raise InvalidReferenceError(f"array path {self.path!r} must be relative and non-empty")
        if self.manifest.grid_shape != self.meta.grid_shape:
            raise InvalidReferenceError(
                f"{self.path}: manifest grid {self.manifest.grid_shape} does not match the chunk "
                f"grid {self.meta.grid_shape} of shape {self.meta.shape} / chunks {self.meta.chunks}"
            )
        if self.checksums is not None and self.checksums.shape != self.manifest.grid_shape:
            raise InvalidReferenceError(f"{self.path}: checksums do not match the chunk grid")

    def __eq__(self, other: object) -> bool:
        # The generated __eq__ would compare the checksum arrays with ``==`` (ambiguous truth).
        if not isinstance(other, ArrayRefs):
            return NotImplemented
        a, b = self.checksums, other.checksums
        return (
            (self.path, self.meta, self.manifest, self.status, self.note)
            == (other.path, other.meta, other.manifest, other.status, other.note)
        ) and (a is b or (a is not None and b is not None and np.array_equal(a, b)))

    def zarray_fill_value(self) -> Any:
        """The ``fill_value`` to persist in ``.zarray`` (see :mod:`h5sidecar.references._cf`).

        The CF ``_FillValue`` cast to the dtype when the attribute exists (what xarray's Zarr v2
        backend masks), else ``None``.  Never-written chunks are materialized by the indexer
        when this would read them as anything but the storage fill value; for sidecars written
        before that rule, missing chunks with a non-default storage fill keep that value.
        """
        fv = self.meta.fill_value
        if "_FillValue" in self.meta.attrs:
            return cf_fill_value(self.meta.attrs, self.meta.numpy_dtype, fv)
        if self.manifest.n_missing and not _is_default_fill(fv):
            return fv
        return None

    @property
    def urls(self) -> Sequence[str]:
        """The URLs the manifest references (lazy arrays answer without loading it)."""
        return self.manifest.urls

    @property
    def urls_are_members(self) -> bool:
        """True when :attr:`urls` are known, without reading them, to be exactly the members'
        URLs of the cube holding the array (one chunk a member); False when not known."""
        return False

    @property
    def manifest_loaded(self) -> bool:
        """True when :attr:`manifest` is in memory (always, except for lazy arrays)."""
        return True

    @property
    def resident_nbytes(self) -> int:
        """Bytes of manifest held in memory now (for byte-bounded caches)."""
        return self.manifest.nbytes


def _is_default_fill(fv: Any) -> bool:
    if fv is None:
        return True
    if isinstance(fv, bool):
        return fv is False
    if isinstance(fv, (int, float)):
        return fv == 0 and not (isinstance(fv, float) and math.copysign(1.0, fv) < 0)
    if isinstance(fv, str):
        # base64 of all-zero bytes ("AAAA...") or an empty string
        return set(fv.rstrip("=")) <= {"A"}
    return False


#: How the indexers' reason for a netCDF-4 dimension-only dataset begins: such an entry holds no
#: values (netCDF-C stores a dimension without a coordinate variable as a dataset of that length
#: with no data), so it is a dimension of the granule, not a variable left out.
DIMENSION_ONLY_REASON = "netCDF-4 dimension without a variable"


@dataclass(frozen=True, slots=True)
class Skipped:
    """A variable that could not be represented, and why (shown by ``inspect`` and reports)."""

    path: str
    kind: SkipKind
    reason: str

    @property
    def dimension_only(self) -> bool:
        """True for a netCDF-4 dimension without a variable (no data was left out)."""
        return self.reason.startswith(DIMENSION_ONLY_REASON)

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"path": self.path, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class GranuleRefs:
    """All references of one granule (immutable).

    Attributes
    ----------
    source : SourceInfo
    groups : Mapping[str, Mapping]
        Group path (``""`` for the root) -> attributes.  Every ancestor of every array is present.
    arrays : Mapping[str, ArrayRefs]
        Array path -> references, in the file's traversal order.
    skipped : tuple of Skipped
    extra : Mapping
        Provenance (indexer version, options, creation time).
    members : tuple of SourceInfo, or MemberTable
        For references combining many source objects (a datacube): the identity of every
        object a chunk may point into, one per URL (a cube's build holds them in columns).  Empty for a single granule, whose only
        object is ``source``.  The read path checks each chunk against its own object's
        identity (:meth:`identity_of`).
    """

    source: SourceInfo
    groups: Mapping[str, Mapping[str, Any]]
    arrays: Mapping[str, ArrayRefs]
    skipped: tuple[Skipped, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    members: tuple[SourceInfo, ...] | MemberTable = ()
    _by_url: Mapping[str, SourceInfo] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        groups = {g: MappingProxyType(dict(a)) for g, a in self.groups.items()}
        groups.setdefault("", MappingProxyType({}))
        for path, arr in self.arrays.items():
            if path != arr.path:
                raise InvalidReferenceError(f"array registered as {path!r} has path {arr.path!r}")
            if path in groups:
                raise InvalidReferenceError(f"{path!r} is both a group and an array")
            check_node_path(path, "the array")  # writers make keys and directories of it
            parent = path.rpartition("/")[0]
            while parent:
                groups.setdefault(parent, MappingProxyType({}))
                parent = parent.rpartition("/")[0]
        for group in groups:
            if group:
                check_node_path(group, "the group")
        object.__setattr__(self, "groups", MappingProxyType(groups))
        object.__setattr__(self, "arrays", MappingProxyType(dict(self.arrays)))
        object.__setattr__(self, "skipped", tuple(self.skipped))
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))
        if isinstance(self.members, MemberTable):  # a cube being built, or read: in columns
            # (a cube's members file is checked when it is read, on the first need of it)
            twice = self.members.duplicate_url() if self.members.is_loaded else None
            if twice is not None:
                raise InvalidReferenceError(f"members list {twice} more than once")
            object.__setattr__(self, "_by_url", self.members.lookup())
            return
        members = tuple(self.members)
        by_url = {m.url: m for m in members}
        if len(by_url) != len(members):
            raise InvalidReferenceError("members list the same source URL more than once")
        object.__setattr__(self, "members", members)
        object.__setattr__(self, "_by_url", MappingProxyType(by_url))

    def identity_of(self, url: str) -> SourceInfo:
        """The recorded identity of the object at ``url``: its member entry, else ``source``.

        Chunk-cache keys and freshness checks use it, so a chunk is always tied to the object
        it is read from (a replaced member of a datacube never serves stale cached bytes).
        """
        return self._by_url.get(url, self.source)

    def __reduce__(self) -> tuple[Any, ...]:
        # MappingProxyType does not pickle (Dask ships stores to workers): rebuild from dicts.
        return (
            GranuleRefs,
            (
                self.source,
                {g: dict(a) for g, a in self.groups.items()},
                dict(self.arrays),
                self.skipped,
                dict(self.extra),
                self.members,
            ),
        )

    def _members_token(self) -> Any:
        if isinstance(self.members, MemberTable):  # a digest: a lazy table stays unread
            return self.members.digest()
        return [m.to_dict() for m in self.members]

    def __dask_tokenize__(self) -> tuple[str, str]:
        """A cheap, deterministic Dask token.

        Without it Dask pickles the whole model to hash it (seconds for a large granule, and it
        would load every lazily held manifest).  The references are a function of the source
        bytes (pinned by size + ETag/mtime), the indexer and its options (``extra``) and the
        metadata, so those are what the token hashes; manifests are not read.
        """
        payload = json.dumps(
            [self.source.to_dict(), dict(self.extra), [s.to_dict() for s in self.skipped],
             self.zmetadata(), *([self._members_token()] if self.members else [])],
            sort_keys=True,
            default=str,
        )
        return ("h5sidecar.GranuleRefs", hashlib.blake2b(payload.encode(), digest_size=16).hexdigest())

    # -- views ----------------------------------------------------------------------------------
    def status(self, path: str) -> VariableStatus:
        """Status of a variable (``KeyError`` if the path is neither an array nor skipped)."""
        if path in self.arrays:
            return self.arrays[path].status
        if any(s.path == path for s in self.skipped):
            return "skipped"
        raise KeyError(path)

    def iter_variables(self) -> Iterator[tuple[str, VariableStatus, str]]:
        """``(path, status, note-or-reason)`` for every variable, arrays first then skipped."""
        for path, arr in self.arrays.items():
            yield path, arr.status, arr.note
        for s in self.skipped:
            yield s.path, "skipped", s.reason

    @property
    def nbytes(self) -> int:
        """Approximate memory held (manifests in memory now), for byte-bounded caches."""
        return sum(a.resident_nbytes for a in self.arrays.values())

    def zmetadata(self) -> dict[str, Any]:
        """Consolidated Zarr v2 metadata (the ``metadata`` member of ``.zmetadata``)."""
        meta: dict[str, Any] = {}
        for g, attrs in self.groups.items():
            prefix = f"{g}/" if g else ""
            meta[f"{prefix}.zgroup"] = {"zarr_format": 2}
            meta[f"{prefix}.zattrs"] = dict(attrs)
        for path, arr in self.arrays.items():
            meta[f"{path}/.zarray"] = arr.meta.zarray(fill_value=arr.zarray_fill_value())
            meta[f"{path}/.zattrs"] = arr.meta.zattrs()
        # Sorted keys: zarr 3.1's consolidated-metadata parser groups children with
        # itertools.groupby and drops nodes when siblings are not contiguous (groups listed
        # before arrays -> KeyError, "No group found"; zarr-python #4226). Sorted order keeps
        # every parent's children together, and is what zarr itself writes.
        return dict(sorted(meta.items()))
