"""Zarr v3 metadata synthesized from the Zarr v2 metadata of a sidecar.

Sidecars persist Zarr v2 metadata (that is what kerchunk and fsspec read).  This module derives
the equivalent Zarr v3 documents (``zarr.json`` of every group and array, consolidated in the
root) for readers that want v3: the HTTP gateway's v3 routes and ``SidecarStore(zarr_format=3)``.

Choices, and why:

* **chunk_key_encoding** is ``{"name": "v2", "configuration": {"separator": "."}}``: chunk keys
  are then byte-for-byte the v2 keys (``"0.3"``, ``"0"`` for scalars), so one key resolver serves
  both formats and no key is translated.
* **codecs**: the HDF5 filter pipeline works on the serialized chunk bytes, so every v2 filter
  (and the compressor) becomes a bytes-to-bytes codec after the ``bytes`` serializer, named
  ``numcodecs.<id>`` as zarr-python's :mod:`zarr.codecs.numcodecs` does.  The few numcodecs
  filters that work on typed arrays (``delta``, ``fixedscaleoffset``, ...) go before it.
  Variable-length strings use ``vlen-utf8`` / ``vlen-bytes`` as the serializer.
* **data_type** and **fill_value** come from zarr-python's own data type registry, so they are
  exactly what zarr 3.1 writes.

Known limit (measured with zarr 3.1): Zarr v3 cannot express the byte order of the fields of a
structured type; zarr reads such chunks as little-endian and returns wrong numbers silently.
:func:`array_metadata_v3` therefore refuses structured types with big-endian fields
(:class:`~h5sidecar.errors.UnsupportedFeatureError`); the v2 view reads them correctly.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from h5sidecar.errors import InvalidReferenceError, UnsupportedFeatureError
from h5sidecar.references import ArrayMeta, GranuleRefs

__all__ = [
    "ARRAY_ARRAY_CODECS",
    "array_metadata_v3",
    "consolidated_metadata_v3",
    "group_metadata_v3",
    "register_numcodecs_v3",
]

#: numcodecs ids whose codecs transform typed arrays (Zarr v3 array-to-array codecs).
ARRAY_ARRAY_CODECS = frozenset(
    {"delta", "fixedscaleoffset", "quantize", "bitround", "packbits", "astype", "categorize"}
)

#: numcodecs ids that serialize object arrays (Zarr v3 array-to-bytes codecs).
_VLEN_CODECS = frozenset({"vlen-utf8", "vlen-bytes"})

V2_KEY_ENCODING: dict[str, Any] = {"name": "v2", "configuration": {"separator": "."}}


def _zdtype(meta: ArrayMeta, object_codec: str | None) -> Any:
    """zarr's data type object for the v2 dtype of ``meta`` (quietly: we only translate)."""
    from zarr.dtype import data_type_registry

    spec = {"name": meta.dtype, "object_codec_id": object_codec}
    with warnings.catch_warnings():
        # zarr flags dtypes without a ratified v3 spec (|S, structured, vlen); that is the
        # reader's concern, not a reason to fail translating.
        warnings.simplefilter("ignore")
        try:
            return data_type_registry.match_json(spec, zarr_format=2)  # type: ignore[arg-type]
        except ValueError as exc:
            raise UnsupportedFeatureError(
                f"Zarr has no data type for {meta.dtype!r}: {exc}. Read this array through the "
                "Zarr v2 view (the default of SidecarStore and the xarray engine)."
            ) from exc


def _check_structured_byte_order(meta: ArrayMeta, path: str) -> None:
    """Refuse structured types with big-endian fields (see the module docstring)."""
    dt = meta.numpy_dtype
    if dt.fields is None:
        return

    def big(d: Any) -> bool:
        if d.fields is not None:
            return any(big(f[0]) for f in d.fields.values())
        if d.subdtype is not None:
            return big(d.subdtype[0])
        return d.byteorder == ">" or (d.byteorder == "=" and not _little_endian_host())

    if big(dt):
        raise UnsupportedFeatureError(
            f"{path or 'array'}: structured type {dt} has big-endian fields, which Zarr v3 cannot "
            "express (zarr would decode them as little-endian, giving wrong values). Read it "
            "through the Zarr v2 view instead (SidecarStore(zarr_format=2), the default)."
        )


def _little_endian_host() -> bool:
    import sys

    return sys.byteorder == "little"


def _named(config: Mapping[str, Any]) -> dict[str, Any]:
    """A numcodecs config ``{"id": x, ...}`` as a v3 codec ``{"name": "numcodecs.x", ...}``."""
    cfg = dict(config)
    try:
        codec_id = str(cfg.pop("id"))
    except KeyError as exc:
        raise InvalidReferenceError(f"codec config without an 'id': {dict(config)!r}") from exc
    return {"name": f"numcodecs.{codec_id}", "configuration": cfg}


def _codecs(meta: ArrayMeta, zdtype: Any, path: str) -> list[dict[str, Any]]:
    """The v3 codec chain equivalent to the v2 filters + compressor of ``meta``."""
    pipeline = [dict(f) for f in meta.filters]
    if meta.compressor is not None:
        pipeline.append(dict(meta.compressor))
    array_array: list[dict[str, Any]] = []
    bytes_bytes: list[dict[str, Any]] = []
    serializer: dict[str, Any] | None = None
    for cfg in pipeline:
        codec_id = cfg.get("id")
        if codec_id in _VLEN_CODECS:
            if serializer is not None or bytes_bytes:
                raise InvalidReferenceError(
                    f"{path}: {codec_id} must come first in the pipeline, got {pipeline!r}"
                )
            serializer = {"name": codec_id, "configuration": {}}
        elif codec_id in ARRAY_ARRAY_CODECS and serializer is None and not bytes_bytes:
            array_array.append(_named(cfg))
        else:
            bytes_bytes.append(_named(cfg))
    if meta.order == "F" and len(meta.shape) > 1:
        array_array.insert(
            0, {"name": "transpose", "configuration": {"order": list(range(len(meta.shape)))[::-1]}}
        )
    if serializer is None:
        endian = getattr(zdtype, "endianness", None)
        serializer = {"name": "bytes", "configuration": {"endian": endian} if endian else {}}
    return [*array_array, serializer, *bytes_bytes]


def _object_codec(meta: ArrayMeta) -> str | None:
    for cfg in meta.filters:
        if cfg.get("id") in _VLEN_CODECS:
            return str(cfg["id"])
    if meta.compressor is not None and meta.compressor.get("id") in _VLEN_CODECS:
        return str(meta.compressor["id"])
    return None


def array_metadata_v3(meta: ArrayMeta, *, fill_value: Any = ..., path: str = "") -> dict[str, Any]:
    """The ``zarr.json`` document of one array.

    Parameters
    ----------
    meta : ArrayMeta
        The array's v2 metadata.
    fill_value : JSON value, optional
        The v2 ``fill_value`` to translate (default ``meta.fill_value``); ``None`` becomes the
        data type's default (zeros), which is what v2 readers give for unstored chunks too.
    path : str
        The array's path, used in error messages.

    Raises
    ------
    UnsupportedFeatureError
        When the data type cannot be expressed in Zarr v3 without changing values.
    """
    object_codec = _object_codec(meta)
    if meta.dtype in ("|O", "O") and object_codec is None:
        raise InvalidReferenceError(
            f"{path}: object dtype without a vlen-utf8/vlen-bytes codec; re-index the granule"
        )
    _check_structured_byte_order(meta, path)
    zdtype = _zdtype(meta, object_codec)
    fv_v2 = meta.fill_value if fill_value is ... else fill_value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scalar = _default_scalar(zdtype) if fv_v2 is None else _fill(zdtype, fv_v2, path)
        fv_v3 = zdtype.to_json_scalar(scalar, zarr_format=3)
        dtype_v3 = zdtype.to_json(zarr_format=3)
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(meta.shape),
        "data_type": dtype_v3,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(meta.chunks)}},
        "chunk_key_encoding": V2_KEY_ENCODING,
        "fill_value": fv_v3,
        "codecs": _codecs(meta, zdtype, path),
        "attributes": _attributes(meta),
        "dimension_names": list(meta.dimension_names) if meta.dimension_names else None,
        "storage_transformers": [],
    }


def _attributes(meta: ArrayMeta) -> dict[str, Any]:
    """The array's attributes as Zarr v3 readers (xarray) expect them: ``_FillValue`` in
    xarray's encoding, as in the sidecar's ``.zattrs`` (see :mod:`h5sidecar.references._cf`)."""
    attrs = meta.zattrs()
    attrs.pop("_ARRAY_DIMENSIONS", None)
    if meta.numpy_dtype.kind in "SV":
        # xarray decodes a v3 _FillValue only for numbers, booleans and text, and refuses to
        # open the whole group otherwise; xarray + h5netcdf masks no byte strings either
        attrs.pop("_FillValue", None)
    return attrs


def _default_scalar(zdtype: Any) -> Any:
    """The data type's zero value.  zarr 3.1's own ``default_scalar`` of a structured type with
    raw-byte (``|V``, e.g. padding) fields raises TypeError; zeros of the native dtype do not."""
    try:
        return zdtype.default_scalar()
    except TypeError:
        import numpy as np

        return np.zeros((), dtype=zdtype.to_native_dtype())[()]


def _fill(zdtype: Any, fv_v2: Any, path: str) -> Any:
    try:
        return zdtype.from_json_scalar(fv_v2, zarr_format=2)
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: out of range
        raise InvalidReferenceError(
            f"{path}: fill_value {fv_v2!r} is not valid for {zdtype}: {exc}"
        ) from exc


def group_metadata_v3(
    attrs: Mapping[str, Any], *, consolidated: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The ``zarr.json`` document of a group (``consolidated``: child path -> metadata)."""
    doc: dict[str, Any] = {"zarr_format": 3, "node_type": "group", "attributes": dict(attrs)}
    if consolidated is not None:
        doc["consolidated_metadata"] = {
            "kind": "inline",
            "must_understand": False,
            "metadata": dict(consolidated),
        }
    return doc


def consolidated_metadata_v3(
    refs: GranuleRefs, *, unsupported: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Every node's ``zarr.json`` document, keyed by node path (``""`` for the root).

    The root document carries every other node as inline consolidated metadata, so
    ``zarr.open_group(store, mode="r")`` finds nested groups with a single read.

    Parameters
    ----------
    refs : GranuleRefs
    unsupported : dict, optional
        When given, arrays that Zarr v3 cannot express are left out of the view and recorded
        here (path -> reason) instead of failing the whole granule.

    Raises
    ------
    UnsupportedFeatureError
        For such an array when ``unsupported`` is None.
    """
    nodes: dict[str, dict[str, Any]] = {}
    for g, attrs in refs.groups.items():
        if g:
            nodes[g] = group_metadata_v3(attrs)
    for path, arr in refs.arrays.items():
        try:
            nodes[path] = array_metadata_v3(
                arr.meta, fill_value=arr.zarray_fill_value(), path=path
            )
        except UnsupportedFeatureError as exc:
            if unsupported is None:
                raise
            unsupported[path] = str(exc)
    # sorted: zarr 3.1 loses nodes of unsorted consolidated metadata (zarr-python #4226)
    nodes = dict(sorted(nodes.items()))
    root = group_metadata_v3(refs.groups.get("", {}), consolidated=nodes)
    return {"": root, **nodes}


_REGISTERED: set[str] = set()


def register_numcodecs_v3(codec_ids: Mapping[str, Any] | set[str] | list[str]) -> None:
    """Teach zarr-python's v3 codec registry the ``numcodecs.<id>`` names it lacks.

    zarr ships v3 classes for the common numcodecs codecs, and finds those of the HDF5 codecs
    of :mod:`h5sidecar.codecs` through its ``zarr.codecs`` entry points: every codec the indexer
    writes is known to zarr without this call.  A sidecar written by another tool may name a
    numcodecs codec zarr has no v3 class for; to read it through a Zarr v3 view
    (``SidecarStore(zarr_format=3)``), call this once with its codec ids.  zarr's registry is
    process-wide, so no store calls it for you.  Names zarr already knows are left alone; the
    array-to-array codecs (``ARRAY_ARRAY_CODECS``) get array-to-array wrappers, every other id
    a bytes-to-bytes one (HDF5 filters work on serialized chunks).  Idempotent.

    Parameters
    ----------
    codec_ids : iterable of str
        numcodecs ids (``"categorize"``, not ``"numcodecs.categorize"``).

    Examples
    --------
    >>> from h5sidecar.read import register_numcodecs_v3
    >>> register_numcodecs_v3(["imagecodecs_lerc"])                   # doctest: +SKIP
    """
    from zarr.registry import get_codec_class, register_codec

    from h5sidecar._compat.zarr import NumcodecsArrayArrayCodec, NumcodecsBytesBytesCodec

    for codec_id in codec_ids:
        name = f"numcodecs.{codec_id}"
        if codec_id in _VLEN_CODECS or codec_id in _REGISTERED:
            continue
        try:
            get_codec_class(name)
            continue
        except KeyError:
            pass
        base = (
            NumcodecsArrayArrayCodec
            if codec_id in ARRAY_ARRAY_CODECS
            else NumcodecsBytesBytesCodec
        )
        cls = type(
            f"V3_{codec_id.replace('.', '_').replace('-', '_')}",
            (base,),
            {"__module__": __name__},
            codec_name=codec_id,
        )
        register_codec(name, cls)
        _REGISTERED.add(codec_id)


def codec_ids(refs: GranuleRefs) -> set[str]:
    """The numcodecs ids used by any array of ``refs``."""
    ids: set[str] = set()
    for arr in refs.arrays.values():
        ids.update(str(f["id"]) for f in arr.meta.filters)
        if arr.meta.compressor is not None:
            ids.add(str(arr.meta.compressor["id"]))
    return ids
