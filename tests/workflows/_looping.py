"""Corrupt granules whose chunk B-tree makes HDF5 loop or crash (the bounds' test inputs).

Both start from a real h5py file with a version-1 chunk B-tree (``libver="earliest"``) and patch
its nodes in place.  HDF5 2.0 refuses a node that is its own ancestor when it *looks up* a chunk
("cyclic B-tree detected"), but it walks the tree recursively when it *iterates* over the chunks
(``H5Dchunk_iter``, which the indexer calls), so:

* :func:`write_looping_granule`: each level's node lists the node below it N times (a chain of
  shared nodes, not a cycle).  Iterating visits N**depth nodes, all from HDF5's metadata cache:
  no read (so none of the indexer's checks at each read runs), no allocation, 100% of a core,
  the GIL held, for what is in practice forever;
* :func:`write_crashing_granule`: a child pointer to the node itself; iterating recurses until
  the stack overflows (a segfault).
"""

from __future__ import annotations

import struct
from pathlib import Path

import h5py
import numpy as np

#: bytes of a chunk B-tree node's header and of one (key, child) entry, for a 1-d dataset
_HEADER, _ENTRY, _KEY = 24, 32, 24


def _chunked_file(path: Path, n_chunks: int) -> list[tuple[int, int, int]]:
    """A granule with an ``n_chunks``-chunk dataset ``d`` beside a small ``ok`` one; the chunk
    B-tree's nodes as ``(address, level, entries)``."""
    with h5py.File(path, "w", libver="earliest") as f:
        f.create_dataset("d", data=(np.arange(n_chunks) % 100).astype("i1"), chunks=(1,))
        f.create_dataset("ok", data=np.arange(10, dtype="i4"))
    data = path.read_bytes()
    nodes, at = [], data.find(b"TREE")
    while at >= 0:
        if data[at + 4] == 1:  # node type 1: raw data chunks
            nodes.append((at, data[at + 5], struct.unpack("<H", data[at + 6 : at + 8])[0]))
        at = data.find(b"TREE", at + 1)
    return nodes


def write_looping_granule(path: Path, depth: int = 8) -> Path:
    """A granule on whose chunk index HDF5's chunk iteration loops without reading (see above)."""
    nodes = _chunked_file(path, 30_000)  # 500+ nodes: a chain of any depth up to that
    data = bytearray(path.read_bytes())
    root = max(nodes, key=lambda n: n[1])[0]  # the layout message points at it
    leaves = [n for n in nodes if n[1] == 0 and n[2] >= 32]
    width = leaves[0][2]
    chain = [n[0] for n in leaves[:depth]] + [root]  # chain[level] is the node of that level
    for level in range(1, depth + 1):
        node, below = chain[level], chain[level - 1]
        data[node + 5] = level
        data[node + 6 : node + 8] = struct.pack("<H", width)
        data[node + 8 : node + 24] = b"\xff" * 16  # no siblings
        for i in range(width + 1):
            key = node + _HEADER + _ENTRY * i
            data[key : key + _KEY] = data[chain[0] + _HEADER + _ENTRY * i :][:_KEY]
            if i < width:
                data[key + _KEY : key + _ENTRY] = struct.pack("<Q", below)
    # the leaf lists no chunk: the walk calls back into Python never, and stays in C
    data[chain[0] + 6 : chain[0] + 8] = struct.pack("<H", 0)
    path.write_bytes(bytes(data))
    return path


def write_crashing_granule(path: Path) -> Path:
    """A granule whose chunk B-tree root lists itself first: iterating it crashes HDF5 at once."""
    nodes = _chunked_file(path, 200)  # a root over leaves: each descent is one leaf's visit
    data = bytearray(path.read_bytes())
    root = max(nodes, key=lambda n: n[1])[0]
    assert data[root + 5] == 1
    child = root + _HEADER + _KEY  # the first child pointer
    data[child : child + 8] = struct.pack("<Q", root)
    path.write_bytes(bytes(data))
    return path
