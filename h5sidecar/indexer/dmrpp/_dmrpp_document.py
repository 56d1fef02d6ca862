"""The parsed DMR++ document: what it says, before any conversion to references.

A DMR++ (written by the OPeNDAP project's ``build_dmrpp``) is a DAP4 DMR -- groups, shared
dimensions, typed variables and attributes -- annotated in the ``dmrpp`` namespace with where
each variable's bytes are: ``dmrpp:chunks`` (filters, fill value, byte order, chunk shape and
one ``dmrpp:chunk`` per stored chunk, possibly made of several ``dmrpp:block``), or the values
themselves (``dmrpp:compact``, base64).

These records hold the document as written (names as the document spells them, filters as
named, values as text): converting to references (:mod:`._dmrpp_granule`), auditing a document against
the HDF5 file, or writing one back all start from here.  Chunks are columnar, as manifests are:
one array per field, one row per ``dmrpp:chunk``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

__all__ = [
    "DRIFT",
    "DmrAttribute",
    "DmrChunks",
    "DmrDim",
    "DmrGroup",
    "DmrVariable",
    "DmrppDocument",
]

#: Ends the reason of a variable skipped because its document contradicts its file (chunks that
#: do not decode or do not hold their type): an audit reports these as the document's errors.
DRIFT = "the DMR++ does not describe this file"


@dataclass(frozen=True, slots=True)
class DmrAttribute:
    """One ``Attribute``: its DAP4 type, its ``Value`` texts, and members of a ``Container``."""

    name: str
    dap_type: str
    values: tuple[str, ...] = ()
    members: tuple[DmrAttribute, ...] = ()


@dataclass(frozen=True, slots=True)
class DmrDim:
    """One axis of a variable: a shared dimension (``name`` is its full path, ``/g/x``) or an
    anonymous one (``name`` is ``None``)."""

    name: str | None
    size: int


@dataclass(frozen=True, slots=True)
class DmrChunks:
    """``dmrpp:chunks`` of one variable.

    Attributes
    ----------
    filters : tuple of str
        ``compressionType`` split into words, in the order the writer applied them.
    deflate_levels : tuple of int
        ``deflateLevel`` (or the older ``deflate_level``), one per ``deflate`` when given.
    fill_value : str or None
        ``fillValue`` as written (``None`` when absent).
    byte_order : str or None
        ``LE`` or ``BE`` (older documents spell the attribute ``byteOrde``).
    chunk_shape : tuple of int or None
        ``dmrpp:chunkDimensionSizes``; ``None`` for a contiguous variable (one chunk).
    positions : numpy.ndarray
        int64[n, rank]: ``chunkPositionInArray`` of each chunk (element offsets), or -1 when
        the chunk does not say (a contiguous variable's only chunk).
    offsets, lengths : numpy.ndarray
        uint64[n]: ``offset`` and ``nBytes`` of each chunk (of its first block when it has
        several).
    hrefs : numpy.ndarray
        int32[n]: index into ``urls`` of the chunk's own ``href``, -1 for the document's.
    urls : tuple of str
        The distinct per-chunk ``href`` values, as written.
    blocks : Mapping[int, tuple[tuple[int, int], ...]]
        Row -> ``(offset, nBytes)`` of each ``dmrpp:block`` of a chunk made of several.
    struct_offsets : tuple of int
        ``structOffset`` of a ``Structure``: the byte offsets of its second to last members,
        then the size of one element (empty when the document does not give it).
    """

    filters: tuple[str, ...] = ()
    deflate_levels: tuple[int, ...] = ()
    fill_value: str | None = None
    byte_order: str | None = None
    chunk_shape: tuple[int, ...] | None = None
    positions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    hrefs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    urls: tuple[str, ...] = ()
    blocks: Mapping[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    struct_offsets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for arr in (self.positions, self.offsets, self.lengths, self.hrefs):
            arr.flags.writeable = False
        object.__setattr__(self, "blocks", MappingProxyType(dict(self.blocks)))

    @property
    def n_chunks(self) -> int:
        """Number of ``dmrpp:chunk`` elements."""
        return int(self.offsets.size)


@dataclass(frozen=True, slots=True)
class DmrVariable:
    """One variable: its DAP4 type, axes, attributes and where its values are.

    Attributes
    ----------
    name : str
        The name the document gives (build_dmrpp may have replaced characters in it).
    path : str
        Path in the document's hierarchy, without a leading slash.
    dap_type : str
        ``Float32``, ``Int16``, ``String``, ``Enum``, ``Structure``, ...
    dims : tuple of DmrDim
    attributes : tuple of DmrAttribute
    chunks : DmrChunks or None
    compact : bytes or None
        The values of ``dmrpp:compact`` (base64-decoded).
    enum : str or None
        For an ``Enum``: the path of its ``Enumeration``.
    string_length : int or None
        ``dmrpp:FixedLengthStringArray``'s ``string_length`` (fixed-length strings).
    missing_data : bool
        The values are held in the document (``dmrpp:missingdata``), not in the granule.
    members : tuple of DmrVariable
        A ``Structure``'s members, in order (each with its own ``dims`` for array members).
    """

    name: str
    path: str
    dap_type: str
    dims: tuple[DmrDim, ...] = ()
    attributes: tuple[DmrAttribute, ...] = ()
    chunks: DmrChunks | None = None
    compact: bytes | None = None
    enum: str | None = None
    string_length: int | None = None
    missing_data: bool = False
    members: tuple[DmrVariable, ...] = ()

    @property
    def shape(self) -> tuple[int, ...]:
        """The sizes of the axes."""
        return tuple(d.size for d in self.dims)


@dataclass(frozen=True, slots=True)
class DmrGroup:
    """One ``Group`` (the ``Dataset`` element for the root, ``path`` ``""``)."""

    name: str
    path: str
    dimensions: Mapping[str, int] = field(default_factory=dict)
    attributes: tuple[DmrAttribute, ...] = ()
    variables: tuple[DmrVariable, ...] = ()
    groups: tuple[DmrGroup, ...] = ()
    #: Enumeration path -> (DAP4 base type, {name: value})
    enumerations: Mapping[str, tuple[str, Mapping[str, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dimensions", MappingProxyType(dict(self.dimensions)))
        object.__setattr__(self, "enumerations", MappingProxyType(dict(self.enumerations)))

    def walk(self) -> tuple[DmrGroup, ...]:
        """This group and every group below it, parents first, in document order."""
        out = [self]
        for g in self.groups:
            out.extend(g.walk())
        return tuple(out)


@dataclass(frozen=True, slots=True)
class DmrppDocument:
    """A whole DMR++ document.

    Attributes
    ----------
    name : str
        The ``Dataset`` element's ``name`` (the granule's file name, usually).
    href : str
        ``dmrpp:href``: the data URL as written (a path, a URL, or the
        ``OPeNDAP_DMRpp_DATA_ACCESS_URL`` placeholder).
    version : str
        ``dmrpp:version`` (empty when absent): the build_dmrpp that wrote it.
    root : DmrGroup
    """

    name: str
    href: str
    version: str
    root: DmrGroup

    def variables(self) -> tuple[DmrVariable, ...]:
        """Every variable, group by group in document order."""
        return tuple(v for g in self.root.walk() for v in g.variables)

    def enumerations(self) -> dict[str, tuple[str, Mapping[str, int]]]:
        """Every ``Enumeration`` of the document, by path."""
        out: dict[str, tuple[str, Mapping[str, int]]] = {}
        for g in self.root.walk():
            out.update(g.enumerations)
        return out
