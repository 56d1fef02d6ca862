"""DMR++ XML -> :class:`~._document.DmrppDocument` (the document as written, nothing resolved).

Parsed with the standard library's ``xml.etree.ElementTree``.  A DMR++ is untrusted input: a
document declaring a DTD or entities is refused before parsing, so no entity (external or
recursive) is ever expanded.  Element names are matched without their namespace: build_dmrpp
has written the DAP4 and ``dmrpp`` namespaces under several URIs over the years, and older
documents misspell attributes (``byteOrde``, ``deflate_level``), which are read too.
"""

from __future__ import annotations

import base64
import binascii
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable

import numpy as np

from h5sidecar.errors import InvalidDmrppError
from h5sidecar.indexer.dmrpp._dmrpp_document import (
    DmrAttribute,
    DmrChunks,
    DmrDim,
    DmrGroup,
    DmrppDocument,
    DmrVariable,
)

__all__ = ["VARIABLE_TYPES", "parse_dmrpp"]

#: DAP4 variable elements (``Enum`` and the constructors included).
VARIABLE_TYPES = frozenset(
    {
        "Char", "Byte", "Int8", "UInt8", "Int16", "UInt16", "Int32", "UInt32", "Int64",
        "UInt64", "Float32", "Float64", "String", "URL", "Opaque", "Enum", "Structure",
        "Sequence",
    }
)  # fmt: skip

#: A DTD can declare entities (billion laughs, external files): documents never need one.
_DTD = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)


def _local(tag: str) -> str:
    """``{namespace}name`` -> ``name``."""
    return tag.rpartition("}")[2]


def _attr(el: ET.Element, *names: str) -> str | None:
    """The first of ``names`` the element has, matched without namespace."""
    by_local = {_local(k): v for k, v in el.attrib.items()}
    for name in names:
        if name in by_local:
            return by_local[name]
    return None


def _int(text: str | None, what: str, where: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise InvalidDmrppError(f"{where}: {what} {text!r} is not an integer") from None


def parse_dmrpp(data: bytes | str, *, url: str = "the DMR++") -> DmrppDocument:
    """Parse a DMR++ document.

    Parameters
    ----------
    data : bytes or str
        The document.
    url : str
        Where it was read from (for messages).

    Returns
    -------
    DmrppDocument

    Raises
    ------
    InvalidDmrppError
        Not XML, a DTD, not a DAP4 ``Dataset``, or numbers that do not parse.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if _DTD.search(raw):
        raise InvalidDmrppError(f"{url}: the document declares a DTD or entities; a DMR++ has none")
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        raise InvalidDmrppError(f"{url} is not XML ({exc}); is it a DMR++ document?") from None
    if _local(root.tag) != "Dataset":
        raise InvalidDmrppError(
            f"{url}: the root element is <{_local(root.tag)}>, not a DAP4 <Dataset>; is it a "
            "DMR++ document?"
        )
    group = _group(root, "", "", url)
    return DmrppDocument(
        name=root.get("name", ""),
        href=_attr(root, "href") or "",
        version=_attr(root, "version") or "",
        root=group,
    )


def _group(el: ET.Element, name: str, path: str, url: str) -> DmrGroup:
    dims: dict[str, int] = {}
    attrs: list[DmrAttribute] = []
    variables: list[DmrVariable] = []
    groups: list[DmrGroup] = []
    enums: dict[str, tuple[str, dict[str, int]]] = {}
    for child in el:
        tag = _local(child.tag)
        child_name = child.get("name", "")
        where = f"{url}: /{path}/{child_name}".replace("//", "/")
        if tag == "Dimension":
            dims[child_name] = _int(child.get("size"), "Dimension size", where)
        elif tag == "Attribute":
            attrs.append(_attribute(child))
        elif tag == "Group":
            sub = f"{path}/{child_name}" if path else child_name
            groups.append(_group(child, child_name, sub, url))
        elif tag == "Enumeration":
            consts = {
                c.get("name", ""): _int(c.get("value"), "EnumConst value", where)
                for c in child
                if _local(c.tag) == "EnumConst"
            }
            enums[f"/{path}/{child_name}".replace("//", "/")] = (
                child.get("basetype", ""),
                consts,
            )
        elif tag in VARIABLE_TYPES:
            variables.append(_variable(child, tag, path, url))
    return DmrGroup(name, path, dims, tuple(attrs), tuple(variables), tuple(groups), enums)


def _attribute(el: ET.Element) -> DmrAttribute:
    values = tuple((v.text or "") for v in el if _local(v.tag) == "Value")
    members = tuple(_attribute(a) for a in el if _local(a.tag) == "Attribute")
    return DmrAttribute(el.get("name", ""), el.get("type", ""), values, members)


def _variable(el: ET.Element, tag: str, group: str, url: str) -> DmrVariable:
    name = el.get("name", "")
    path = f"{group}/{name}" if group else name
    where = f"{url}: variable /{path}"
    dims: list[DmrDim] = []
    attrs: list[DmrAttribute] = []
    chunks: DmrChunks | None = None
    compact: bytes | None = None
    string_length: int | None = None
    missing = False
    members: list[DmrVariable] = []
    for child in el:
        ctag = _local(child.tag)
        if ctag in VARIABLE_TYPES and tag in ("Structure", "Sequence"):
            members.append(_variable(child, ctag, path, url))
        elif ctag == "Dim":
            dims.append(_dim(child, group, where))
        elif ctag == "Attribute":
            attrs.append(_attribute(child))
        elif ctag == "chunks":
            chunks = _chunks(child, where)
        elif ctag == "compact":
            compact = _base64(child.text, where)
        elif ctag == "FixedLengthStringArray":
            string_length = _int(_attr(child, "string_length"), "string_length", where)
        elif ctag == "missingdata":
            missing = True
    if chunks is None and any(_local(c.tag) == "chunk" for c in el):
        chunks = _chunks(el, where)  # the first DMR++ documents had no dmrpp:chunks around them
    return DmrVariable(
        name, path, tag, tuple(dims), tuple(attrs), chunks, compact, el.get("enum"),
        string_length, missing, tuple(members),
    )  # fmt: skip


def _dim(el: ET.Element, group: str, where: str) -> DmrDim:
    name = el.get("name")
    size = el.get("size")
    if name is None:
        return DmrDim(None, _int(size, "Dim size", where))
    if not name.startswith("/"):  # a name relative to the variable's group
        name = f"/{group}/{name}".replace("//", "/")
    return DmrDim(name, -1 if size is None else _int(size, "Dim size", where))


def _base64(text: str | None, where: str) -> bytes:
    try:
        return base64.b64decode("".join((text or "").split()), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidDmrppError(f"{where}: dmrpp:compact is not base64") from None


def _chunks(el: ET.Element, where: str) -> DmrChunks:
    levels = _attr(el, "deflateLevel", "deflate_level")
    shape_el = next((c for c in el if _local(c.tag) == "chunkDimensionSizes"), None)
    chunk_shape = None
    if shape_el is not None:
        chunk_shape = tuple(_int(t, "chunk size", where) for t in (shape_el.text or "").split())
    rows = [c for c in el if _local(c.tag) == "chunk"]
    rank = len(chunk_shape) if chunk_shape is not None else 0
    positions = np.full((len(rows), rank), -1, np.int64)
    offsets = np.zeros(len(rows), np.uint64)
    lengths = np.zeros(len(rows), np.uint64)
    hrefs = np.full(len(rows), -1, np.int32)
    urls: dict[str, int] = {}
    blocks: dict[int, tuple[tuple[int, int], ...]] = {}
    for i, row in enumerate(rows):
        pos = _attr(row, "chunkPositionInArray")
        if pos is not None and rank:
            values = [_int(t, "chunkPositionInArray", where) for t in _tokens(pos)]
            if len(values) != rank:
                raise InvalidDmrppError(
                    f"{where}: chunk position {pos} has {len(values)} coordinates for "
                    f"chunks of rank {rank}; the chunk grid does not cover the shape"
                )
            positions[i] = values
        parts = [b for b in row if _local(b.tag) == "block"]
        if parts:
            spans = tuple(
                (_int(_attr(b, "offset"), "block offset", where),
                 _int(_attr(b, "nBytes"), "block nBytes", where))
                for b in parts
            )  # fmt: skip
            blocks[i] = spans
            offsets[i], lengths[i] = spans[0][0], sum(n for _, n in spans)
        else:
            offsets[i] = _int(_attr(row, "offset"), "chunk offset", where)
            lengths[i] = _int(_attr(row, "nBytes"), "chunk nBytes", where)
        href = _attr(row, "href")
        if href is not None:
            hrefs[i] = urls.setdefault(href, len(urls))
    return DmrChunks(
        filters=tuple((_attr(el, "compressionType") or "").split()),
        deflate_levels=tuple(_int(t, "deflate level", where) for t in (levels or "").split()),
        fill_value=_attr(el, "fillValue"),
        byte_order=_attr(el, "byteOrder", "byteOrde"),
        chunk_shape=chunk_shape,
        positions=positions,
        offsets=offsets,
        lengths=lengths,
        hrefs=hrefs,
        urls=tuple(urls),
        blocks=blocks,
        struct_offsets=tuple(
            _int(t, "structOffset", where) for t in (_attr(el, "structOffset") or "").split()
        ),
    )


def _tokens(text: str) -> Iterable[str]:
    """``"[0,25,50]"`` -> ``["0", "25", "50"]``."""
    return [t for t in re.split(r"[\s,\[\]]+", text) if t]
