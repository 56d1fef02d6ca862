"""The extras block's key and versions: version 1 as written, version 2 packed (3: packed, of
a cube whose manifests parts supersede chunks).

Combined references (a datacube: ``members`` listed) write version 2: ``urls``, ``arrays``,
``extra`` and ``members``, which grow with the member granules, are held as one
zstd-compressed, base64-encoded JSON object (``"packed": {"codec": "zstd", "size": N,
"data": "..."}``; about a fifth of their JSON text), the rest as version 1
(:mod:`h5sidecar.references._extras`).  :func:`pack` writes it without every member's dict
alive at once; :func:`unpack` turns it back into version 1, bounded (the file is untrusted).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._model import SourceInfo

__all__ = [
    "EXTRAS_KEY",
    "EXTRAS_VERSION",
    "MEMBERS_SLICE",
    "OVER_VERSION",
    "PACKED_FIELDS",
    "PACKED_VERSION",
    "PACKED_VERSIONS",
    "pack",
    "unpack",
]

#: The extras block's key, beside kerchunk's own (where plain readers ignore it).
EXTRAS_KEY = "h5sidecar"
#: Version of a single granule's extras, and of a version-2 block unpacked.
EXTRAS_VERSION = 1
#: Version of the extras of combined references (their growing parts packed, see above).
PACKED_VERSION = 2
#: Version of a packed block whose cube's manifests parts may supersede chunks (a member
#: replaced in place, see :mod:`~h5sidecar.references.parquet_sidecar._manifests_parts`): read
#: as version 2, refused by an h5sidecar before it (which would read the old chunks).
OVER_VERSION = 3
#: The versions of packed blocks.
PACKED_VERSIONS = (PACKED_VERSION, OVER_VERSION)
#: The fields a version-2 block packs.
PACKED_FIELDS = ("urls", "arrays", "extra", "members")
#: zstd level of the packed fields: ~6x smaller than their JSON, ~35 ms per 1000 members
#: (levels above 15 gain little and take several times longer).
PACK_LEVEL = 15
#: Members turned into JSON at a time when packing: a million members' dicts at once would be
#: ~0.5 GB of short-lived objects at the cube's write (its peak memory).
MEMBERS_SLICE = 10_000
#: Largest packed object read (the size is declared by an untrusted file: an allocation bound).
MAX_PACKED_BYTES = 1 << 30


def pack(block: dict[str, Any], members: Sequence[SourceInfo] = ()) -> dict[str, Any]:
    """A version-2 extras block: :data:`PACKED_FIELDS` of ``block`` compressed into one field,
    ``members`` (when given, instead of ``block["members"]``) among them.

    The JSON text is written into one buffer, long lists (URLs, members, each array's URL
    indices, the cube record's per-member lists) :data:`MEMBERS_SLICE` items at a time: the
    same bytes as ``json.dumps`` of the whole object (a list's compact JSON is its items'
    texts joined by commas), without every member's dict and two more copies of the text
    alive at once (~1 GB at a million members).
    """
    import pyarrow as pa

    inner = {k: block[k] for k in PACKED_FIELDS if k in block and not (members and k == "members")}
    raw = bytearray()
    _dump(raw, inner)
    if members:  # "members", the last of PACKED_FIELDS, in place of the closing brace
        raw[-1:] = b',"members":' if inner else b'"members":'
        _dump_list(raw, members, SourceInfo.to_dict)
        raw += b"}"
    data = pa.Codec("zstd", PACK_LEVEL).compress(raw, asbytes=True)
    size = len(raw)
    del raw
    rest = {k: v for k, v in block.items() if k not in PACKED_FIELDS}
    return {**rest, "version": PACKED_VERSION,
            "packed": {"codec": "zstd", "size": size,
                       "data": base64.b64encode(data).decode("ascii")}}


def _dumps(obj: Any) -> bytes:
    import json

    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def _dump(raw: bytearray, value: Any) -> None:
    """Append ``json.dumps(value)`` (compact) to ``raw``, long lists and arrays a slice at a
    time (dicts of string keys are walked; NumPy arrays are written as lists)."""
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        raw += b"{"
        for i, (k, v) in enumerate(value.items()):
            raw += (b"," if i else b"") + _dumps(k) + b":"
            _dump(raw, v)
        raw += b"}"
    elif isinstance(value, np.ndarray) or (isinstance(value, list | tuple)
                                           and len(value) > MEMBERS_SLICE):
        _dump_list(raw, value, None)
    else:
        raw += _dumps(value)


def _dump_list(raw: bytearray, items: Sequence[Any] | np.ndarray, convert: Any) -> None:
    """Append the JSON of the list ``items`` (each through ``convert`` first) to ``raw``."""
    raw += b"["
    for i in range(0, len(items), MEMBERS_SLICE):
        part = items[i:i + MEMBERS_SLICE]
        if isinstance(part, np.ndarray):
            part = part.tolist()
        raw += b"," if i else b""
        raw += _dumps(part if convert is None else [convert(x) for x in part])[1:-1]
    raw += b"]"


def unpack(block: dict[str, Any]) -> dict[str, Any]:
    """The version-1 form of a version-2 block (``InvalidReferenceError`` when malformed)."""
    import json

    import pyarrow as pa

    packed = block.get("packed")
    if not isinstance(packed, dict) or packed.get("codec") != "zstd":
        raise InvalidReferenceError(
            f"{EXTRAS_KEY} extras version 2 need a 'packed' object with codec 'zstd'")
    outside = [k for k in PACKED_FIELDS if k in block]
    if outside:
        raise InvalidReferenceError(
            f"{EXTRAS_KEY} extras version 2 hold {', '.join(outside)} both packed and not")
    size, text = packed.get("size"), packed.get("data")
    if (not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_PACKED_BYTES
            or not isinstance(text, str)):
        raise InvalidReferenceError(
            f"{EXTRAS_KEY}.packed needs a size (1..{MAX_PACKED_BYTES}) and base64 data")
    try:
        raw = pa.Codec("zstd").decompress(base64.b64decode(text, validate=True),
                                          decompressed_size=size, asbytes=True)
        inner = json.loads(raw)
    except (ValueError, OSError, pa.ArrowException) as exc:  # OSError: zstd's own errors
        raise InvalidReferenceError(
            f"{EXTRAS_KEY}.packed is unreadable ({exc}); the references are damaged: "
            "build them again") from exc
    if not isinstance(inner, dict) or set(inner) - set(PACKED_FIELDS):
        raise InvalidReferenceError(
            f"{EXTRAS_KEY}.packed must hold an object of {', '.join(PACKED_FIELDS)}")
    rest = {k: v for k, v in block.items() if k != "packed"}
    return {**rest, **inner, "version": EXTRAS_VERSION}
