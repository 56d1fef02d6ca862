"""Attributes of the objects of one open granule, read from its metadata bytes without h5py.

:class:`NativeAttrs` ties :mod:`._messages` (where the messages are) and
:mod:`._message_decode` (what they hold) to the granule's file object: a local file is read in
blocks kept for a while (the metadata of neighbouring objects shares them), an object store
from the indexer's own page cache only, which holds the bytes HDF5 just read for the object
(and the crawl prefetched).  Bytes not there yet leave the object to h5py rather than fetch
them: a fetch of ours would be a request HDF5 makes again for the whole page around it (with
the page buffer, HDF5 reads paged granules a page at a time), so requests in a row grew
(42 instead of 27 on a 70 MB paged granule over S3).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

from h5sidecar._compat.h5py import set_creation_plist
from h5sidecar.indexer.attrs._creation_messages import creation_messages, decode_creation
from h5sidecar.indexer.attrs._message_decode import (
    Decoded,
    GlobalHeaps,
    Unsupported,
    decode_attribute,
    object_addresses,
)
from h5sidecar.indexer.attrs._messages import attribute_messages
from h5sidecar.indexer.attrs._object_header import NotNative
from h5sidecar.indexer.crawl._hints import BadStructure, find_superblock
from h5sidecar.sources import LocalRangedFile, RangedFile, RemoteRangedFile

__all__ = ["BlockView", "NativeAttrs", "NotFetched", "cached_view"]


class BlockView:
    """``view(start, stop)`` over a local file, read in aligned blocks of which the last
    ``keep`` used are kept (metadata is read in pieces of tens of bytes: one ``pread`` each
    would cost more than decoding them)."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, block: int = 1 << 16,
                 keep: int = 64) -> None:  # fmt: skip
        self.read, self.size, self.block, self.keep = read, size, block, keep
        self._blocks: OrderedDict[int, bytes] = OrderedDict()

    def _get(self, index: int) -> bytes:
        data = self._blocks.get(index)
        if data is None:
            start = index * self.block
            data = self.read(start, min(start + self.block, self.size))
            self._blocks[index] = data
            if len(self._blocks) > self.keep:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(index)
        return data

    def __call__(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` (fewer past the end of the file)."""
        stop = min(stop, self.size)
        if stop <= start:
            return b""
        first, last = start // self.block, (stop - 1) // self.block
        if first == last:
            offset = first * self.block
            return self._get(first)[start - offset : stop - offset]
        data = b"".join(self._get(i) for i in range(first, last + 1))
        return data[start - first * self.block : stop - first * self.block]


class NotFetched(BadStructure):  # internal: the object's attributes are read by h5py
    """Bytes the page cache does not hold (yet)."""


def cached_view(fileobj: RemoteRangedFile) -> Callable[[int, int], bytes]:
    """``view(start, stop)`` of the bytes ``fileobj``'s page cache holds (:class:`NotFetched`
    for the others: nothing is fetched)."""
    fetcher = fileobj.fetcher

    def view(start: int, stop: int) -> bytes:
        stop = min(stop, fileobj.size)
        if stop <= start:
            return b""
        if fetcher.fault is not None:
            raise fetcher.fault
        data = fetcher.cache.read(start, stop)
        if data is None:
            raise NotFetched(f"bytes {start}-{stop} not fetched")
        return data

    return view


class NativeAttrs:
    """Reads the attributes of objects of ``h5`` (opened over ``fileobj``) from their bytes.

    Attributes
    ----------
    served, fallbacks : int
        Objects whose attribute messages were read here / left to h5py (tests check both).
    creation_fallbacks : int
        Datasets whose creation properties were left to HDF5 (:meth:`attach_creation`).
    """

    def __init__(self, h5: h5py.File, fileobj: RangedFile, keep_bytes: int = 32 << 20,
                 infos: dict[int, tuple[h5py.HLObject, Any]] | None = None) -> None:  # fmt: skip
        self.view: Callable[[int, int], bytes]
        if isinstance(fileobj, LocalRangedFile):
            self.view = BlockView(fileobj.view, fileobj.size)
        elif isinstance(fileobj, RemoteRangedFile):
            self.view = cached_view(fileobj)
        else:
            raise BadStructure(f"no native attribute reading through {type(fileobj).__name__}")
        self.layout, _ = find_superblock(self.view, fileobj.size)
        self.fileno = int(h5py.h5o.get_info(h5.id).fileno)
        self.heaps = GlobalHeaps(self.view, self.layout)
        self.served = self.fallbacks = self.creation_fallbacks = 0
        # the objects read last, up to ``keep_bytes`` of attribute messages (what their
        # values take, roughly): the dimension namer looks at every array's attributes before
        # the arrays are indexed, in another order
        self._read: OrderedDict[int, tuple[list[Decoded] | None, int]] = OrderedDict()
        self.keep_bytes, self._kept = keep_bytes, 0
        self._last: tuple[h5py.HLObject, list[Decoded] | None] | None = None
        # id(obj) -> (obj, H5Oget_info), seeded with the walk's (see Hierarchy.infos)
        self._infos: dict[int, tuple[h5py.HLObject, Any]] = infos if infos is not None else {}
        # object header address -> its DIMENSION_LIST's targets, see dimension_list
        self._dimension_lists: dict[int, list[list[tuple[int, int]]] | None] = {}

    def read(self, obj: h5py.HLObject) -> list[Decoded] | None:
        """The attributes of ``obj`` in the order h5py iterates them (by creation order when
        the object tracks it, else by name), ``None`` to read them all through h5py.  An
        attribute whose value is not decoded here has ``value=None``."""
        last = self._last
        if last is not None and last[0] is obj:  # asked again for one array (dimension names)
            return last[1]
        info = self._info(obj)
        if info.fileno != self.fileno:  # an object of another file (an external link)
            return None
        if info.addr in self._read:
            self._read.move_to_end(info.addr)
            found = self._read[info.addr][0]
        else:
            found, final = self._parse(info)
            if not final:  # bytes not fetched yet may be there when asked again
                return found
            self._keep(info.addr, found)
        self._last = (obj, found)
        return found

    def attach_creation(self, dset: h5py.Dataset) -> bool:
        """Give ``dset`` creation properties decoded from its header bytes (see
        :mod:`._creation_messages`), so no property list is copied out of HDF5 for it;
        ``False`` when they are left to HDF5."""
        info = self._info(dset)
        if info.fileno != self.fileno:
            return False
        messages: list[tuple[int, int, bytes]] = []
        if info.addr not in self._read:  # one walk of the header for attributes and these
            found, final = self._parse(info, messages)
            if final:
                self._keep(info.addr, found)
        try:
            if messages:
                plist = decode_creation(dset, messages, self.layout)
            else:  # attributes read before, or a header their reading gave up on
                plist = creation_messages(dset, info.addr, self.view, self.layout)
        except NotNative:
            self.creation_fallbacks += 1
            return False
        return set_creation_plist(dset, plist)

    def _info(self, obj: h5py.HLObject) -> Any:
        """``H5Oget_info`` of ``obj``, asked once per object (the namer and the indexer ask
        for one array's attributes 4-6 times, in different orders: ~8 us each time)."""
        known = self._infos.get(id(obj))
        if known is not None and known[0] is obj:
            return known[1]
        info = h5py.h5o.get_info(obj.id)
        self._infos[id(obj)] = (obj, info)  # holds obj: its id() stays its own
        return info

    def _keep(self, addr: int, found: list[Decoded] | None) -> None:
        size = 64 + sum(len(d.body) + _nbytes(d.value) for d in found or ())
        self._read[addr] = (found, size)
        self._kept += size
        while self._kept > self.keep_bytes and self._read:
            self._kept -= self._read.popitem(last=False)[1][1]

    def lookup(self, obj: h5py.HLObject, name: str) -> tuple[bool, Any]:
        """``(True, obj.attrs.get(name))`` when known from the bytes (``None``: no such
        attribute), ``(False, None)`` when h5py must be asked."""
        decoded = self.read(obj)
        if decoded is None:
            return False, None
        for d in decoded:
            if d.name == name:
                return d.value is not None, d.value
        return True, None

    def dimension_list(self, obj: h5py.HLObject) -> list[list[tuple[int, int]]] | None:
        """The :data:`~._walk.ObjectKey` of every object ``obj``'s ``DIMENSION_LIST`` points
        at, per axis (``[]`` when it has none; ``None``: read it through h5py).  A null
        reference gives address 0, which no object has.

        Decoded once per object: the dimension namer asks twice per array (whether any axis
        has a scale, then which), in different passes."""
        decoded = self.read(obj)
        if decoded is None:
            return None
        addr = self._info(obj).addr
        if addr not in self._dimension_lists:
            self._dimension_lists[addr] = self._dimension_list(decoded)
        return self._dimension_lists[addr]

    def _dimension_list(self, decoded: list[Decoded]) -> list[list[tuple[int, int]]] | None:
        for d in decoded:
            if d.name == "DIMENSION_LIST":
                if d.value is not None or not d.body:
                    return None
                try:
                    addresses = object_addresses(d.body, self.heaps)
                except Unsupported:
                    return None
                return [[(self.fileno, addr) for addr in axis] for axis in addresses]
        return []

    def _parse(self, info: Any, creation: list[tuple[int, int, bytes]] | None = None
               ) -> tuple[list[Decoded] | None, bool]:  # fmt: skip
        """The decoded attributes (``None``: h5py's to read) and whether that is final
        (``creation``: see :func:`._messages.attribute_messages`)."""
        try:
            messages, tracked = attribute_messages(info.addr, self.view, self.layout, creation)
            if len(messages) != info.num_attrs:
                raise NotNative(f"{len(messages)} attribute messages, HDF5 counts {info.num_attrs}")
            decoded = [decode_attribute(m.body, self.heaps) for m in messages]
        except (NotNative, Unsupported) as exc:
            self.fallbacks += 1
            return None, not isinstance(exc.__cause__, NotFetched)
        self.served += 1
        if tracked:  # h5py iterates by increasing creation order when it is tracked
            order = [m.order for m in messages]
            return [d for _, d in sorted(zip(order, decoded, strict=True), key=_first)], True
        return sorted(decoded, key=_raw_name), True  # HDF5 compares names with strcmp


def _nbytes(value: Any) -> int:
    """Roughly what a decoded value takes (strings: their length)."""
    if isinstance(value, np.ndarray):
        return value.nbytes if value.dtype.kind != "O" else 64 * value.size
    return 64 if not isinstance(value, str) else 64 + len(value)


def _first(item: tuple[int, Decoded]) -> int:
    return item[0]


def _raw_name(item: Decoded) -> bytes:
    return item.name.encode("utf-8") if isinstance(item.name, str) else item.name
