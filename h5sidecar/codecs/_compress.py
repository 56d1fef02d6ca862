"""numcodecs codecs for HDF5 plugin filters whose chunk framing no standard codec reads.

Each class undoes exactly what the HDF5 filter wrote, framing included (the szip 4-byte size
prefix, the LZ4 block headers, H5Z-ZFP's header kept in ``cd_values``, Blosc2's
contiguous frame).  They are registered through the ``numcodecs.codecs`` entry points, so plain
Zarr/numcodecs readers find them with h5sidecar installed and never imported.  Bitshuffle,
with its own bit transpose, is in :mod:`._bitshuffle`.
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
    "HDF5Blosc2",
    "HDF5FilterPlugin",
    "HDF5LZ4",
    "HDF5LZF",
    "HDF5Szip",
    "HDF5ZFP",
    "copy_into",
]


def copy_into(data: Any, out: Any) -> Any:
    """``data`` itself, or copied into ``out`` when numcodecs passes an output buffer."""
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
        return copy_into(imagecodecs.szip_decode(ensure_bytes(buf), header=True, **self._params()), out)

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
        return copy_into(data, out)

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
        return copy_into(imagecodecs.lz4h5_decode(ensure_bytes(buf)), out)

    def encode(self, buf: Any) -> bytes:
        """Compress one chunk (HDF5 framing)."""
        return bytes(imagecodecs.lz4h5_encode(ensure_bytes(buf), blocksize=self.blocksize or None))


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
        return copy_into(data, out)

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
            return copy_into(imagecodecs.zfp_decode(data).tobytes(), out)
        hbits = self._header_bits()
        if hbits.size % 8 == 0:
            stream = np.packbits(hbits, bitorder="little").tobytes() + data
        else:  # ZFP streams are bit streams: splice the header in front bit by bit
            body = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
            stream = np.packbits(np.concatenate([hbits, body]), bitorder="little").tobytes()
        pad = -len(stream) % 8  # ZFP reads whole 64-bit words
        return copy_into(imagecodecs.zfp_decode(stream + bytes(pad)).tobytes(), out)

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
        return copy_into(np.ascontiguousarray(values).tobytes(), out)

    def encode(self, buf: Any) -> bytes:
        """Encode one chunk through the HDF5 library."""
        with self._lock:
            dset = self._dataset()
            arr = np.frombuffer(ensure_bytes(buf), np.dtype(self.dtype)).reshape(self.chunks)
            dset[...] = arr
            return dset.id.read_direct_chunk((0,) * len(self.chunks))[1]
