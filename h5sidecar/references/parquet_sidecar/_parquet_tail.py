"""Appending to a local Parquet cube by writing only its tail.

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

into a new directory where every other file of the cube is hard-linked, then swapped in
(:func:`~h5sidecar.references._atomic_local.write_local_dir`): a reader sees the old cube or
the new one, and a process killed before the swap leaves the old cube as it was.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ujson

from h5sidecar.references._atomic_local import OURS, write_local_dir
from h5sidecar.references._extras_versions import EXTRAS_KEY, pack, unpack
from h5sidecar.references._model import GranuleRefs
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

__all__ = ["tail_refusal", "write_parquet_tail"]


def tail_refusal(path: str | os.PathLike[str], concatenated: Collection[str] = ()) -> str:
    """Why the cube at ``path`` cannot take a tail append ('' when it can): it must be a local
    kerchunk-layout cube with a members file, a manifests file and no checksums file, whose
    ``concatenated`` arrays each list the members as their URLs (``"urls": "members"``: the
    new members' URLs then need no entry)."""
    root = Path(path)
    if not (root / ZMETADATA).is_file():
        return "the cube is not a local Parquet directory"
    zmeta = decode_zmetadata((root / ZMETADATA).read_bytes())
    block = zmeta.get(EXTRAS_KEY)
    if sidecar_layout(zmeta) != "kerchunk" or bulk_file(zmeta) is None:
        return "the cube has no manifests file or is not in the kerchunk layout"
    if not isinstance(block, dict) or members_entry(block) is None:
        return "the cube's members are packed in its .zmetadata (a cube written before)"
    if (root / CHECKSUMS_FILE).exists():
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
) -> list[str]:
    """Append ``tail`` to the local Parquet cube at ``path`` (see the module docstring).

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

    Returns
    -------
    list of str
        The files written (relative paths); every other file was kept as it was.
    """
    root = Path(path)
    zmeta = decode_zmetadata((root / ZMETADATA).read_bytes())
    rs = int(zmeta["record_size"])
    block = unpack(zmeta[EXTRAS_KEY])
    files: dict[str, bytes] = {}
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
    del url_dicts
    members_file = _appended_members(root, members_entry(block), members, files)
    member_names = {member_file(k) for k in range(len(member_parts(members_file)))}
    manifests, bulk_names = _appended_manifests(root, zmeta, tail, starts, files)
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
    zmeta[EXTRAS_KEY] = packed
    text = ujson.dumps(zmeta, escape_forward_slashes=False, ensure_ascii=False,
                       default=json_default)
    files[ZMETADATA] = text.encode("utf-8")
    whole = {a for a in tail.arrays if a not in starts}
    keep = [rel for rel in _files(root) if rel not in files
            and rel.rpartition("/refs.")[0] not in whole  # a whole array's old records go
            and (rel in bulk_names or not is_manifests_file(rel))  # and merged parts
            and (rel in member_names or not is_member_file(rel))]  # and unlisted members
    write_local_dir(root, files.items(), links=keep)
    return list(files)


def _appended_members(root: Path, entry: Mapping[str, Any] | None, new: MemberTable,
                      files: dict[str, bytes]) -> dict[str, Any]:
    """Add the members files of ``new`` after the cube's to ``files``; their new entry.

    The cube's last members file is read and written again with the first new members when
    it has room (:func:`part_rows` a file), the files before it are kept, and only the
    members written are digested.  A cube written before members files had parts, with more
    members than a part in its one file (or in parts of another size), is rewritten in parts
    (once).
    """
    assert entry is not None  # (tail_refusal)
    parts = member_parts(entry)
    last = len(parts) - 1
    size = part_rows()
    # (files of another size than this version writes: rewritten in its parts, once)
    whole = parts[0]["count"] > size or (len(parts) > 1 and parts[0]["count"] != size)
    def read(k: int) -> pq.ParquetFile:
        return pq.ParquetFile(pa.BufferReader((root / member_file(k)).read_bytes()))

    if whole:  # every file, read
        old = pa.concat_tables([read(k).read(use_threads=False) for k in range(last + 1)])
        first, kept = 0, []
    elif parts[last]["count"] < size:  # the last file has room: read and written again
        old = read(last).read(use_threads=False)
        first, kept = last, parts[:last]
    else:  # the last file is full: new files after it
        old = read(last).schema_arrow.empty_table()
        first, kept = last + 1, parts
    rows = pa.concat_tables([old, new.table.select(old.column_names).cast(old.schema)])
    written, added = encode_member_parts(MemberTable(rows), first)
    files.update(written)
    # files written before their ranges were recorded: read once, one at a time, for them
    # (the lookups of the next appends then read only the files that may hold a member)
    kept = [p if "ranges" in p else {**p, "ranges": ranges(read(k).read(use_threads=False))}
            for k, p in enumerate(kept)]
    return parts_entry(kept + added)


def _files(root: Path) -> Iterator[str]:
    for dirpath, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/")
            if OURS.fullmatch(rel):
                yield rel


def _old_rows(root: Path, rel: str, n: int, schema: pa.Schema) -> pa.Table:
    """The first ``n`` rows of the record file ``rel`` (all missing when it is absent: a
    record whose chunks were all missing has no file)."""
    target = root / rel
    if not target.exists():
        return pa.table({"path": pa.nulls(n, pa.string()),
                         "offset": pa.array([0] * n, pa.int64()),
                         "size": pa.array([0] * n, pa.int64()),
                         "raw": pa.nulls(n, pa.binary())}).cast(schema)
    table = read_table(rel, target.read_bytes()).slice(0, n)
    if "raw" not in table.column_names:
        table = table.append_column("raw", pa.nulls(table.num_rows, pa.binary()))
    path = table.column("path")
    if pa.types.is_dictionary(path.type):
        table = table.set_column(0, "path", pc.cast(path, pa.string()))
    return table.select([f.name for f in (schema.field("path"), *RECORD_FIELDS)]).cast(schema)


def _appended_manifests(root: Path, zmeta: Mapping[str, Any], tail: GranuleRefs,
                        starts: Mapping[str, int], files: dict[str, bytes]
                        ) -> tuple[dict[str, Any], set[str]]:
    """Add the manifests part of ``tail``'s rows to ``files`` (merged with the trailing parts
    :func:`~h5sidecar.references.parquet_sidecar._manifests_parts.merge_plan` names); the new
    ``"manifests"`` entry and its files.

    The old parts are kept as they are (a cube of a million members: its 2 million rows are
    neither read nor written by a day's append); the arrays the tail gives whole (those not
    in ``starts``) are listed by the new part, which supersedes their earlier rows.
    """
    parts = manifests_parts(zmeta)
    assert parts is not None  # (tail_refusal)
    if parts[0].rows < 0:  # a plain entry: its rows from the file's footer
        first = root / MANIFESTS_FILE
        parts = [BulkPart(MANIFESTS_FILE, parts[0].bytes, read_part_rows(first.read_bytes()))]
    new = manifests_table(tail, starts)
    whole = tuple(a for a in tail.arrays if a not in starts)
    n = merge_plan([*(p.rows for p in parts), new.num_rows]) - 1  # old parts merged
    kept, merged = parts[:len(parts) - n], parts[len(parts) - n:]
    if merged:
        tables = [pq.ParquetFile(pa.BufferReader((root / p.file).read_bytes()),
                                 read_dictionary=["array", "url"]).read(use_threads=False)
                  for p in merged]
        table = join_parts([*tables, new], [*(p.whole for p in merged), whole])
        del tables
        whole = tuple(sorted({*whole, *(w for p in merged for w in p.whole)}))
    else:
        table = new
    # the first part supersedes nothing; any other is named anew (kept files keep theirs)
    name, whole = (MANIFESTS_FILE, ()) if not kept else (part_name(parts), whole)
    data = encode_rows(table)
    files[name] = data
    out = [*kept, BulkPart(name, len(data), table.num_rows, whole)]
    return part_entry(out), {p.file for p in out}


def is_manifests_file(rel: str) -> bool:
    """Whether ``rel`` is a manifests file or part of one."""
    return rel == MANIFESTS_FILE or _manifests_parts.is_part(rel)
