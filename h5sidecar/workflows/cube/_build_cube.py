"""Build a datacube: many granules' sidecars combined into one reference set along a dimension.

:func:`build_cube` reads the sidecars (never the HDF5 files), checks that every granule encodes
each variable alike (:mod:`h5sidecar.workflows.cube._cube_checks`), orders the granules by their
values of the concatenated coordinate (read through the sidecars), concatenates the chunk
manifests (:func:`h5sidecar.references.concat_refs`), holds that coordinate inline (opening the
cube reads no source) and writes kerchunk Parquet or JSON.  The result records every member
granule's identity, so a granule replaced after indexing is refused on read
(:class:`~h5sidecar.errors.StaleReferenceError`), never served from stale references.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from h5sidecar.errors import InvalidRequestError, require_extra
from h5sidecar.references import gc_paused
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows.cube._cube_build import CubePart, CubeResult, _build, cube_paths
from h5sidecar.workflows.cube._cube_lock import writing_cube

__all__ = ["CubePart", "CubeResult", "build_cube", "cube_paths"]


def build_cube(
    sidecars: str | os.PathLike[str] | Sequence[Any],
    out: str | os.PathLike[str],
    *,
    concat_dim: str = "time",
    group: str | None = None,
    variables: Sequence[str] | None = None,
    format: Literal["parquet", "json", "icechunk"] = "parquet",
    on_mismatch: Literal["raise", "split"] = "raise",
    storage_options: Mapping[str, Any] | None = None,
    mode: Literal["build", "append"] = "build",
    on_out_of_order: Literal["raise", "rebuild"] = "raise",
    normalize_time: bool = False,
    time_units: str | None = None,
    record_settings: RecordSettings | None = None,
    recheck: bool = False,
) -> CubeResult:
    """Combine granules' sidecars into one datacube reference set along ``concat_dim``.

    Parameters
    ----------
    sidecars : str, path-like or sequence
        A DEST folder or S3 prefix written by ``h5sidecar index`` (every sidecar below it, but
        those of granules the run report marks failed and cubes), or a sequence of sidecar
        paths/URLs or :class:`~h5sidecar.references.GranuleRefs`.  Their order does not matter.
    out : str or path-like
        Where to write the cube (``cube.parq`` directory or ``cube.json``; local or ``s3://``).
    concat_dim : str
        Dimension to concatenate along; each granule needs a 1-D coordinate variable of that
        name.  Granules are ordered by its values.
    group : str, optional
        Group whose variables make the cube (root by default).
    variables : sequence of str, optional
        Variables of ``group`` to keep (default all); their dimensions' coordinate variables and
        the ``concat_dim`` coordinate are kept too.
    format : "parquet", "json" or "icechunk"
        kerchunk Parquet, kerchunk JSON, or a commit of an Icechunk repository at ``out``
        (virtual chunk references, one container per source prefix, each chunk checked against
        its member's ETag / modification time; see :func:`~h5sidecar.workflows.write_icechunk`).
        Building again into the same repository is a new commit (history and time travel).
    on_mismatch : "raise" or "split"
        When granules encode a variable differently (see :func:`encoding_groups`): refuse
        (default) or write one cube per consistent encoding (see :func:`cube_paths`).
    storage_options : mapping, optional
        fsspec/s3fs options for the sidecars, the sources and ``out``.
    mode : "build" or "append"
        ``"build"`` writes the cube from all ``sidecars``.  ``"append"`` adds to the cube(s) at
        ``out`` only the granules not yet in them and replaces members whose source changed
        (see :func:`~h5sidecar.workflows.cube._cube_append.append_cube`); ``group`` and
        ``variables`` are the cube's.
        With no cube at ``out`` yet, it builds one.
    on_out_of_order : "raise" or "rebuild"
        Append only: a new granule that does not follow the cube along ``concat_dim`` is
        refused (default), or the cube is rebuilt from all ``sidecars``.
    normalize_time : bool
        Accept granules whose concat coordinate has other time units: their values are decoded
        with their own units and calendar and held in the cube in ``time_units`` (default: the
        first sidecar's, DEST being listed by name; an append keeps the cube's), exactly, else
        refused (see :mod:`h5sidecar.workflows.cube._cube_time`).
    time_units : str, optional
        The cube's time units with ``normalize_time`` (a new cube only).
    record_settings : RecordSettings, optional
        The record cache an object-store DEST's record (which granules failed) is read
        through (default: ``from_env(RecordSettings)``).
    recheck : bool
        Append only.  A cube built or appended from a local DEST keeps where DEST's record
        stood then, and the next append loads only the sidecars the record shows indexed
        since (one query: no listing of DEST, no stat of the members' sidecars; see
        :mod:`h5sidecar.workflows.cube._cube_mark`).  ``recheck=True`` lists DEST and compares
        every member's sidecar stamp instead, which also finds sidecars rewritten behind the
        record's back (by hand, by another tool).

    Returns
    -------
    CubeResult

    Raises
    ------
    IncompatibleGranulesError
        Encodings differ (``on_mismatch="raise"``), granules overlap along ``concat_dim`` or
        have different variables, a granule's last chunk along ``concat_dim`` is partial
        and another granule follows it, or (append) a granule falls before the cube's end.
    InvalidRequestError
        No sidecars, an unknown group/variable, or no coordinate variable ``concat_dim``.
    """
    if format == "icechunk":
        require_extra("icechunk", "icechunk", feature="a cube in Icechunk (cube --format icechunk)")
    if on_mismatch not in ("raise", "split"):
        raise InvalidRequestError(f"on_mismatch must be 'raise' or 'split', not {on_mismatch!r}")
    if format not in ("parquet", "json", "icechunk"):
        raise InvalidRequestError(
            f"format must be 'parquet', 'json' or 'icechunk', not {format!r}"
        )
    if mode not in ("build", "append") or on_out_of_order not in ("raise", "rebuild"):
        raise InvalidRequestError(
            f"mode must be 'build' or 'append' ({mode!r}), on_out_of_order 'raise' or "
            f"'rebuild' ({on_out_of_order!r})"
        )
    opts = dict(storage_options or {})
    kw: dict[str, Any] = {
        "concat_dim": concat_dim, "format": format, "on_mismatch": on_mismatch, "opts": opts,
        "normalize_time": normalize_time, "time_units": time_units,
        "record_settings": record_settings,
    }  # fmt: skip
    # a build allocates a few containers per granule and array, freed by reference counting;
    # collections meanwhile would scan the whole heap of the caller's process again and again
    # (0.3-0.5 s of a 1000-granule build beside a million live objects)
    # one writer of a local cube at a time; a killed one's leftovers removed (see _cube_lock)
    with gc_paused(), writing_cube(os.fspath(out)):
        if mode == "append":
            from h5sidecar.workflows.cube._cube_append import append_cube

            return append_cube(
                sidecars, os.fspath(out), on_out_of_order=on_out_of_order, recheck=recheck,
                rebuild=lambda action: _build(sidecars, os.fspath(out), group=group,
                                              variables=variables, action=action, **kw),
                **kw,
            )  # fmt: skip
        return _build(sidecars, os.fspath(out), group=group, variables=variables, **kw)
