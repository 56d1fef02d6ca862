"""zarr's private API (``zarr.core.*``, private per zarr's own documentation, and underscored names).

Four uses; :data:`CHECKED` is the range ``pyproject.toml`` allows (checked on 3.1.6, with
``tests/test_compat.py``); another zarr fails on import with an error naming the version:

- :func:`v2_fill_value`: the fill value of a Zarr v2 ``.zarray`` exactly as zarr parses it
  (``ArrayV2Metadata.from_dict(...).fill_value``: base64 bytes, structured scalars,
  ``"NaN"``...).  Public alternative: none that parses a whole ``.zarray`` (opening an array
  does, but needs a store and a round trip).
- :func:`validate_array_v3_metadata`: zarr's validation of a Zarr v3 array ``zarr.json``
  (``ArrayV3Metadata.from_dict``), before it is written where zarr must read it back.
  Public alternative: none short of writing an array and opening it.

- :func:`v2_string_dtype`: the dtype and fill value zarr reads a Zarr v2 array of
  variable-length UTF-8 strings as (``ArrayV2Metadata.from_dict(...).dtype``), so the batch
  reader decodes them to what zarr returns.  Public alternative: opening the array.
- :class:`NumcodecsBytesBytesCodec` and :class:`NumcodecsArrayArrayCodec`: the base classes of
  zarr's own Zarr v3 wrappers of numcodecs codecs (``zarr.codecs.numcodecs``'s
  ``_NumcodecsBytesBytesCodec`` and ``_NumcodecsArrayArrayCodec``): a subclass declared with
  ``codec_name="x"`` is the v3 codec ``numcodecs.x``.  The HDF5 filter codecs
  (:mod:`h5sidecar.codecs`) and :func:`h5sidecar.read.register_numcodecs_v3` derive from them.
  Public alternative: none short of writing each wrapper's ``Codec`` protocol by hand
  (checked on zarr 3.1.6).

Public names serve everything else: ``zarr.abc.buffer`` (``Buffer``, ``BufferPrototype``),
``zarr.buffer.default_buffer_prototype``, ``zarr.dtype.data_type_registry``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr
from packaging.specifiers import SpecifierSet
from packaging.version import Version

__all__ = [
    "CHECKED",
    "NumcodecsArrayArrayCodec",
    "NumcodecsBytesBytesCodec",
    "v2_fill_value",
    "v2_string_dtype",
    "validate_array_v3_metadata",
]

#: The zarr versions these uses are known to work on (checked: 3.1.6).
CHECKED = SpecifierSet(">=3.1,<3.2")

if Version(zarr.__version__) not in CHECKED:  # pragma: no cover - pyproject pins the range
    raise ImportError(
        f"h5sidecar uses zarr's private metadata classes as of zarr {CHECKED}; zarr "
        f"{zarr.__version__} is installed: install a zarr in that range"
    )

from zarr.codecs.numcodecs import _NumcodecsArrayArrayCodec, _NumcodecsBytesBytesCodec
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata  # after the gate

#: Base class of a Zarr v3 bytes-to-bytes codec wrapping the numcodecs codec its subclass names.
NumcodecsBytesBytesCodec = _NumcodecsBytesBytesCodec
#: Base class of a Zarr v3 array-to-array codec wrapping the numcodecs codec its subclass names.
NumcodecsArrayArrayCodec = _NumcodecsArrayArrayCodec


def v2_fill_value(zarray: Mapping[str, Any]) -> Any:
    """The fill value of the Zarr v2 array described by ``zarray`` (a ``.zarray`` document), as
    zarr decodes it (``None`` when it has none)."""
    return ArrayV2Metadata.from_dict(dict(zarray) | {"attributes": {}}).fill_value


def v2_string_dtype(zarray: Mapping[str, Any]) -> tuple[np.dtype, Any] | None:
    """``(dtype, fill value)`` of the values zarr reads for the Zarr v2 array of Python objects
    described by ``zarray`` when they are variable-length UTF-8 strings (numpy's
    ``StringDType``, ``""`` in unwritten chunks unless a fill value is given); None when zarr
    reads its values as Python objects."""
    meta = ArrayV2Metadata.from_dict(dict(zarray) | {"attributes": {}})
    dtype = meta.dtype.to_native_dtype()
    if dtype.kind != "T":
        return None
    fill = meta.fill_value if meta.fill_value is not None else meta.dtype.default_scalar()
    return dtype, fill


def validate_array_v3_metadata(doc: Mapping[str, Any]) -> None:
    """Raise what zarr raises reading the Zarr v3 array document ``doc`` (``zarr.json``)."""
    ArrayV3Metadata.from_dict(dict(doc))
