"""numcodecs codec for the bitshuffle HDF5 filter (32008): the bit transpose undone, with LZ4 or
Zstd block compression, framing included (the 12-byte header, big-endian block sizes).

The transpose itself is the bitshuffle library's (through imagecodecs) for 1, 2, 4 and 8-byte
elements, and numpy's for the element sizes its bindings refuse (compounds).
"""

from __future__ import annotations

from typing import Any

import imagecodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes

from h5sidecar.codecs._compress import copy_into

__all__ = ["HDF5Bitshuffle", "bitunshuffle", "bitunshuffle_block_numpy", "bshuf_default_block_size"]

_BSHUF_TARGET_BLOCK_BYTES = 8192
_BSHUF_MIN_BLOCK = 128
_BSHUF_LZ4, _BSHUF_ZSTD = 2, 3


def bshuf_default_block_size(elem_size: int) -> int:
    """Bitshuffle's default block size in elements (a format constant: must never change)."""
    size = (_BSHUF_TARGET_BLOCK_BYTES // elem_size) // 8 * 8
    return max(size, _BSHUF_MIN_BLOCK)


def _bitunshuffle_block(data: np.ndarray, n: int, elem_size: int) -> np.ndarray:
    """Undo bitshuffle's bit transpose of one block of ``n`` elements (``n % 8 == 0``)."""
    if elem_size in (1, 2, 4, 8):
        res = imagecodecs.bitshuffle_decode(data.tobytes(), itemsize=elem_size, blocksize=n)
        return np.frombuffer(res, np.uint8)
    return bitunshuffle_block_numpy(data, n, elem_size)


def bitunshuffle_block_numpy(data: np.ndarray, n: int, elem_size: int) -> np.ndarray:
    """numpy bit-unshuffle of one block, for element sizes the bitshuffle library's
    Python bindings refuse (compounds): rows are the element's bits (byte-major, LSB first),
    each row holding that bit of every element, LSB-first within a byte."""
    bits = np.unpackbits(data.reshape(elem_size, 8, n // 8), axis=2, bitorder="little")
    return np.packbits(bits.transpose(2, 0, 1), axis=2, bitorder="little").reshape(-1)


def bitunshuffle(data: np.ndarray, elem_size: int, block_size: int) -> np.ndarray:
    """Undo ``bshuf_bitshuffle`` for a whole buffer (blocks, trailing partial block, leftover)."""
    n = data.size // elem_size
    block = block_size or bshuf_default_block_size(elem_size)
    out = np.empty(data.size, np.uint8)
    pos = 0
    for count in _block_counts(n, block):
        nb = count * elem_size
        out[pos : pos + nb] = _bitunshuffle_block(data[pos : pos + nb], count, elem_size)
        pos += nb
    out[pos:] = data[pos:]  # elements past the last multiple of 8 are stored as they are
    return out


def _block_counts(n: int, block: int) -> list[int]:
    counts = [block] * (n // block)
    last = n % block
    last -= last % 8
    if last:
        counts.append(last)
    return counts


class HDF5Bitshuffle(Codec):
    """The bitshuffle filter (id 32008), optionally with LZ4 or Zstd block compression.

    Compressed chunks start with a 12-byte header (big-endian uint64 decoded size, uint32
    block size in bytes); each block is a big-endian uint32 compressed size and the compressed
    bit-shuffled block.  Uncompressed chunks are the bit-shuffled bytes alone.

    Parameters
    ----------
    elementsize : int
        Bytes per element (``cd_values[2]``).
    blocksize : int
        Block size in elements (``cd_values[3]``; 0 = bitshuffle's default).
    compression : int
        0 none, 2 LZ4, 3 Zstd (``cd_values[4]``).
    level : int
        Zstd level used when encoding.
    """

    codec_id = "h5sidecar.bitshuffle"

    def __init__(
        self, elementsize: int, blocksize: int = 0, compression: int = 0, level: int = 3
    ) -> None:
        self.elementsize = int(elementsize)
        self.blocksize = int(blocksize)
        self.compression = int(compression)
        self.level = int(level)

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Decompress and un-shuffle one chunk."""
        data = np.frombuffer(ensure_bytes(buf), np.uint8)
        es = self.elementsize
        if self.compression == 0:
            return copy_into(bitunshuffle(data, es, self.blocksize), out)
        total = int.from_bytes(data[:8].tobytes(), "big")
        block = int.from_bytes(data[8:12].tobytes(), "big") // es
        if total % es or block <= 0:
            raise ValueError(
                f"bitshuffle chunk header is invalid (size {total}, block {block} elements "
                f"of {es} bytes): the chunk is corrupt or not bitshuffle-compressed"
            )
        res = np.empty(total, np.uint8)
        pos, opos = 12, 0
        for count in _block_counts(total // es, block):
            csize = int.from_bytes(data[pos : pos + 4].tobytes(), "big")
            nb = count * es
            plain = self._decompress(data[pos + 4 : pos + 4 + csize].tobytes(), nb)
            res[opos : opos + nb] = _bitunshuffle_block(plain, count, es)
            pos, opos = pos + 4 + csize, opos + nb
        res[opos:] = data[pos : pos + (total - opos)]
        return copy_into(res, out)

    def _decompress(self, block: bytes, nbytes: int) -> np.ndarray:
        if self.compression == _BSHUF_LZ4:
            plain = imagecodecs.lz4_decode(block, header=False, out=nbytes)
        elif self.compression == _BSHUF_ZSTD:
            plain = imagecodecs.zstd_decode(block, out=nbytes)
        else:
            raise ValueError(f"unknown bitshuffle compression code {self.compression}")
        return np.frombuffer(plain, np.uint8)

    def encode(self, buf: Any) -> bytes:
        """Shuffle (and compress) one chunk in the HDF5 filter's framing."""
        data = np.frombuffer(ensure_bytes(buf), np.uint8)
        es = self.elementsize
        if es not in (1, 2, 4, 8):
            raise ValueError(f"encoding bitshuffle with {es}-byte elements is not supported")
        block = self.blocksize or bshuf_default_block_size(es)
        if self.compression == 0:
            return bytes(
                imagecodecs.bitshuffle_encode(data.tobytes(), itemsize=es, blocksize=block)
            )
        parts = [len(data).to_bytes(8, "big"), (block * es).to_bytes(4, "big")]
        pos = 0
        for count in _block_counts(len(data) // es, block):
            nb = count * es
            shuffled = imagecodecs.bitshuffle_encode(
                data[pos : pos + nb].tobytes(), itemsize=es, blocksize=count
            )
            if self.compression == _BSHUF_LZ4:
                comp = imagecodecs.lz4_encode(bytes(shuffled), header=False)
            else:
                comp = imagecodecs.zstd_encode(bytes(shuffled), level=self.level)
            parts += [len(comp).to_bytes(4, "big"), bytes(comp)]
            pos += nb
        parts.append(data[pos:].tobytes())
        return b"".join(parts)
