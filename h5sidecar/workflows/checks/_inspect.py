"""Summarise a sidecar: its variables, how each is held, what was skipped and why, the source."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from h5sidecar.dest import RECORD_NAME, filesystem, is_remote, iter_sidecars
from h5sidecar.errors import InvalidRequestError
from h5sidecar.references import (
    ArrayRefs,
    GranuleRefs,
    Skipped,
    SourceInfo,
    read_layout,
    read_refs,
)
from h5sidecar.sources import normalize_url

#: Sidecars named when a DEST folder is given where one sidecar is expected.
_LISTED = 3

__all__ = ["SidecarSummary", "VariableSummary", "inspect_refs", "summarize"]


@dataclass(frozen=True, slots=True)
class VariableSummary:
    """One variable of a sidecar (a row of ``h5sidecar inspect``).

    Attributes
    ----------
    path : str
    status : "virtual", "inlined" or "skipped"
    shape, chunks : tuple of int
    dtype : str
    n_chunks, n_stored, n_inline, n_missing : int
        Chunk positions in the grid; held as byte ranges in the source; held in the sidecar;
        not stored (read as the fill value).
    stored_bytes, inline_bytes : int
        Encoded bytes referenced in the source / held in the sidecar.
    codecs : tuple of str
        Codec ids in encode order (filters, then compressor).
    note : str
        Why the variable is inlined or transformed, or why it was skipped.
    checksums : bool
        Whether chunk checksums are recorded.
    """

    path: str
    status: str
    shape: tuple[int, ...] = ()
    chunks: tuple[int, ...] = ()
    dtype: str = ""
    n_chunks: int = 0
    n_stored: int = 0
    n_inline: int = 0
    n_missing: int = 0
    stored_bytes: int = 0
    inline_bytes: int = 0
    codecs: tuple[str, ...] = ()
    note: str = ""
    checksums: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "status": self.status,
            "shape": list(self.shape),
            "chunks": list(self.chunks),
            "dtype": self.dtype,
            "chunk_counts": {
                "grid": self.n_chunks,
                "stored": self.n_stored,
                "inline": self.n_inline,
                "missing": self.n_missing,
            },
            "bytes": {"stored": self.stored_bytes, "inline": self.inline_bytes},
            "codecs": list(self.codecs),
            "note": self.note,
            "checksums": self.checksums,
        }


@dataclass(frozen=True, slots=True)
class SidecarSummary:
    """What ``h5sidecar inspect`` shows.

    Attributes
    ----------
    ref : str
        The sidecar.
    format : "parquet" or "json"
    sidecar_bytes : int
    source : SourceInfo
    n_groups : int
    variables : tuple of VariableSummary
        Arrays in file order, then skipped variables.
    extra : Mapping
        Provenance recorded by the indexer.
    layout : "kerchunk", "compact" or None
        Layout of a Parquet sidecar (None for JSON).
    """

    ref: str
    format: str
    sidecar_bytes: int
    source: SourceInfo
    n_groups: int
    variables: tuple[VariableSummary, ...]
    extra: Mapping[str, Any]
    layout: str | None = None

    @property
    def counts(self) -> dict[str, int]:
        """Variables per status."""
        out = {"virtual": 0, "inlined": 0, "skipped": 0}
        for v in self.variables:
            out[v.status] = out.get(v.status, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``h5sidecar inspect --json``)."""
        return {
            "ref": self.ref,
            "format": self.format,
            "layout": self.layout,
            "sidecar_bytes": self.sidecar_bytes,
            "source": self.source.to_dict(),
            "n_groups": self.n_groups,
            "counts": self.counts,
            "variables": [v.to_dict() for v in self.variables if v.status != "skipped"],
            "skipped": [
                {"path": v.path, "reason": v.note} for v in self.variables if v.status == "skipped"
            ],
            "extra": _jsonable(self.extra),
        }


def inspect_refs(ref: str, *, storage_options: Mapping[str, Any] | None = None) -> SidecarSummary:
    """Read a sidecar and summarise it.

    Parameters
    ----------
    ref : str
        A ``.parq`` sidecar directory or a ``.json`` sidecar, local or on S3.
    storage_options : mapping, optional
        fsspec/s3fs options to read it.

    Raises
    ------
    InvalidReferenceError
        When the sidecar is malformed.
    FileNotFoundError
        When it does not exist.
    """
    ref = normalize_url(ref)
    fs = filesystem(ref, storage_options)
    path = ref.split("://", 1)[1] if is_remote(ref) else ref
    if not fs.exists(path):
        raise FileNotFoundError(f"no sidecar at {ref}: check the path (h5sidecar index writes them)")
    is_dir = fs.isdir(path)
    if is_dir:
        refuse_dest_folder(ref, storage_options)
    refs = read_refs(ref, storage_options=dict(storage_options) if storage_options else None)
    size = int(fs.du(path, total=True)) if is_dir else int(fs.size(path))
    summary = summarize(refs, ref=ref, format="parquet" if is_dir else "json", sidecar_bytes=size)
    if not is_dir:
        return summary
    opts = dict(storage_options) if storage_options else None
    return dataclasses.replace(summary, layout=read_layout(ref, storage_options=opts))


def refuse_dest_folder(ref: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`InvalidRequestError` naming a few sidecars when ``ref`` is a folder of
    sidecars (a DEST) rather than one sidecar: the first thing a newcomer tries after ``index``.
    """
    fs = filesystem(ref, storage_options)
    path = ref.split("://", 1)[1] if is_remote(ref) else ref
    if fs.exists(f"{path.rstrip('/')}/.zmetadata"):  # a Parquet sidecar
        return
    listed = itertools.islice(iter_sidecars(ref, storage_options=storage_options,
                                            identity=False), _LISTED + 1)
    names = [info.sidecar for info, _ in listed]
    if not names and not fs.exists(f"{path.rstrip('/')}/{RECORD_NAME}"):
        return  # neither: the reader's own message says what is missing
    more = " ..." if len(names) > _LISTED else ""
    raise InvalidRequestError(
        f"{ref} is an index folder (a DEST), not a sidecar: pass one of its sidecars"
        + (f", e.g. {', '.join(names[:_LISTED])}{more}" if names else " (it holds none yet)"))


def summarize(
    refs: GranuleRefs, *, ref: str = "", format: str = "", sidecar_bytes: int = 0
) -> SidecarSummary:
    """A :class:`SidecarSummary` of in-memory references."""
    rows = [_array_row(a) for a in refs.arrays.values()]
    rows += [_skipped_row(s) for s in refs.skipped]
    return SidecarSummary(
        ref=ref,
        format=format,
        sidecar_bytes=sidecar_bytes,
        source=refs.source,
        n_groups=len(refs.groups),
        variables=tuple(rows),
        extra=refs.extra,
    )


def _array_row(arr: ArrayRefs) -> VariableSummary:
    m, meta = arr.manifest, arr.meta
    codecs = [str(f.get("id", "?")) for f in meta.filters]
    if meta.compressor is not None:
        codecs.append(str(meta.compressor.get("id", "?")))
    return VariableSummary(
        path=arr.path,
        status=arr.status,
        shape=meta.shape,
        chunks=meta.chunks,
        dtype=_dtype_str(meta.dtype),
        n_chunks=m.n_chunks,
        n_stored=m.n_stored,
        n_inline=m.n_inline,
        n_missing=m.n_missing,
        stored_bytes=m.stored_bytes,
        inline_bytes=m.inline_bytes,
        codecs=tuple(codecs),
        note=arr.note,
        checksums=arr.checksums is not None,
    )


def _skipped_row(s: Skipped) -> VariableSummary:
    return VariableSummary(path=s.path, status="skipped", note=f"{s.kind}: {s.reason}")


def _dtype_str(dtype: str | list[Any]) -> str:
    if isinstance(dtype, str):
        return dtype
    # structured: "{name: type, ...}" reads better in a table than the v2 list form
    return "{" + ", ".join(f"{f[0]}: {_dtype_str(f[1])}" for f in dtype) + "}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
