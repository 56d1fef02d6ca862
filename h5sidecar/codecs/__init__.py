"""numcodecs codecs for HDF5 filters that no standard codec decodes.

Registered under the ``numcodecs.codecs`` entry point group, so any numcodecs/Zarr reader finds
them by id once h5sidecar is installed, without importing h5sidecar:

=========================  ==========================================  ========================
codec id                   HDF5 filter                                  class
=========================  ==========================================  ========================
``h5sidecar.szip``         szip (4), 4-byte size prefix                 :class:`HDF5Szip`
``h5sidecar.nbit``         N-bit (5)                                    :class:`HDF5Nbit`
``h5sidecar.scaleoffset``  scale-offset (6)                             :class:`HDF5ScaleOffset`
``h5sidecar.lzf``          LZF (32000)                                  :class:`HDF5LZF`
``h5sidecar.lz4``          LZ4 (32004), HDF5 block framing              :class:`HDF5LZ4`
``h5sidecar.bitshuffle``   bitshuffle (32008) + LZ4/Zstd, 12-byte hdr   :class:`HDF5Bitshuffle`
``h5sidecar.zfp``          H5Z-ZFP (32013), header in cd_values         :class:`HDF5ZFP`
``h5sidecar.blosc2``       Blosc2 (32026), contiguous frames            :class:`HDF5Blosc2`
``h5sidecar.hdf5filter``   any filter the local HDF5 decodes (SZ ...)   :class:`HDF5FilterPlugin`
=========================  ==========================================  ========================
"""

from __future__ import annotations

from h5sidecar.codecs._bitpack import HDF5Nbit, HDF5ScaleOffset

# names imported `as` themselves are served to h5sidecar's own layers, not advertised in __all__
from h5sidecar.codecs._bitpack import NbitCustomFloatError as NbitCustomFloatError
from h5sidecar.codecs._bitpack import nbit_fields as nbit_fields
from h5sidecar.codecs._bitshuffle import HDF5Bitshuffle
from h5sidecar.codecs._compress import (
    HDF5LZ4,
    HDF5LZF,
    HDF5ZFP,
    HDF5Blosc2,
    HDF5FilterPlugin,
    HDF5Szip,
)

__all__ = [
    "CODECS",
    "HDF5Bitshuffle",
    "HDF5Blosc2",
    "HDF5FilterPlugin",
    "HDF5LZ4",
    "HDF5LZF",
    "HDF5Nbit",
    "HDF5ScaleOffset",
    "HDF5Szip",
    "HDF5ZFP",
    "register_codecs",
]

#: Every codec class defined here (their ``codec_id`` matches the entry point names).
CODECS = (
    HDF5Szip,
    HDF5Nbit,
    HDF5ScaleOffset,
    HDF5LZF,
    HDF5LZ4,
    HDF5Bitshuffle,
    HDF5ZFP,
    HDF5Blosc2,
    HDF5FilterPlugin,
)


def register_codecs() -> None:
    """Register the codecs with numcodecs explicitly.

    Not needed when h5sidecar is installed (entry points do it); useful when running from a
    source tree that is not installed.
    """
    import numcodecs

    for cls in CODECS:
        numcodecs.register_codec(cls)
