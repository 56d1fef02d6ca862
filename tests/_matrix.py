"""The reader-conformance matrix: what each reader a user might pick returns, against the truth.

Truth is ``xr.open_dataset(file, engine="h5netcdf", phony_dims="access")`` for every group of
every corpus file, opened with its dimension sizes computed once (``_compat.h5netcdf``: h5netcdf
derives an unlimited dimension's size from every variable on it, on every ``shape``;
``test_the_truth_with_frozen_sizes_is_h5netcdfs`` holds that view equal to the plain one on
every group of the corpus).  Each reader opens the same group from h5sidecar's sidecars and
each variable gets one verdict:

* ``equal`` / ``widened``: see :mod:`h5sidecar.workflows.checks._cfcheck` (``widened``: float32
  packing attributes, which JSON cannot carry, unpacked in float64; checked, not assumed);
* ``refused``: the reader raised, or the variable is absent and the sidecar lists it as skipped
  (or the reader is told to skip it for a documented reason) -- an explicit refusal;
* ``differ``: anything else, values equal included when the variable's dimension names,
  coordinate or index status differ from the truth's (:func:`structure_problem`).  The
  matrix tests allow none.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import xarray as xr

from h5sidecar.references import key_safe_name
from h5sidecar.workflows.checks._cfcheck import decoded_verdict, open_truth
from h5sidecar.workflows.checks._dimcheck import variable_difference
from tests._attrs_equal import Strength, attr_differences

Verdict = str  # "equal" | "widened" | "refused" | "differ"


@dataclass
class Tally:
    """Verdicts of one reader over some files."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("equal", "widened", "refused", "differ"), 0))  # fmt: skip
    files: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("equal", "refused", "differ"), 0))  # fmt: skip
    differ: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    #: attributes that differ from h5netcdf's (see :func:`attributes_differ`)
    attrs_differ: list[str] = field(default_factory=list)

    def add(self, verdict: Verdict, where: str) -> None:
        self.counts[verdict] += 1
        if verdict == "differ":
            self.differ.append(where)
        elif verdict == "refused":
            self.refused.append(where)


def groups_of(path: Path) -> list[str]:
    """Every group reachable by hard links ("" for the root), each object once."""
    out = [""]
    seen: set[int] = set()

    def walk(g: h5py.Group, prefix: str) -> None:
        for k in g:
            try:
                link = g.get(k, getlink=True)
            except (TypeError, KeyError, OSError):  # user-defined links
                continue
            if not isinstance(link, h5py.HardLink):
                continue  # soft and external links: their targets are indexed where they live
            try:
                obj = g[k]
            except (KeyError, OSError, ValueError):
                continue
            if isinstance(obj, h5py.Group):
                addr = h5py.h5o.get_info(obj.id).addr
                if addr not in seen:
                    seen.add(addr)
                    out.append(prefix + k)
                    walk(obj, prefix + k + "/")

    with h5py.File(path, "r") as f:
        seen.add(h5py.h5o.get_info(f.id).addr)
        walk(f, "")
    return out


#: Truth variables up to this many bytes are read once, when the truth is opened: a test
#: compares them through several readers (the matrix: twelve), and h5netcdf computes every
#: unlimited dimension's size again on each read (ATL03-like groups: ~7 ms a read).
LOAD_LIMIT = 2**26


def truth(path: Path, group: str) -> tuple[xr.Dataset, xr.Dataset] | None:
    """(decoded as h5netcdf decodes, decoded with float64 packing attributes), or None; the
    second is the first itself when the group has nothing to widen."""
    pair = open_truth(path, group, frozen_sizes=True)
    if pair is None:
        return None
    for ds in {id(d): d for d in pair}.values():
        for v in ds.variables.values():
            if v.nbytes <= LOAD_LIMIT:
                try:
                    v.load()
                except MemoryError:
                    raise
                except Exception:  # noqa: BLE001, S110 - judged where it is compared
                    pass
    return pair


#: Variables larger than this are compared on three windows (head, middle, tail) of their
#: first axis, as the corpus README asks for the arrays of more than 2**31 elements.
WHOLE_LIMIT = 2**24


def _windows(v: xr.DataArray) -> list[dict[str, slice]]:
    if v.size <= WHOLE_LIMIT or not v.dims:
        return [{}]
    n, dim = v.shape[0], v.dims[0]
    w = 4096
    return [{dim: slice(0, w)}, {dim: slice(n // 2, n // 2 + w)}, {dim: slice(max(n - w, 0), n)}]


#: Through every reader but the three a user reads a sidecar with directly (plain Zarr on the
#: JSON and on the Parquet references, and h5sidecar's engine), a variable of more than this many
#: chunks is compared on whole chunks along its axis of most chunks: the first two, the last two
#: and an even spread between, up to about this many chunks in all.  Its every chunk is compared
#: through those three.  Two corpus files hold arrays of 10,000 one-element chunks: read whole
#: through all twelve readers they took ~8 minutes of the suite's CPU (~4 of them over HTTP),
#: sampled at 1,000 chunks ~3, at 250 about one.
SAMPLE_CHUNKS = 250


def chunk_sample(got: xr.DataArray, max_chunks: int) -> dict[str, np.ndarray] | None:
    """Whole chunks of ``got`` to compare when it has more than ``max_chunks`` (None: all)."""
    chunks = got.encoding.get("chunks")
    if not got.dims or not chunks or len(chunks) != got.ndim or got.size > WHOLE_LIMIT:
        return None  # (a variable over WHOLE_LIMIT is compared on its windows, whatever its chunks)
    grid = [-(-n // c) for n, c in zip(got.shape, chunks, strict=True)]
    if math.prod(grid) <= max_chunks:
        return None
    axis = int(np.argmax(grid))
    n, c = grid[axis], chunks[axis]
    k = max(4, max_chunks * n // math.prod(grid))
    picks = sorted({0, 1, n - 2, n - 1, *np.linspace(0, n - 1, k).astype(int).tolist()})
    size = got.shape[axis]
    rows = np.concatenate([np.arange(p * c, min((p + 1) * c, size)) for p in picks])
    return {got.dims[axis]: rows}


def verdict(got: xr.DataArray, want: xr.DataArray, wide: xr.DataArray | None,
            resolve: Any = None, max_chunks: int | None = None) -> Verdict:  # fmt: skip
    """``max_chunks``: compare whole chunks of ``got`` up to about that many
    (:func:`chunk_sample`), not every one."""
    verdicts = set()
    sample = None if max_chunks is None else chunk_sample(got, max_chunks)
    for sel in _windows(want) if sample is None else [sample]:
        g, w = got.isel(sel).values, want.isel(sel).values
        wv = None if wide is None else wide.isel(sel).values
        verdicts.add(decoded_verdict(g, w, wv, resolve))
    return "differ" if "differ" in verdicts else "widened" if "widened" in verdicts else "equal"


def structure_problem(ds: xr.Dataset, want: xr.Dataset, name: str,
                      lengths: dict[str, set[int]] | None) -> str:  # fmt: skip
    """What differs in the dimension names, coordinate or index status of ``name`` ("" when
    nothing).  The one renaming allowed is the one xarray forces on a sidecar (see
    :mod:`h5sidecar.workflows.checks._dimcheck`): an axis whose truth name has another length in the
    group or its ancestors (``lengths``, from :func:`~h5sidecar.workflows.checks._dimcheck.outer_lengths`)."""
    if lengths is None:
        lengths = {str(k): {int(v)} for k, v in want.sizes.items()}
    return variable_difference(name, ds, want, lengths)


def attributes_differ(ds: xr.Dataset, want: xr.Dataset, where: str, strength: Strength,
                      resolve: Any = None) -> list[str]:  # fmt: skip
    """The group's and its variables' attributes that differ from h5netcdf's, value and type
    (``strength``: see :mod:`tests._attrs_equal`); variables the reader lacks are not judged
    here (their verdict is)."""
    out = [f"{where}: {d}" for d in attr_differences(ds.attrs, want.attrs, strength, resolve)]
    for name in want.variables:
        if name in ds.variables:
            out += [f"{where}/{name}: {d}"
                    for d in attr_differences(ds[name].attrs, want[name].attrs, strength, resolve)]
    return out


def compare_group(open_group: Callable[[], xr.Dataset], truth_pair: tuple[xr.Dataset, xr.Dataset],
                  where: str, tally: Tally, skipped: set[str],
                  resolve: Any = None, lengths: dict[str, set[int]] | None = None,
                  attrs: Strength | None = None, max_chunks: int | None = None) -> None:  # fmt: skip
    """Open one group with a reader and add a verdict per truth variable to ``tally``
    (``lengths``: see :func:`structure_problem`), and with ``attrs`` the attributes that differ
    from h5netcdf's (:func:`attributes_differ`); ``max_chunks``: see :func:`verdict`."""
    want, wide = truth_pair
    widened = wide is not want  # else each variable's truth is read once per reader, not twice
    try:
        ds = open_group()
    except Exception as exc:  # noqa: BLE001 - a refusal is a verdict
        for name in want.variables:
            tally.add("refused", f"{where}/{name}: {type(exc).__name__}: {str(exc)[:120]}")
        return
    if attrs is not None:
        tally.attrs_differ += attributes_differ(ds, want, where, attrs, resolve)
    for name in want.variables:
        at = f"{where}/{name}"
        if name not in ds.variables:
            tally.add("refused" if name in skipped else "differ", f"{at}: absent")
            continue
        try:
            v = verdict(ds[name], want[name],
                        wide[name] if widened and name in wide.variables else None,
                        resolve, max_chunks)  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            tally.add("refused", f"{at}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        problem = structure_problem(ds, want, name, lengths) if v != "differ" else ""
        if problem:
            tally.add("differ", f"{at}: {problem}")
            continue
        tally.add(v, f"{at}: {ds[name].dtype} vs {want[name].dtype}" if v == "differ" else at)


def iter_truth(path: Path) -> Iterator[tuple[str, tuple[xr.Dataset, xr.Dataset]]]:
    for g in groups_of(path):
        pair = truth(path, g)
        if pair is not None:
            yield g, pair


def reference_resolver(h5: h5py.File) -> Callable[[Any], str]:
    """h5py object reference -> the target's path, as sidecars hold references (names a Zarr
    key space cannot hold %XX-escaped, as in the sidecar)."""

    def resolve(ref: Any) -> str:
        if not isinstance(ref, h5py.Reference):
            return str(ref)
        name = h5[ref].name if ref else ""
        return "/".join(key_safe_name(part) for part in (name or "").split("/"))

    return resolve
