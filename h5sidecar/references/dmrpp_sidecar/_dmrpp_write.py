"""A granule's references as a DMR++ document (what the OPeNDAP project's ``build_dmrpp`` writes
beside a granule, so a Hyrax server or any DMR++ reader can use what h5sidecar indexed).

The document is DAP4 (groups, shared dimensions, typed attributes and variables) annotated in
the ``dmrpp`` namespace: ``dmrpp:href`` (the granule's URL), and per variable ``dmrpp:chunks``
(``compressionType``, ``deflateLevel``, ``fillValue``, ``byteOrder``, the chunk shape and one
``dmrpp:chunk`` per stored chunk with its ``offset``, ``nBytes``, ``chunkPositionInArray`` and,
when it lies in another file, its own ``href``), or ``dmrpp:compact`` for a whole variable held
in the references unfiltered (little-endian, as build_dmrpp writes it).

What DMR++ cannot say exactly is left out, never written wrong: a variable whose type has no
DAP4 atomic equivalent here (compound, boolean, variable-length, opaque), whose filters are not
deflate / shuffle / fletcher32, or whose values are held in the references in pieces; an
attribute whose type or text XML 1.0 or DAP4 cannot carry.  Each is returned as a
:class:`~h5sidecar.references.Skipped` record with the reason.  Never-written chunks are not
listed: readers give them the fill value, as HDF5 does.
"""

from __future__ import annotations

import base64
import posixpath
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.references._model import ArrayRefs, GranuleRefs, Skipped

__all__ = ["DAP4_NS", "DMRPP_NS", "dmrpp_document", "write_dmrpp"]

DAP4_NS = "http://xml.opendap.org/ns/DAP/4.0#"
DMRPP_NS = "http://xml.opendap.org/dap/dmrpp/1.0.0#"
#: NumPy kind + size -> DAP4 atomic type.
_DAP_TYPES = {
    "u1": "Byte", "i1": "Int8", "i2": "Int16", "u2": "UInt16", "i4": "Int32", "u4": "UInt32",
    "i8": "Int64", "u8": "UInt64", "f4": "Float32", "f8": "Float64",
}  # fmt: skip
#: numcodecs id -> DMR++ ``compressionType`` word.
_FILTER_WORDS = {"zlib": "deflate", "shuffle": "shuffle", "fletcher32": "fletcher32"}
#: Names h5netcdf gives anonymous axes: written as anonymous ``Dim`` (no shared dimension).
_PHONY = re.compile(r"phony_dim_\d+")
#: Characters XML 1.0 cannot hold, even escaped.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


class _LeftOut(Exception):
    """A variable or attribute DMR++ cannot express; the message says why."""


def _dap_type(dtype: Any) -> tuple[str, str | None]:
    """``(DAP4 type, byteOrder or None)`` of a Zarr v2 dtype."""
    if not isinstance(dtype, str):
        raise _LeftOut("a compound type (DAP4 Structure) is not written by h5sidecar")
    dt = np.dtype(dtype)
    if dt.kind == "S":  # fixed-length: dmrpp:FixedLengthStringArray gives the length
        return "String", None
    name = _DAP_TYPES.get(f"{dt.kind}{dt.itemsize}")
    if name is None:
        raise _LeftOut(f"type {dtype} has no DAP4 atomic type h5sidecar writes")
    order = None if dt.itemsize == 1 else ("BE" if dt.byteorder == ">" else "LE")
    return name, order


def _attr_type(value: Any, spec: str | None) -> str:
    items = value if isinstance(value, list) else [value]
    if any(isinstance(v, list | dict) for v in items):
        raise _LeftOut("a multi-dimensional or compound value (DAP4 attributes are 1-D)")
    if spec is not None:
        if spec in ("bytes",) or spec.startswith("text:"):
            raise _LeftOut("bytes or text in another encoding: a DAP4 String would read as text")
        dap = _dap_type(spec)[0]
        if dap == "String":
            raise _LeftOut(f"fixed-length bytes ({spec}): a DAP4 String would read as text")
        if not all(isinstance(v, int | float | str) for v in items):
            raise _LeftOut(f"values that are not numbers of type {spec}")
        return dap
    if items and all(isinstance(v, str) for v in items):
        return "String"
    if items and all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        return "Int64"
    if items and all(isinstance(v, float | int) and not isinstance(v, bool) for v in items):
        return "Float64"
    raise _LeftOut(f"a value of type {type(value).__name__} has no DAP4 attribute type")


def _attribute(name: str, value: Any, spec: str | None) -> str:
    dap = _attr_type(value, spec)
    items = value if isinstance(value, list) else [value]
    texts = [str(v) for v in items]
    if any(_NOT_XML.search(t) for t in [name, *texts]):
        raise _LeftOut("characters XML 1.0 cannot hold")
    values = "".join(f"<Value>{escape(t)}</Value>" for t in texts)
    return f"<Attribute name={quoteattr(name)} type={quoteattr(dap)}>{values}</Attribute>"


def _attributes(
    attrs: Mapping[str, Any], types: Mapping[str, str], where: str, notes: list[Skipped]
) -> list[str]:
    out = []
    for name, value in attrs.items():
        try:
            out.append(_attribute(name, value, types.get(name)))
        except _LeftOut as why:
            notes.append(Skipped(f"{where}@{name}", ErrorKind.OTHER, f"attribute left out: {why}"))
    return out


def _filters(arr: ArrayRefs) -> str:
    """``compressionType`` and ``deflateLevel`` attribute text of a variable's pipeline."""
    words, levels = [], []
    pipeline = [*arr.meta.filters, *([arr.meta.compressor] if arr.meta.compressor else [])]
    itemsize = np.dtype(str(arr.meta.dtype)).itemsize
    for f in pipeline:
        word = _FILTER_WORDS.get(str(f.get("id")))
        if word is None:
            raise _LeftOut(f"filter {f.get('id')!r} has no DMR++ name readers decode")
        if word == "shuffle" and int(f.get("elementsize", itemsize)) != itemsize:
            raise _LeftOut("a shuffle of another element size than the type's")
        if word == "deflate" and f.get("level") is not None:
            levels.append(str(int(f["level"])))
        words.append(word)
    n_deflate = words.count("deflate")
    attrs = f" compressionType={quoteattr(' '.join(words))}" if words else ""
    # one deflate: its level, as build_dmrpp writes it (readers parse one number; several
    # deflates get none, which does not change decoding)
    if n_deflate == 1 and len(levels) == 1:
        attrs += f" deflateLevel={quoteattr(' '.join(levels))}"
    return attrs


def _chunk_rows(arr: ArrayRefs, source_url: str) -> Iterator[str]:
    """One ``dmrpp:chunk`` per stored chunk (vectorised over the manifest's columns)."""
    m = arr.manifest
    index = np.argwhere(m.codes >= 0)
    offsets = m.offsets[m.codes >= 0]
    lengths = m.lengths[m.codes >= 0]
    codes = m.codes[m.codes >= 0]
    hrefs = [
        "" if url == source_url else f" href={quoteattr(url)}" for url in m.urls
    ]  # a chunk in another file names it
    positions = index * np.asarray(arr.meta.chunks, np.int64) if index.shape[1] else index
    rank = len(arr.meta.shape)
    for pos, off, n, code in zip(positions.tolist(), offsets.tolist(), lengths.tolist(),
                                 codes.tolist(), strict=True):  # fmt: skip
        where = f' chunkPositionInArray="[{",".join(map(str, pos))}]"' if rank else ""
        yield f'<dmrpp:chunk offset="{off}" nBytes="{n}"{where}{hrefs[code]}/>'


def _only_fill_inline(arr: ArrayRefs) -> bool:
    """Every chunk held in the references is a never-written chunk the indexer stored full of
    the fill value (so Zarr readers read it as HDF5 does): a DMR++ leaves such chunks out, and
    its readers give them ``fillValue``."""
    import numcodecs

    m, meta = arr.manifest, arr.meta
    if not isinstance(meta.dtype, str) or meta.fill_value is None or not m.n_stored:
        return False
    dt = np.dtype(meta.dtype)
    try:
        fill = np.array(meta.fill_value, dtype=dt)
    except (TypeError, ValueError):
        return False
    pipeline = [*meta.filters, *([meta.compressor] if meta.compressor else [])]
    for data in {bytes(d) for d in m.inline.values()}:  # materialised chunks share their bytes
        buf: Any = data
        for config in reversed(pipeline):
            buf = numcodecs.get_codec(dict(config)).decode(buf)
        values = np.frombuffer(bytes(np.asarray(buf).tobytes()), dtype=dt)
        if values.size != int(np.prod(meta.chunks)) or not np.array_equal(
            values, np.broadcast_to(fill, values.shape), equal_nan=dt.kind == "f"
        ):
            return False
    return True


def _compact_bytes(arr: ArrayRefs, chunk: bytes) -> bytes:
    """The variable's values as ``dmrpp:compact`` holds them: the elements in C order (only the
    variable's own, not the chunk's padding) and multi-byte numbers little-endian, whatever the
    granule's byte order.

    That is what build_dmrpp writes and Hyrax reads (OPeNDAP BES, ``modules/dmrpp_module``):
    ``build_dmrpp_util.cc`` ``process_compact_layout_array`` / ``_scalar`` read the dataset with
    ``get_data`` (``hdf5_handler/h5common.cc``: ``H5Dread`` into ``H5Tget_native_type``, the
    host's order) and ``DmrppArray.cc`` ``compact_data_xml_element`` base64-encodes that buffer,
    with no ``byteOrder``; ``DMZ.cc`` ``DMZ::process_compact`` copies the decoded bytes into the
    variable and marks it read, so ``DmrppArray::read`` returns before its ``twiddle_bytes`` swap
    (and ``DMZ::process_variable`` rejects a ``dmrpp:chunks`` beside it when chunks are required).
    The order is the host's on both sides; the hosts build_dmrpp and Hyrax run on are
    little-endian.
    """
    dt = np.dtype(str(arr.meta.dtype))
    chunk_shape = tuple(arr.meta.chunks)
    if len(chunk) != int(np.prod(chunk_shape, dtype=np.int64)) * dt.itemsize:
        raise _LeftOut(f"values held in the references in {len(chunk)} bytes, not a chunk of "
                       f"{list(chunk_shape)} {dt}")  # fmt: skip
    values = np.frombuffer(chunk, dtype=dt).reshape(chunk_shape)
    values = values[tuple(slice(0, n) for n in arr.meta.shape)]
    return np.ascontiguousarray(values, dtype=dt.newbyteorder("<")).tobytes()


def _fill(arr: ArrayRefs) -> str:
    fv = arr.meta.fill_value
    if fv is None or isinstance(fv, list | dict):
        return ""
    return f" fillValue={quoteattr(str(fv))}"


def _variable(arr: ArrayRefs, dims: list[str], attrs: list[str], source_url: str) -> str:
    dap, order = _dap_type(arr.meta.dtype)
    name = arr.path.rpartition("/")[2]
    if _NOT_XML.search(name):
        raise _LeftOut("characters XML 1.0 cannot hold in its name")
    body = "".join(dims) + "".join(attrs)
    if dap == "String":  # null-padded as NumPy's bytes: the raw bytes are the values either way
        length = np.dtype(str(arr.meta.dtype)).itemsize
        body += f'<dmrpp:FixedLengthStringArray string_length="{length}" pad="null_pad"/>'
    m = arr.manifest
    if m.n_inline and not _only_fill_inline(arr):
        if m.n_chunks != 1 or arr.meta.filters or arr.meta.compressor:
            raise _LeftOut("values held in the references in pieces or filtered (DMR++ holds "
                           "a variable's values only whole and unfiltered: dmrpp:compact)")  # fmt: skip
        data = _compact_bytes(arr, next(iter(m.inline.values())))
        return (f"<{dap} name={quoteattr(name)}>{body}<dmrpp:compact>"
                f"{base64.b64encode(data).decode()}</dmrpp:compact></{dap}>")  # fmt: skip
    compression = _filters(arr)
    byte_order = f' byteOrder="{order}"' if order else ""
    sizes = ""
    if arr.meta.shape:
        sizes = ("<dmrpp:chunkDimensionSizes>" + " ".join(map(str, arr.meta.chunks))
                 + "</dmrpp:chunkDimensionSizes>")  # fmt: skip
    rows = "".join(_chunk_rows(arr, source_url))
    return (f"<{dap} name={quoteattr(name)}>{body}<dmrpp:chunks{compression}{_fill(arr)}"
            f"{byte_order}>{sizes}{rows}</dmrpp:chunks></{dap}>")  # fmt: skip


class _Dims:
    """Shared dimensions: each named axis declared in the group of the first variable using it
    (or found in an ancestor with the same size); names of another size there stay anonymous."""

    def __init__(self) -> None:
        self.declared: dict[str, dict[str, int]] = {}

    def dims(self, arr: ArrayRefs) -> list[str]:
        group = arr.path.rpartition("/")[0]
        out = []
        names = arr.meta.dimension_names or ("",) * len(arr.meta.shape)
        for name, size in zip(names, arr.meta.shape, strict=True):
            named = bool(name) and not _PHONY.fullmatch(name) and not _NOT_XML.search(name)
            home = self._home(group, name, size) if named else None
            if home is None:
                out.append(f'<Dim size="{size}"/>')
            else:
                out.append(f"<Dim name={quoteattr(posixpath.join('/', home, name))}/>")
        return out

    def _home(self, group: str, name: str, size: int) -> str | None:
        g: str | None = group
        while g is not None:
            if name in self.declared.get(g, {}):
                return g if self.declared[g][name] == size else None
            g = g.rpartition("/")[0] if g else None
        self.declared.setdefault(group, {})[name] = size
        return group


def dmrpp_document(refs: GranuleRefs, name: str | None = None) -> tuple[str, tuple[Skipped, ...]]:
    """The DMR++ document of ``refs``, and what it leaves out (variables and attributes).

    Parameters
    ----------
    refs : GranuleRefs
        References of one granule (``refs.source.url`` becomes ``dmrpp:href``).
    name : str, optional
        The ``Dataset`` name; default the granule's file name.
    """
    from h5sidecar._version import __version__

    left_out: list[Skipped] = [*refs.skipped]
    types: Mapping[str, Mapping[str, str]] = refs.extra.get("attribute_dtypes", {})
    dims = _Dims()
    variables: dict[str, list[str]] = {g: [] for g in refs.groups}
    for path, arr in refs.arrays.items():
        group = path.rpartition("/")[0]
        try:
            attrs = _attributes(arr.meta.attrs, types.get(path, {}), path, left_out)
            variables[group].append(_variable(arr, dims.dims(arr), attrs, refs.source.url))
        except _LeftOut as why:
            left_out.append(Skipped(path, ErrorKind.OTHER, f"not written to the DMR++: {why}"))

    def group_xml(path: str) -> str:
        # dimensions first (DAP4 order), then attributes, variables and sub-groups
        dim_xml = "".join(f"<Dimension name={quoteattr(n)} size=\"{s}\"/>"
                          for n, s in dims.declared.get(path, {}).items())  # fmt: skip
        attrs = "".join(_attributes(refs.groups[path], types.get(path, {}), path, left_out))
        subs = [g for g in refs.groups if g and g.rpartition("/")[0] == path and g != path]
        inner = (
            dim_xml
            + attrs
            + "".join(variables[path])
            + "".join(
                f"<Group name={quoteattr(g.rpartition('/')[2])}>{group_xml(g)}</Group>"
                for g in subs
            )
        )
        return inner

    title = name or refs.source.url.rstrip("/").rpartition("/")[2]
    root = group_xml("")
    head = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<Dataset xmlns="{DAP4_NS}" xmlns:dmrpp="{DMRPP_NS}" dapVersion="4.0" '
        f'dmrVersion="1.0" name={quoteattr(title)} dmrpp:href={quoteattr(refs.source.url)} '
        f"dmrpp:version={quoteattr(f'h5sidecar {__version__}')}>"
    )
    return f"{head}{root}</Dataset>\n", tuple(left_out)


def write_dmrpp(
    refs: GranuleRefs, path: str, *, storage_options: Mapping[str, Any] | None = None
) -> tuple[Skipped, ...]:
    """Write the DMR++ document of ``refs`` to ``path`` (local or any fsspec URL).

    Returns
    -------
    tuple of Skipped
        What the document leaves out, with why (the references' own skipped variables too).
    """
    from fsspec.implementations.local import LocalFileSystem

    from h5sidecar.references._atomic_local import write_local_file
    from h5sidecar.references._sidecar_files import sidecar_fs

    text, left_out = dmrpp_document(refs)
    data = text.encode("utf-8")
    fs, root = sidecar_fs(path, dict(storage_options or {}))
    if isinstance(fs, LocalFileSystem):  # as the JSON sidecar: whole or not at all
        write_local_file(Path(root), [data])
    else:
        fs.pipe_file(root, data)
    return left_out
