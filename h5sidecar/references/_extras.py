"""Our extras: what a kerchunk sidecar cannot say, kept where plain readers ignore it.

The extras block is a JSON object stored under the top-level key ``"h5sidecar"`` (beside
``version``/``refs`` in kerchunk JSON; beside ``metadata``/``record_size`` in a Parquet
directory's ``.zmetadata``).  fsspec, kerchunk and zarr read neither place.  It holds::

    {"version": 1,
     "source": {"url", "size", "etag", "mtime", "mtime_ns"},  # identity for the freshness guard
     "urls": ["s3://bucket/granule.h5", ...],              # URL table, indexed below
     "arrays": {path: {"status": "virtual"|"inlined",
                       "note": str,
                       "urls": [int, ...],                 # the manifest's URLs, in order
                       "fill_value": ...,                  # only when .zarray's differs
                       "checksums": "base64:..." | "file"}},
     "skipped": [{"path", "kind", "reason"}, ...],
     "extra": {...},                                        # provenance
     "members": [{"url", "size", ...}, ...]}                # combined references only

Combined references (a datacube: ``members`` listed) write version 2, their growing parts
packed (see :mod:`h5sidecar.references._extras_versions`).  Single granules keep
version 1.  Both versions are read; a version-1 cube (written before packing) reads as before.  A Parquet
cube keeps its members out of the packed object, in a Parquet file read when first needed
(``"members_file"``; an array whose URLs are the members' in order says ``"urls": "members"``;
see :mod:`h5sidecar.references.parquet_sidecar._members_file`).

Checksums are uint64 little-endian, base64-encoded in JSON sidecars; Parquet sidecars keep them
in a side file (``"file"``, see :mod:`h5sidecar.references.parquet_sidecar._kerchunk_parquet`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

import numpy as np
import pyarrow as pa

from h5sidecar.errors import ErrorKind, InvalidReferenceError
from h5sidecar.references._extras_versions import (
    EXTRAS_KEY,
    EXTRAS_VERSION,
    MEMBERS_SLICE,
    OVER_VERSION,
    PACKED_VERSIONS,
    pack,
    unpack,
)
from h5sidecar.references._model import GranuleRefs, SkipKind, Skipped, SourceInfo
from h5sidecar.references._zmeta import KEEP
from h5sidecar.references.datacube._member_table import MemberTable
from h5sidecar.references.datacube._url_column import UrlColumn
from h5sidecar.references.parquet_sidecar._members_file import (
    MEMBERS_KEY,
    lazy_members,
    members_entry,
)

__all__ = ["EXTRAS_KEY", "ArrayExtras", "Extras", "build_extras", "parse_extras", "select_extras"]

_SKIP_KINDS = frozenset(get_args(SkipKind))


@dataclass(frozen=True, slots=True)
class ArrayExtras:
    """Per-array extras, parsed."""

    status: Literal["virtual", "inlined"] = "virtual"
    note: str = ""
    urls: tuple[str, ...] | None = None
    fill_value: Any = KEEP
    checksums: str | None = None  # "file" or "base64:..." (decoded once the grid is known)
    #: its URLs are the members' URLs, in order (``urls`` is None): a members file's cube
    from_members: bool = False


@dataclass(frozen=True, slots=True)
class Extras:
    """The extras block, parsed."""

    source: SourceInfo
    arrays: dict[str, ArrayExtras] = field(default_factory=dict)
    skipped: tuple[Skipped, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    members: tuple[SourceInfo, ...] | MemberTable = ()

    def member_urls(self) -> Sequence[str]:
        """The members' URLs in order (what ``"urls": "members"`` stands for): of a members
        table, a :class:`~h5sidecar.references.datacube._url_column.UrlColumn` over its URL
        column (no Python string a member: ~136 MB at a million, held by every manifest of
        the cube's arrays)."""
        if isinstance(self.members, MemberTable):
            return UrlColumn(self.members.checked_urls(), distinct=True)
        return tuple(m.url for m in self.members)


def url_table(refs: GranuleRefs, skip: Callable[[str], bool] = lambda _: False) -> list[str]:
    """Every URL any manifest uses (but the arrays ``skip`` names), first appearance first
    (the source's URL leads)."""
    table: dict[str, None] = {refs.source.url: None}
    for path, arr in refs.arrays.items():
        if not skip(path):
            table.update(dict.fromkeys(arr.manifest.urls))
    return list(table)


class _MembersUrls:
    """Whether a URL tuple is the members' URLs in order, compared :data:`MEMBERS_SLICE`
    at a time (the members' URLs as one tuple were a new string a member: ~100 MB at a
    million), once per tuple object (a cube's arrays share one)."""

    def __init__(self, members: Sequence[SourceInfo] | MemberTable) -> None:
        self.members = members
        # by id, the tuple kept with its answer (its id is not reused by another meanwhile)
        self.seen: dict[int, tuple[Sequence[str], bool]] = {}

    def __call__(self, urls: Sequence[str]) -> bool:
        if not urls or len(urls) != len(self.members):
            return False
        if isinstance(urls, UrlColumn) and isinstance(self.members, MemberTable):
            # a built cube's URL column: compared in Arrow (often the members' column itself)
            return self.members.urls.equals(pa.chunked_array([urls.arrow]))
        if id(urls) not in self.seen:
            self.seen[id(urls)] = (urls, all(
                list(urls[i:i + MEMBERS_SLICE]) == self._slice(i)
                for i in range(0, len(urls), MEMBERS_SLICE)))
        return self.seen[id(urls)][1]

    def _slice(self, start: int) -> list[str]:
        if isinstance(self.members, MemberTable):
            return self.members.urls.slice(start, MEMBERS_SLICE).to_pylist()
        return [m.url for m in self.members[start:start + MEMBERS_SLICE]]


def build_extras(refs: GranuleRefs, *, checksums: Literal["inline", "file"],
                 members_file: bool = False) -> dict[str, Any]:
    """The JSON-ready extras block of ``refs`` (see module docstring).

    ``members_file``: a cube's members are written apart (the caller writes the file and
    adds its entry): neither they nor the URLs of arrays that are the members' are packed.
    """
    packed = bool(refs.members)
    by_members: set[str] = set()
    if members_file and packed:
        same = _MembersUrls(refs.members)
        by_members = {p for p, a in refs.arrays.items() if same(a.manifest.urls)}
    urls = url_table(refs, by_members.__contains__)
    index = {u: i for i, u in enumerate(urls)}
    arrays: dict[str, Any] = {}
    for path, arr in refs.arrays.items():
        used = () if path in by_members else arr.manifest.urls
        entry: dict[str, Any] = {
            "status": arr.status,
            "note": arr.note,
            # a cube's arrays each name every member: an array, not a million int objects
            "urls": "members" if path in by_members else
            np.fromiter((index[u] for u in used), np.int64, count=len(used))
            if packed else [index[u] for u in used],
        }
        persisted = arr.zarray_fill_value()
        if not _same_json(persisted, arr.meta.fill_value):
            entry["fill_value"] = arr.meta.fill_value
        if arr.checksums is not None:
            entry["checksums"] = "file" if checksums == "file" else encode_checksums(arr.checksums)
        arrays[path] = entry
    out = {
        "version": EXTRAS_VERSION,
        "source": refs.source.to_dict(),
        "urls": urls,
        "arrays": arrays,
        "skipped": [s.to_dict() for s in refs.skipped],
        "extra": dict(refs.extra),
    }
    if refs.members:  # only combined references (datacubes) have members
        return pack(out, () if members_file else refs.members)
    return out


def _same_json(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def encode_checksums(values: np.ndarray) -> str:
    """``"base64:"`` + the little-endian uint64 bytes of a checksum grid (C order)."""
    raw = np.ascontiguousarray(values, dtype="<u8").tobytes()
    return "base64:" + base64.b64encode(raw).decode("ascii")


def decode_checksums(text: Any, grid_shape: tuple[int, ...], path: str) -> np.ndarray:
    """Inverse of :func:`encode_checksums`, validating the length against the chunk grid."""
    if not isinstance(text, str) or not text.startswith("base64:"):
        raise InvalidReferenceError(f"{path}: checksums must be a 'base64:' string")
    try:
        raw = base64.b64decode(text[7:], validate=True)
    except ValueError as exc:
        raise InvalidReferenceError(f"{path}: checksums are not valid base64 ({exc})") from exc
    n = int(np.prod(grid_shape, dtype=np.int64))
    if len(raw) != 8 * n:
        raise InvalidReferenceError(
            f"{path}: {len(raw) // 8} checksums for a chunk grid of {n}; re-create the sidecar"
        )
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(grid_shape)


def parse_extras(
    block: Any, fetch: Callable[[list[str]], Mapping[str, bytes | None]] | None = None
) -> Extras:
    """Validate and parse an extras block (``InvalidReferenceError`` on any inconsistency).

    ``fetch`` reads a Parquet cube's files (its members file, when first needed).
    """
    if not isinstance(block, dict):
        raise InvalidReferenceError(f"the {EXTRAS_KEY!r} block must be a JSON object")
    entry = members_entry(block)
    if entry is not None and fetch is None:
        raise InvalidReferenceError(
            f"the extras name a members file ({MEMBERS_KEY}), which only a Parquet cube has")
    if block.get("version") in PACKED_VERSIONS:
        block = unpack(block)
    if block.get("version") != EXTRAS_VERSION:
        raise InvalidReferenceError(
            f"{EXTRAS_KEY} extras version {block.get('version')!r} is not supported "
            f"(this h5sidecar reads versions {EXTRAS_VERSION} to {OVER_VERSION}); upgrade "
            "h5sidecar or re-index"
        )
    source = block.get("source")
    if not isinstance(source, dict):
        raise InvalidReferenceError(f"the {EXTRAS_KEY!r} block lacks the source identity")
    urls = block.get("urls", [])
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise InvalidReferenceError(f"{EXTRAS_KEY}.urls must be a list of strings")
    arrays = block.get("arrays", {})
    skipped = block.get("skipped", [])
    extra = block.get("extra", {})
    members = block.get("members", [])
    if not isinstance(arrays, dict) or not isinstance(extra, dict):
        raise InvalidReferenceError(f"{EXTRAS_KEY}: 'arrays' and 'extra' must be objects")
    if not isinstance(skipped, list) or not isinstance(members, list):
        raise InvalidReferenceError(f"{EXTRAS_KEY}: 'skipped' and 'members' must be lists")
    if not all(isinstance(m, dict) for m in members):
        raise InvalidReferenceError(f"{EXTRAS_KEY}.members must hold source identities")
    if entry is not None and members:
        raise InvalidReferenceError(
            f"{EXTRAS_KEY} lists members both packed and in {MEMBERS_KEY}; build the cube again")
    parsed = {p: _parse_array(p, a, urls) for p, a in arrays.items()}
    if entry is None and any(a.from_members for a in parsed.values()):
        raise InvalidReferenceError(
            f"{EXTRAS_KEY}: an array's URLs are the members' but there is no {MEMBERS_KEY}")
    return Extras(
        source=SourceInfo.from_dict(source),
        arrays=parsed,
        skipped=tuple(_parse_skipped(s) for s in skipped),
        extra=extra,
        members=(lazy_members(entry, fetch) if entry is not None and fetch is not None
                 else tuple(SourceInfo.from_dict(m) for m in members)),
    )


def _parse_array(path: str, entry: Any, urls: list[str]) -> ArrayExtras:
    if not isinstance(entry, dict):
        raise InvalidReferenceError(f"{EXTRAS_KEY}.arrays[{path!r}] must be an object")
    status = entry.get("status", "virtual")
    if status not in ("virtual", "inlined"):
        raise InvalidReferenceError(f"{path}: status {status!r} is not 'virtual' or 'inlined'")
    note = entry.get("note", "")
    codes = entry.get("urls")
    if not isinstance(note, str):
        raise InvalidReferenceError(f"{path}: note must be a string")
    manifest_urls = None
    if codes == "members":
        codes = None
    if codes is not None:
        if not isinstance(codes, list) or not all(
            isinstance(c, int) and 0 <= c < len(urls) for c in codes
        ):
            raise InvalidReferenceError(f"{path}: url indices {codes!r} outside the url table")
        manifest_urls = tuple(urls[c] for c in codes)
    checksums = entry.get("checksums")
    if checksums is not None and not isinstance(checksums, str):
        raise InvalidReferenceError(f"{path}: checksums must be a 'base64:' string or 'file'")
    return ArrayExtras(
        status=status,
        note=note,
        urls=manifest_urls,
        fill_value=entry.get("fill_value", KEEP),
        checksums=checksums,
        from_members=entry.get("urls") == "members",
    )


def _parse_skipped(s: Any) -> Skipped:
    if not isinstance(s, dict) or not all(
        isinstance(s.get(k), str) for k in ("path", "kind", "reason")
    ):
        raise InvalidReferenceError(f"skipped entry {s!r} needs string path, kind and reason")
    if s["kind"] not in _SKIP_KINDS:
        raise InvalidReferenceError(f"skipped entry {s['path']!r}: unknown kind {s['kind']!r}")
    return Skipped(path=s["path"], kind=cast(SkipKind, ErrorKind(s["kind"])), reason=s["reason"])


def select_extras(block: Any, all_arrays: set[str], chosen: set[str]) -> Any:
    """The extras block with only ``chosen`` arrays' entries, or ``None`` when it does not
    describe exactly ``all_arrays`` (the caller then opens the sidecar whole, which reports
    what is wrong or reads a sidecar the fast path does not cover)."""
    if not isinstance(block, dict):
        return None
    entries = block.get("arrays")
    if not isinstance(entries, dict) or entries.keys() != all_arrays:
        return None
    return {**block, "arrays": {p: a for p, a in entries.items() if p in chosen}}
