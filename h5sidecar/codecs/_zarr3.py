"""Zarr v3 codecs for the HDF5 filter codecs of :mod:`h5sidecar.codecs`.

Registered under zarr's ``zarr.codecs`` entry point group (see ``pyproject.toml``), so zarr
finds ``numcodecs.h5sidecar.szip`` & co. by name in any Zarr v3 metadata (the gateway's v3 and
sharded views, VirtualiZarr's and Icechunk's stores) once h5sidecar is installed, with no call
and no import.  HDF5 filters work on serialized chunk bytes: all are bytes-to-bytes codecs.
"""

from __future__ import annotations

from h5sidecar._compat.zarr import NumcodecsBytesBytesCodec

__all__ = [
    "Bitshuffle",
    "Blosc2",
    "FilterPlugin",
    "LZ4",
    "LZF",
    "Nbit",
    "ScaleOffset",
    "Szip",
    "ZFP",
]


class Szip(NumcodecsBytesBytesCodec, codec_name="h5sidecar.szip"):
    """HDF5 szip (filter 4)."""


class Nbit(NumcodecsBytesBytesCodec, codec_name="h5sidecar.nbit"):
    """HDF5 N-bit (filter 5)."""


class ScaleOffset(NumcodecsBytesBytesCodec, codec_name="h5sidecar.scaleoffset"):
    """HDF5 scale-offset (filter 6)."""


class LZF(NumcodecsBytesBytesCodec, codec_name="h5sidecar.lzf"):
    """LZF (filter 32000)."""


class LZ4(NumcodecsBytesBytesCodec, codec_name="h5sidecar.lz4"):
    """LZ4 with HDF5 block framing (filter 32004)."""


class Bitshuffle(NumcodecsBytesBytesCodec, codec_name="h5sidecar.bitshuffle"):
    """bitshuffle + LZ4/Zstd (filter 32008)."""


class ZFP(NumcodecsBytesBytesCodec, codec_name="h5sidecar.zfp"):
    """H5Z-ZFP (filter 32013)."""


class Blosc2(NumcodecsBytesBytesCodec, codec_name="h5sidecar.blosc2"):
    """Blosc2 contiguous frames (filter 32026)."""


class FilterPlugin(NumcodecsBytesBytesCodec, codec_name="h5sidecar.hdf5filter"):
    """Any filter the local HDF5 library decodes."""
