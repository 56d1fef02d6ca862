"""Appending to a Parquet cube (local or on an object store) by writing only its tail.

A cube whose new members go after the old ones along a dimension that is each concatenated
array's first axis keeps every old chunk's number (C order: the new chunks' numbers follow the
old ones), so kerchunk's record files of the old chunks stay as they are but the last, partial
one of each array.  :func:`write_parquet_tail` writes:

- each concatenated array's records from its last partial one on (that one's old rows read
  back and the new ones after them; the bytes a whole write gives);
- the arrays given whole (the concat coordinate, held inline: one chunk of every value),
  their record files anew;
- the last members file with the first new members, and new members files after it (the
  others are kept: :func:`_appended_members`);
- the tail's manifests rows as a new part of the manifests file (the old parts are kept, the
  trailing small ones merged: :mod:`~h5sidecar.references.parquet_sidecar._manifests_parts`);
- ``.zmetadata`` (the old one with the arrays' new shapes and the new files' entries);

and, for members replaced in place (:class:`Replacement`: a new granule of the same length,
so the same chunk numbers), the record files holding their chunks with those rows swapped,
the members files holding them with their new identities, and their chunks' rows in the new
manifests part, marked as superseding the earlier parts' rows of those chunks;

into a new directory where every other file of the cube is hard-linked, then swapped in
(:func:`~h5sidecar.references._atomic_local.write_local_dir`): a reader sees the old cube or
the new one, and a process killed before the swap leaves the old cube as it was.  On an
object store the files written go between removing ``.zmetadata`` and writing it again, and
the files no longer listed are removed after
(:func:`~h5sidecar.references._sidecar_files.write_remote_dir`, as a whole write).
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ujson
from fsspec.implementations.local import LocalFileSystem

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._atomic_local import OURS, write_local_dir
from h5sidecar.references._extras_versions import (
    EXTRAS_KEY,
    OVER_VERSION,
    PACKED_VERSION,
    pack,
    unpack,
)
from h5sidecar.references._model import GranuleRefs
from h5sidecar.references._sidecar_files import fetch_files, sidecar_fs, write_remote_dir
from h5sidecar.references.datacube._member_table import MemberTable, ranges
from h5sidecar.references.json_sidecar._kerchunk_json import json_default
from h5sidecar.references.parquet_sidecar import _manifests_parts
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import (
    CHECKSUMS_FILE,
    MANIFESTS_KEY,
    ZMETADATA,
    bulk_file,
    decode_zmetadata,
    manifests_parts,
    read_table,
    record_path,
    sidecar_layout,
)
from h5sidecar.references.parquet_sidecar._manifests_file import (
    MANIFESTS_FILE,
    join_parts,
    manifests_table,
)
from h5sidecar.references.parquet_sidecar._manifests_parts import (
    BulkPart,
    encode_rows,
    merge_plan,
    part_entry,
    part_name,
    read_part_rows,
)
from h5sidecar.references.parquet_sidecar._members_file import (
    MEMBERS_KEY,
    encode_member_parts,
    is_member_file,
    member_file,
    member_parts,
    members_entry,
    part_rows,
    parts_entry,
)
from h5sidecar.references.parquet_sidecar._parquet_write import (
    RECORD_FIELDS,
    UrlDicts,
    record_tables,
    smallest_file,
)

__all__ = ["Replacement", "tail_refusal", "write_parquet_tail"]


@dataclass(frozen=True)
class Replacement:
    """A member replaced in place by a granule of the same length along the cube's first
    axis: its row among the members, its new row of the members table (the cube's member
    columns), and its references alone (``refs``: each array's chunks numbered from 0), with
    each concatenated array's first chunk number in the cube (``starts``)."""

    row: int
    member: pa.Table
    refs: GranuleRefs
    starts: Mapping[str, int]


class _Dir:
    """A cube directory's files, local or on an object store (an fsspec URL)."""

    def __init__(self, path: str | os.PathLike[str],
                 storage_options: Mapping[str, Any] | None = None) -> None:
        self.fs, self.root = sidecar_fs(path, dict(storage_options or {}) or None)
        self.local = isinstance(self.fs, LocalFileSystem)
        self._fetched: dict[str, bytes | None] = {}
        self._listed: set[str] | None = None

    def prefetch(self, rels: Collection[str]) -> None:
        """Fetch the files ``rels`` at once (concurrent GETs on an object store: an append
        reads a few files, each a round trip when read in turn), for :meth:`read`."""
        if not self.local:
            wanted = sorted(set(rels) - set(self._fetched))
            self._fetched.update(fetch_files(self.fs, self.root, wanted))

    def read(self, rel: str) -> bytes | None:
        """File ``rel``'s bytes (None: absent)."""
        if self.local:
            target = Path(self.root) / rel
            return target.read_bytes() if target.is_file() else None
        if rel not in self._fetched:
            self._fetched.update(fetch_files(self.fs, self.root, [rel]))
        return self._fetched.pop(rel)

    def files(self) -> list[str]:
        """The cube's files (relative paths)."""
        if self.local:
            return list(_files(Path(self.root)))
        if self._listed is None:
            self._listed = set(self.fs.find(self.root))
        rels = [p[len(self.root) + 1:] for p in self._listed]
        return [r for r in rels if OURS.fullmatch(r)]

    def commit(self, files: Mapping[str, bytes], keep: Collection[str]) -> None:
        """Write ``files`` and keep ``keep`` (every other file goes), atomically: a local
        directory swapped in; on an object store ``.zmetadata`` removed first and written
        last, as a whole write does (a reader sees the old cube, none, or the new one)."""
        if self.local:
            write_local_dir(Path(self.root), files.items(), links=list(keep))
        else:
            write_remote_dir(self.fs, self.root, files.items(), keep=keep,
                             existing=self._listed)


def tail_refusal(path: str | os.PathLike[str], concatenated: Collection[str] = (),
                 storage_options: Mapping[str, Any] | None = None) -> str:
    """Why the cube at ``path`` cannot take a tail append ('' when it can): it must be a
    kerchunk-layout cube (a local directory or on an object store) with a members file, a
    manifests file and no checksums file, whose ``concatenated`` arrays each list the members
    as their URLs (``"urls": "members"``: the new members' URLs then need no entry)."""
    cube = _Dir(path, storage_options)
    cube.prefetch([ZMETADATA, CHECKSUMS_FILE])  # (both at once)
    data = cube.read(ZMETADATA)
    if data is None:
        return "the cube is not a Parquet directory"
    zmeta = decode_zmetadata(data)
    block = zmeta.get(EXTRAS_KEY)
    if sidecar_layout(zmeta) != "kerchunk" or bulk_file(zmeta) is None:
        return "the cube has no manifests file or is not in the kerchunk layout"
    if not isinstance(block, dict) or members_entry(block) is None:
        return "the cube's members are packed in its .zmetadata (a cube written before)"
    if cube.read(CHECKSUMS_FILE) is not None:
        return "the cube holds chunk checksums"
    arrays = unpack(block).get("arrays", {})
    listed = [a for a in concatenated if arrays.get(a, {}).get("urls") != "members"]
    if listed:
        return f"{listed[0]}'s chunk URLs are not the members' (some members lack its chunks)"
    return ""


def write_parquet_tail(
    path: str | os.PathLike[str],
    tail: GranuleRefs,
    *,
    starts: Mapping[str, int],
    lengths: Mapping[str, int],
    members: MemberTable,
    extra: Mapping[str, Any],
    replacements: Sequence[Replacement] = (),
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """Append ``tail`` to the Parquet cube at ``path`` (see the module docstring).

    Parameters
    ----------
    tail
        The arrays written: those in ``starts`` hold the new members' chunks only; any other
        is given whole (its old record files and manifests-file rows are replaced).
    starts
        Array path -> the number of chunks it had (its first new chunk's number).
    lengths
        Array path -> its new length along its first axis (the arrays in ``starts``).
    members
        The new members, with the per-member columns of the cube's (cast to its members
        files' types): its last members file is rewritten with them, and new ones written
        after it when it is full (the other members files are kept).
    extra
        The cube's new ``extra`` block.
    replacements
        Members replaced in place (their chunks, their rows of the members files).
    storage_options
        fsspec options of a cube on an object store.

    Returns
    -------
    list of str
        The files written (relative paths); every other file was kept as it was.
    """
    root = _Dir(path, storage_options)
    zmeta = decode_zmetadata(_must(root, ZMETADATA))
    rs = int(zmeta["record_size"])
    block = unpack(zmeta[EXTRAS_KEY])
    files: dict[str, bytes] = {}
    counts = _chunk_counts(zmeta["metadata"], lengths)
    root.prefetch(_read_by(zmeta, block, starts, replacements, rs))
    url_dicts = UrlDicts()
    for a, arr in tail.arrays.items():
        m = arr.manifest
        start = starts.get(a, 0)
        for record, table in record_tables(m, rs, url_dicts(m.urls), start):
            if record == start // rs and start % rs:
                table = pa.concat_tables(
                    [_old_rows(root, record_path(a, record), start % rs, table.schema), table]
                ).combine_chunks()
            files[record_path(a, record)] = smallest_file(table)
            del table
    for r in replacements:  # their chunks' rows swapped in the record files holding them
        for a, start in r.starts.items():
            m = r.refs.arrays[a].manifest
            for record, table in record_tables(m, rs, url_dicts(m.urls), start):
                rel = record_path(a, record)
                lo = max(record * rs, start) - record * rs
                n = min(rs, counts[a] - record * rs)
                base = _record_rows(root, rel, files.get(rel), n, table.schema)
                table = pa.concat_tables([base.slice(0, lo), table,
                                          base.slice(lo + table.num_rows)]).combine_chunks()
                files[rel] = smallest_file(table)
                del table, base
    del url_dicts
    members_file = _appended_members(root, members_entry(block), members, files,
                                     [(r.row, r.member) for r in replacements])
    member_names = {member_file(k) for k in range(len(member_parts(members_file)))}
    manifests, bulk_names = _appended_manifests(root, zmeta, tail, starts, files,
                                                replacements)
    block["extra"] = dict(extra)
    metadata = zmeta["metadata"]
    new_meta = tail.zmetadata()
    for a in tail.arrays:
        if a in starts:
            metadata[f"{a}/.zarray"]["shape"][0] = int(lengths[a])
        else:
            metadata[f"{a}/.zarray"] = new_meta[f"{a}/.zarray"]
    # the files' entries after the packed block, as a whole write orders them
    packed = pack({k: v for k, v in block.items() if k not in (MEMBERS_KEY, MANIFESTS_KEY)})
    packed[MEMBERS_KEY] = members_file
    packed[MANIFESTS_KEY] = manifests
    over = any(p.get("over") for p in manifests.get("parts", []))
    packed["version"] = OVER_VERSION if over else PACKED_VERSION  # (see _manifests_parts)
    zmeta[EXTRAS_KEY] = packed
    text = ujson.dumps(zmeta, escape_forward_slashes=False, ensure_ascii=False,
                       default=json_default)
    files[ZMETADATA] = text.encode("utf-8")
    whole = {a for a in tail.arrays if a not in starts}
    keep = [rel for rel in root.files() if rel not in files
            and rel.rpartition("/refs.")[0] not in whole  # a whole array's old records go
            and (rel in bulk_names or not is_manifests_file(rel))  # and merged parts
            and (rel in member_names or not is_member_file(rel))]  # and unlisted members
    root.commit(files, keep)
    return list(files)


def _read_by(zmeta: Mapping[str, Any], block: Mapping[str, Any], starts: Mapping[str, int], replacements: Sequence[Replacement],
             rs: int) -> list[str]:
    """The cube's files an append will read: each array's last partial record, the records
    of the replaced members' chunks, the last members file and those holding a replaced
    member, the manifests parts after the first (those a merge may read)."""
    rels = [record_path(a, s // rs) for a, s in starts.items() if s % rs]
    for r in replacements:
        for a, s in r.starts.items():
            n = math.prod(r.refs.arrays[a].meta.grid_shape)
            rels += [record_path(a, k) for k in range(s // rs, (s + n - 1) // rs + 1)]
    entry = members_entry(block)
    if entry is not None:
        parts, size = member_parts(entry), part_rows()
        rels += [member_file(len(parts) - 1), *(member_file(r.row // size) for r in replacements)]
    rels += [p.file for p in (manifests_parts(zmeta) or [])[1:]]
    return rels


def _must(root: _Dir, rel: str) -> bytes:
    data = root.read(rel)
    if data is None:
        raise InvalidReferenceError(f"{root.root}/{rel} is missing: the cube changed during the "
                                    "append; run it again")
    return data


def _appended_members(root: _Dir, entry: Mapping[str, Any] | None, new: MemberTable,
                      files: dict[str, bytes], replaced: Sequence[tuple[int, pa.Table]] = ()
                      ) -> dict[str, Any]:
    """Add the members files of ``new`` after the cube's to ``files``, with the ``replaced``
    members' rows (row, new row) swapped in; their new entry.

    The cube's last members file is read and written again with the first new members when
    it has room (:func:`part_rows` a file), the files before it are kept but those holding a
    replaced member (read and written again), and only the members written are digested.  A
    cube written before members files had parts, with more members than a part in its one
    file (or in parts of another size), is rewritten in parts (once).
    """
    assert entry is not None  # (tail_refusal)
    parts = member_parts(entry)
    last = len(parts) - 1
    size = part_rows()
    # (files of another size than this version writes: rewritten in its parts, once)
    whole = parts[0]["count"] > size or (len(parts) > 1 and parts[0]["count"] != size)
    def read(k: int) -> pq.ParquetFile:
        return pq.ParquetFile(pa.BufferReader(_must(root, member_file(k))))

    if whole:  # every file, read
        old = pa.concat_tables([read(k).read(use_threads=False) for k in range(last + 1)])
        first, kept = 0, []
    elif parts[last]["count"] < size and len(new):  # room in the last: read, written again
        old = read(last).read(use_threads=False)
        first, kept = last, parts[:last]
    else:  # the last file is full: new files after it
        old = read(last).schema_arrow.empty_table()
        first, kept = last + 1, parts
    old = _swapped(old, [(r - first * size, m) for r, m in replaced if r >= first * size])
    rows = pa.concat_tables([old, new.table.select(old.column_names).cast(old.schema)])
    written, added = encode_member_parts(MemberTable(rows), first) if rows.num_rows else ([], [])
    files.update(written)
    for k in sorted({r // size for r, _ in replaced if r < first * size}):  # kept files
        table = _swapped(read(k).read(use_threads=False),
                         [(r - k * size, m) for r, m in replaced if r // size == k])
        written, (kept[k],) = encode_member_parts(MemberTable(table), k)
        files.update(written)
    # files written before their ranges were recorded: read once, one at a time, for them
    # (the lookups of the next appends then read only the files that may hold a member)
    kept = [p if "ranges" in p else {**p, "ranges": ranges(read(k).read(use_threads=False))}
            for k, p in enumerate(kept)]
    return parts_entry(kept + added)


def _swapped(table: pa.Table, rows: Sequence[tuple[int, pa.Table]]) -> pa.Table:
    """``table`` with its rows ``rows`` (row, new row) replaced."""
    if not rows:
        return table
    pieces, at = [], 0
    for r, new in sorted(rows, key=lambda x: x[0]):
        pieces += [table.slice(at, r - at), new.select(table.column_names).cast(table.schema)]
        at = r + 1
    return pa.concat_tables([*pieces, table.slice(at)])


def _chunk_counts(metadata: Mapping[str, Any], lengths: Mapping[str, int]) -> dict[str, int]:
    """Array path -> its chunks (after the append: ``lengths`` along the first axis)."""
    out = {}
    for key, zarray in metadata.items():
        if key.endswith("/.zarray"):
            a = key[: -len("/.zarray")]
            shape = [int(lengths.get(a, zarray["shape"][0])), *zarray["shape"][1:]] if zarray[
                "shape"] else []
            out[a] = math.prod(-(-n // c) for n, c in zip(shape, zarray["chunks"], strict=True))
    return out


def _record_rows(root: _Dir, rel: str, data: bytes | None, n: int, schema: pa.Schema
                 ) -> pa.Table:
    """The rows of the record file ``rel`` (its bytes written by this append when ``data``,
    else the cube's; ``n`` rows all missing when it has none)."""
    if data is None:
        return _old_rows(root, rel, n, schema)
    return _as_record(read_table(rel, data), schema)


def _files(root: Path) -> Iterator[str]:
    for dirpath, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/")
            if OURS.fullmatch(rel):
                yield rel


def _old_rows(root: _Dir, rel: str, n: int, schema: pa.Schema) -> pa.Table:
    """The first ``n`` rows of the record file ``rel`` (all missing when it is absent: a
    record whose chunks were all missing has no file)."""
    data = root.read(rel)
    if data is None:
        return pa.table({"path": pa.nulls(n, pa.string()),
                         "offset": pa.array([0] * n, pa.int64()),
                         "size": pa.array([0] * n, pa.int64()),
                         "raw": pa.nulls(n, pa.binary())}).cast(schema)
    return _as_record(read_table(rel, data).slice(0, n), schema)


def _as_record(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A record file's rows with the columns (and types) of ``schema``."""
    if "raw" not in table.column_names:
        table = table.append_column("raw", pa.nulls(table.num_rows, pa.binary()))
    path = table.column("path")
    if pa.types.is_dictionary(path.type):
        table = table.set_column(0, "path", pc.cast(path, pa.string()))
    return table.select([f.name for f in (schema.field("path"), *RECORD_FIELDS)]).cast(schema)


def _appended_manifests(root: _Dir, zmeta: Mapping[str, Any], tail: GranuleRefs,
                        starts: Mapping[str, int], files: dict[str, bytes],
                        replacements: Sequence[Replacement] = ()
                        ) -> tuple[dict[str, Any], set[str]]:
    """Add the manifests part of ``tail``'s rows to ``files`` (merged with the trailing parts
    :func:`~h5sidecar.references.parquet_sidecar._manifests_parts.merge_plan` names); the new
    ``"manifests"`` entry and its files.

    The old parts are kept as they are (a cube of a million members: its 2 million rows are
    neither read nor written by a day's append); the arrays the tail gives whole (those not
    in ``starts``) are listed by the new part, which supersedes their earlier rows; the
    ``replacements``' chunks are rows of the new part too, which then supersedes the earlier
    parts' rows of the same chunks (``over``).
    """
    parts = manifests_parts(zmeta)
    assert parts is not None  # (tail_refusal)
    if parts[0].rows < 0:  # a plain entry: its rows from the file's footer
        parts = [BulkPart(MANIFESTS_FILE, parts[0].bytes,
                          read_part_rows(_must(root, MANIFESTS_FILE)))]
    new = manifests_table(tail, starts)
    if replacements:
        new = pa.concat_tables([new, *(
            manifests_table(GranuleRefs(r.refs.source, r.refs.groups,
                                        {a: r.refs.arrays[a] for a in r.starts}), r.starts
                            ).cast(new.schema) for r in replacements)])
    over = bool(replacements)
    whole = tuple(a for a in tail.arrays if a not in starts)
    n = merge_plan([*(p.rows for p in parts), new.num_rows]) - 1  # old parts merged
    kept, merged = parts[:len(parts) - n], parts[len(parts) - n:]
    if merged:
        tables = [pq.ParquetFile(pa.BufferReader(_must(root, p.file)),
                                 read_dictionary=["array", "url"]).read(use_threads=False)
                  for p in merged]
        table = join_parts([*tables, new], [*(p.whole for p in merged), whole],
                           [*(p.over for p in merged), over])
        del tables
        whole = tuple(sorted({*whole, *(w for p in merged for w in p.whole)}))
        over = over or any(p.over for p in merged)
    else:
        table = new
    # the first part supersedes nothing; any other is named anew (kept files keep theirs)
    name, whole = (MANIFESTS_FILE, ()) if not kept else (part_name(parts), whole)
    data = encode_rows(table)
    files[name] = data
    out = [*kept, BulkPart(name, len(data), table.num_rows, whole, over and bool(kept))]
    return part_entry(out), {p.file for p in out}


def is_manifests_file(rel: str) -> bool:
    """Whether ``rel`` is a manifests file or part of one."""
    return rel == MANIFESTS_FILE or _manifests_parts.is_part(rel)
