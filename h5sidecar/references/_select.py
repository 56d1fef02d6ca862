"""Opening a sidecar for a few named arrays: only their metadata is decoded and validated.

A task that reads three variables of six beam groups of an ATL03 granule needs 18 of its ~935
arrays.  Decoding and validating every array's ``.zarray``/``.zattrs`` (two JSON documents
and an :class:`~h5sidecar.references.ArrayMeta` each, ~15 us an array) and building an array
record for each cost more than everything else of opening a JSON sidecar once the file is
parsed.  ``read_refs(..., arrays=PATTERNS)`` builds a :class:`GranuleRefs` holding only the
arrays whose paths match: the other arrays' documents stay undecoded strings, their chunk
references untouched.

What is still checked for the whole sidecar: that it is JSON, the extras block (source
identity, URL table; the other arrays' entries only for their names), every group document,
that every chunk reference and every extras entry belongs to an array with a ``.zarray``, and
that no array is also a group.  The selected arrays are validated as a full open validates them
(their chunk references when each manifest is first built, as for a lazily opened sidecar).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable, Iterable
from typing import Any

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._assemble import build_metas
from h5sidecar.references._extras import parse_extras, select_extras
from h5sidecar.references._extras_versions import EXTRAS_KEY
from h5sidecar.references._model import GranuleRefs
from h5sidecar.references._zmeta import split_metadata
from h5sidecar.references.json_sidecar._json_lazy import decode_json_lazy, lazy_from_kerchunk
from h5sidecar.references.json_sidecar._kerchunk_json import (
    _META_SUFFIXES,
    _document,
    _refs_of,
    decode_json,
    gc_paused,
    load_json,
)

__all__ = ["ArrayMatcher", "array_matcher", "decode_json_selected", "decode_json_sidecar",
           "select_arrays"]

#: ``match(path) -> bool``: is the array at ``path`` one the caller named?
ArrayMatcher = Callable[[str], bool]


def array_matcher(arrays: str | Iterable[str]) -> ArrayMatcher:
    """A matcher for array paths from shell-style patterns (``fnmatch``: ``*`` also matches
    ``/``), e.g. ``"*/heights/h_ph"`` or ``"gt1l/*"``; a plain path matches itself.

    Raises
    ------
    ValueError
        When no pattern is given (an empty selection would open nothing).
    """
    patterns = [arrays] if isinstance(arrays, str) else [str(a) for a in arrays]
    if not patterns:
        raise ValueError("arrays= needs at least one array path or pattern")
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match  # type: ignore[return-value]


def select_arrays(refs: GranuleRefs, match: ArrayMatcher) -> GranuleRefs:
    """``refs`` with only the arrays whose paths ``match`` (groups, extras unchanged)."""
    return dataclasses.replace(refs, arrays={p: a for p, a in refs.arrays.items() if match(p)})


def decode_json_sidecar(data: bytes, *, lazy: bool, match: ArrayMatcher | None) -> GranuleRefs:
    """A JSON sidecar's text as :func:`~h5sidecar.references.read_refs` reads it: lazily or not,
    all arrays or those ``match`` accepts; the garbage collector is paused meanwhile (the
    parsed document is gone when it resumes, see
    :func:`~h5sidecar.references.json_sidecar._kerchunk_json.gc_paused`).
    """
    with gc_paused():
        if match is None:
            return decode_json_lazy(data) if lazy else decode_json(data)
        refs = decode_json_selected(load_json(data), match) if lazy else None
        if refs is None:
            refs = select_arrays(decode_json_lazy(data) if lazy else decode_json(data), match)
        return refs


def decode_json_selected(obj: Any, match: ArrayMatcher) -> GranuleRefs | None:
    """:class:`GranuleRefs` of the arrays of a parsed JSON sidecar whose paths ``match``, with
    only their metadata decoded and their manifests built on first use; ``None`` when the
    sidecar is not one this path covers (no h5sidecar extras, extras and metadata not naming
    the same arrays): the caller then reads it whole and selects.

    Raises
    ------
    InvalidReferenceError
        What the full parse would raise for the checks listed in the module docstring, and
        for anything malformed in the selected arrays' metadata.
    """
    refs = _refs_of(obj)
    if EXTRAS_KEY not in obj:
        return None
    templates = obj.get("templates") or {}
    if not isinstance(templates, dict):
        raise InvalidReferenceError("'templates' must be an object of name -> URL")
    zarrays: dict[str, Any] = {}
    zattrs: dict[str, Any] = {}
    other: dict[str, Any] = {}
    entries: dict[str, tuple[list[str], list[Any]]] = {}
    for key, value in refs.items():
        if not isinstance(key, str):
            raise InvalidReferenceError(f"reference key {key!r} is not a string")
        if key.endswith(_META_SUFFIXES):
            parent, _, name = key.rpartition("/")
            if name == ".zarray":
                zarrays[parent] = value
            elif name == ".zattrs":
                zattrs[parent] = value
            elif name != ".zmetadata":  # derived: the individual documents are what count
                other[key] = value  # .zgroup, and names split_metadata refuses
        else:
            parent, _, name = key.rpartition("/")
            hit = entries.get(parent)
            if hit is None:
                hit = entries[parent] = ([], [])
            hit[0].append(name)
            hit[1].append(value)
    chosen = {p for p in zarrays if match(p)}
    block = select_extras(obj[EXTRAS_KEY], set(zarrays), chosen)
    if block is None:
        return None
    stray = entries.keys() - zarrays.keys()
    if stray:
        path = min(stray)
        raise InvalidReferenceError(
            f"reference {path + '/' if path else ''}{entries[path][0][0]!r} belongs to no "
            "array (no .zarray); re-create the sidecar"
        )
    meta = {k: _document(k, v) for k, v in other.items()}
    for parent, value in zattrs.items():
        if parent not in zarrays:  # a group's attributes (split_metadata checks the group)
            key = f"{parent}/.zattrs" if parent else ".zattrs"
            meta[key] = _document(key, value)
    for path in chosen:
        meta[f"{path}/.zarray"] = _document(f"{path}/.zarray", zarrays[path])
        if path in zattrs:
            meta[f"{path}/.zattrs"] = _document(f"{path}/.zattrs", zattrs[path])
    nodes = split_metadata(meta)
    clash = nodes.groups.keys() & zarrays.keys()
    if clash:
        raise InvalidReferenceError(f"{min(clash)!r} is both a group and an array")
    extras = parse_extras(block)
    metas = build_metas(nodes, extras)
    picked = {p: entries[p] for p in chosen if p in entries}
    return lazy_from_kerchunk(nodes, metas, picked, extras, templates)
