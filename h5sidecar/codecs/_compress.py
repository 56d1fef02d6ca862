"""numcodecs codecs for HDF5 plugin filters whose chunk framing no standard codec reads.

Each class undoes exactly what the HDF5 filter wrote, framing included (the szip 4-byte size
prefix, the LZ4 and bitshuffle block headers, H5Z-ZFP's header kept in ``cd_values``, Blosc2's
contiguous frame).  They are registered through the ``numcodecs.codecs`` entry points, so plain
Zarr/numcodecs readers find them with h5sidecar installed and never imported.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import imagecodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes, ensure_contiguous_ndarray

__all__ = [
    "HDF5Bitshuffle",
    "HDF5Blosc2",
    "HDF5FilterPlugin",
    "HDF5LZ4",
    "HDF5LZF",
    "HDF5Szip",
    "HDF5ZFP",
]


def _into(data: Any, out: Any) -> Any:
    if out is None:
        return data
    src = np.frombuffer(ensure_bytes(data), np.uint8)
    dst = ensure_contiguous_ndarray(out).reshape(-1).view(np.uint8)
    dst[: src.size] = src
    return out


class HDF5Szip(Codec):
    """HDF5 szip filter (id 4): a 4-byte little-endian size, then the szip (libaec) stream.

    Parameters are the filter's ``cd_values`` after ``set_local``: options mask, pixels per
    block, bits per pixel, pixels per scanline.
    """

    codec_id = "h5sidecar.szip"

    def __init__(
        self,
        options_mask: int,
        pixels_per_block: int,
        bits_per_pixel: int,
        pixels_per_scanline: int,
    ) -> None:
        self.options_mask = int(options_mask)
        self.pixels_per_block = int(pixels_per_block)
        self.bits_per_pixel = int(bits_per_pixel)
        self.pixels_per_scanline = int(pixels_per_scanline)

    def _params(self) -> dict[str, int]:
        return {
            "options_mask": self.options_mask,
            "pixels_per_block": self.pixels_per_block,
            "bits_per_pixel": self.bits_per_pixel,
            "pixels_per_scanline": self.pixels_per_scanline,
        }

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Decompress one chunk."""
        return _into(imagecodecs.szip_decode(ensure_bytes(buf), header=True, **self._params()), out)

    def encode(self, buf: Any) -> bytes:
        """Compress one chunk (HDF5 framing)."""
        return bytes(imagecodecs.szip_encode(ensure_bytes(buf), header=True, **self._params()))


class HDF5LZF(Codec):
    """The LZF filter of h5py/PyTables (id 32000): a bare LZF stream, no size header.

    Parameters
    ----------
    nbytes : int
        Decoded chunk size in bytes (LZF needs the output size up front).
    """

    codec_id = "h5sidecar.lzf"

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Decompress one chunk."""
        data = imagecodecs.lzf_decode(ensure_bytes(buf), header=False, out=self.nbytes)
        return _into(data, out)

    def encode(self, buf: Any) -> bytes:
        """Compress one chunk."""
        return bytes(imagecodecs.lzf_encode(ensure_bytes(buf), header=False))


class HDF5LZ4(Codec):
    """The HDF5 LZ4 filter (id 32004): big-endian total size and block size, then blocks.

    Each block is a 4-byte big-endian compressed size and the LZ4 block (stored raw when it
    would not shrink); ``imagecodecs.lz4h5`` implements exactly this framing.

    Parameters
    ----------
    blocksize : int
        Block size in bytes used when encoding (0: the filter's default of 1 GiB).
    """

    codec_id = "h5sidecar.lz4"

    def __init__(self, blocksize: int = 0) -> None:
        self.blocksize = int(blocksize)

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Decompress one chunk."""
        return _into(imagecodecs.lz4h5_decode(ensure_bytes(buf)), out)

    def encode(self, buf: Any) -> bytes:
        """Compress one chunk (HDF5 framing)."""
        return bytes(imagecodecs.lz4h5_encode(ensure_bytes(buf), blocksize=self.blocksize or None))


# -- bitshuffle ----------------------------------------------------------------------------------
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
            return _into(bitunshuffle(data, es, self.blocksize), out)
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
        return _into(res, out)

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


class HDF5Blosc2(Codec):
    """The HDF5 Blosc2 filter (id 32026): each chunk is a Blosc2 contiguous frame (cframe).

    Multi-dimensional chunks are B2ND arrays whose blocks may be padded; the ``blosc2`` package
    reassembles them exactly as the filter does.
    """

    codec_id = "h5sidecar.blosc2"

    def __init__(self, typesize: int = 1, clevel: int = 5) -> None:
        self.typesize = int(typesize)
        self.clevel = int(clevel)

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Decompress one chunk."""
        import blosc2

        frame = ensure_bytes(buf)
        schunk = blosc2.schunk_from_cframe(frame, copy=True)
        if "b2nd" in schunk.meta or "caterva" in schunk.meta:
            data = blosc2.ndarray_from_cframe(frame, copy=True)[...].tobytes()
        else:
            data = b"".join(schunk.decompress_chunk(i) for i in range(schunk.nchunks))
        return _into(data, out)

    def encode(self, buf: Any) -> bytes:
        """Compress one chunk into a one-chunk (1-d) super-chunk frame."""
        import blosc2

        data = ensure_bytes(buf)
        cparams = blosc2.CParams(typesize=self.typesize, clevel=self.clevel)
        schunk = blosc2.SChunk(chunksize=max(len(data), 1), cparams=cparams)
        if data:
            schunk.append_data(data)
        return bytes(schunk.to_cframe())


class HDF5ZFP(Codec):
    """H5Z-ZFP (id 32013): ZFP streams whose header lives in the filter's ``cd_values``.

    Parameters
    ----------
    header : list of int
        ``cd_values[1:]``: the ZFP header words H5Z-ZFP stored at dataset creation.
    """

    codec_id = "h5sidecar.zfp"
    _MODE_SHORT_MAX = (1 << 12) - 2

    def __init__(self, header: Sequence[int]) -> None:
        self.header = [int(v) for v in header]

    def _header_bits(self) -> np.ndarray:
        words = np.asarray(self.header, "<u4").view(np.uint8)
        bits = np.unpackbits(words, bitorder="little")
        # 32 magic + 52 field bits, then a 12-bit mode, extended by 52 bits when it is "long"
        mode = int(np.packbits(bits[84:96], bitorder="little").view("<u2")[0])
        return bits[: 148 if mode > self._MODE_SHORT_MAX else 96]

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Decompress one chunk."""
        data = ensure_bytes(buf)
        if data[:3] == b"zfp":  # written with the header in the chunk
            return _into(imagecodecs.zfp_decode(data).tobytes(), out)
        hbits = self._header_bits()
        if hbits.size % 8 == 0:
            stream = np.packbits(hbits, bitorder="little").tobytes() + data
        else:  # ZFP streams are bit streams: splice the header in front bit by bit
            body = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
            stream = np.packbits(np.concatenate([hbits, body]), bitorder="little").tobytes()
        pad = -len(stream) % 8  # ZFP reads whole 64-bit words
        return _into(imagecodecs.zfp_decode(stream + bytes(pad)).tobytes(), out)

    def encode(self, buf: Any) -> bytes:
        """Not supported: ZFP is lossy, and re-encoding would need the array's shape."""
        raise NotImplementedError(
            "h5sidecar.zfp only decodes; read ZFP-compressed datasets, do not rewrite them"
        )


class HDF5FilterPlugin(Codec):
    """Any filter the local HDF5 library can decode (e.g. an ``hdf5plugin`` filter such as SZ).

    The chunk is written into a one-chunk dataset of an in-memory HDF5 file with the same
    dtype, chunk shape and filter, and read back through HDF5, so the result is what h5py
    gives.  Readers need h5py and the filter's plugin (``hdf5plugin``); valid only for a filter
    that comes first in the pipeline (its output is the chunk's values).

    Parameters
    ----------
    filter_id, flags : int
    cd_values : list of int
    dtype : str
        numpy dtype of the dataset.
    chunks : list of int
        Chunk shape.
    """

    codec_id = "h5sidecar.hdf5filter"

    def __init__(
        self,
        filter_id: int,
        flags: int,
        cd_values: Sequence[int],
        dtype: str,
        chunks: Sequence[int],
    ) -> None:
        self.filter_id = int(filter_id)
        self.flags = int(flags)
        self.cd_values = [int(v) for v in cd_values]
        self.dtype = str(dtype)
        self.chunks = [int(c) for c in chunks]
        self._lock = threading.Lock()
        self._dset: Any = None

    def get_config(self) -> dict[str, Any]:
        """Codec config (without the private in-memory file)."""
        keys = ("filter_id", "flags", "cd_values", "dtype", "chunks")
        return {"id": self.codec_id, **{k: getattr(self, k) for k in keys}}

    def _dataset(self) -> Any:
        if self._dset is None:
            import h5py
            import hdf5plugin  # noqa: F401  (registers the plugin filters with HDF5)

            fid = h5py.File(f"h5sidecar-{id(self)}.h5", "w", driver="core", backing_store=False)
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk(tuple(self.chunks))
            dcpl.set_filter(self.filter_id, self.flags, tuple(self.cd_values))
            space = h5py.h5s.create_simple(tuple(self.chunks))
            tid = h5py.h5t.py_create(np.dtype(self.dtype))
            dsid = h5py.h5d.create(fid.id, b"chunk", tid, space, dcpl=dcpl)
            self._dset = (fid, h5py.Dataset(dsid))
        return self._dset[1]

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Decode one chunk through the HDF5 library."""
        with self._lock:
            dset = self._dataset()
            dset.id.write_direct_chunk((0,) * len(self.chunks), ensure_bytes(buf))
            values = dset[...]
        return _into(np.ascontiguousarray(values).tobytes(), out)

    def encode(self, buf: Any) -> bytes:
        """Encode one chunk through the HDF5 library."""
        with self._lock:
            dset = self._dataset()
            arr = np.frombuffer(ensure_bytes(buf), np.dtype(self.dtype)).reshape(self.chunks)
            dset[...] = arr
            return dset.id.read_direct_chunk((0,) * len(self.chunks))[1]
