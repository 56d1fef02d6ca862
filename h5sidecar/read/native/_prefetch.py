"""Read-ahead of small arrays: a loop's second small read brings the group's other small arrays.

The loop a new user writes first -- ``for v in ds.data_vars.values(): v.load()``, or xarray's
own ``Dataset.load()`` / ``DataTree.load()``, which read variable after variable -- waits for one
round trip per variable.  A granule of a thousand mostly small variables then costs a thousand
round trips.  Here, once a second batch reads a lazy array of at most ``prefetch_bytes / 8``
decoded bytes whole, the batch reader reads in the same coalesced batch the other small arrays that were
opened through the same reader -- its own group's first, then the other opened groups' (a
DataTree opens them all) -- until half of ``prefetch_bytes`` of decoded values are held.
Later reads of those arrays are served from memory, without a request; large arrays stay lazy.
As the loop takes the arrays held, the next ones are read while it works: whenever no
read-ahead is in flight and a quarter of the budget is free, another read-ahead fills it
(:func:`plan_refill`), so a loop over more small arrays than the budget holds waits for no
round trip after its first reads, and held plus in-flight arrays stay within the budget.

Large arrays stay lazy, except in a loop that reads them whole one after another: after three
such reads in a row, each whole read of a larger array brings the arrays opened after it in
its group, in order, while they fit in a budget of their own (``prefetch_bytes`` again, so
at most twice ``prefetch_bytes`` are held in all; :func:`follow_on`), so a loop over a
group's photon-rate variables waits for a round trip every few arrays, not every array.  A
read-ahead in flight serves the reads of its arrays (they wait for it instead of reading them
again), and a read wholly held in memory is served on the caller's thread.

Rules that keep it cheap and bounded:

* a single read (a user reading one variable), what xarray reads while it opens a Dataset,
  and index coordinates never trigger it;
* only arrays opened as lazy variables through this reader qualify (a Dataset of one group
  never reads ahead into groups the user did not open);
* each array is read ahead at most once per reader, and a read-ahead array is handed out once
  (then dropped): memory held never exceeds ``prefetch_bytes`` for small arrays, and as much
  again for a loop's larger ones;
* ``prefetch_bytes=0`` (``ReadSettings``, or ``H5SIDECAR_PREFETCH_BYTES`` through
  :func:`~h5sidecar.settings.from_env`) turns it off.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from h5sidecar.read.native._selection import Selection, chunk_selection
from h5sidecar.references import ArrayRefs

__all__ = [
    "LARGE_RUN",
    "REFILL_FRACTION",
    "SMALL_FRACTION",
    "decoded_nbytes",
    "follow_on",
    "is_dimension_coordinate",
    "is_small",
    "is_whole",
    "is_whole_key",
    "not_read_yet",
    "plan_ahead",
    "plan_refill",
    "read_ahead",
]

#: An array is "small" (it triggers, and may be part of, a read-ahead) when its decoded size is
#: at most this fraction of the budget: one read-ahead brings at least this many arrays.
SMALL_FRACTION = 8
#: A loop reading ahead small arrays starts the next read-ahead once this fraction of the
#: budget is free again (:func:`plan_refill`): batches of about a quarter of the budget keep
#: arriving while the loop works through the arrays held.
REFILL_FRACTION = 4
#: Whole reads of larger arrays in a row (no small one between) that start reading the next
#: arrays of their group with them (:func:`follow_on`).
LARGE_RUN = 3


def decoded_nbytes(arr: ArrayRefs) -> int:
    """Bytes of an array's decoded values (from its metadata; nothing is loaded)."""
    meta = arr.meta
    return math.prod(meta.shape) * meta.numpy_dtype.itemsize  # Python ints: never overflow


def is_small(arr: ArrayRefs, limit: int) -> bool:
    """Whether an array may trigger or join a read-ahead under ``limit``."""
    return limit > 0 and decoded_nbytes(arr) <= limit // SMALL_FRACTION


def is_dimension_coordinate(arr: ArrayRefs) -> bool:
    """A 1-d array named as its dimension: xarray reads these whole while it opens a
    Dataset (to index them), which is no sign of a loop over variables."""
    meta = arr.meta
    return len(meta.shape) == 1 and meta.dimension_names[:1] == (arr.path.rpartition("/")[2],)


def read_ahead(
    trigger: str,
    arrays: Mapping[str, ArrayRefs],
    opened: Iterable[str],
    exclude: Container[str],
    limit: int,
    held: int = 0,
) -> list[str]:
    """The arrays to read together with a whole read of ``trigger``, in the order they qualify.

    Parameters
    ----------
    trigger : str
        The array being read.
    arrays : mapping
        The granule's arrays.
    opened : iterable of str
        Arrays opened as lazy variables through the reader (the candidates), in opening order.
    exclude : container of str
        Arrays already read, read ahead, or part of this batch.
    limit : int
        ``ReadSettings.prefetch_bytes``: decoded bytes held read ahead at most.
    held : int
        Decoded bytes held read ahead already (not handed out yet).

    Returns
    -------
    list of str
        Empty when ``trigger`` is not small or nothing fits.
    """
    small, budget = limit // SMALL_FRACTION, limit - held
    if budget <= 0 or trigger not in arrays or not is_small(arrays[trigger], limit):
        return []
    group = trigger.rpartition("/")[0]
    candidates = [p for p in dict.fromkeys(opened) if p not in exclude and p != trigger]
    # the trigger's group first: the loop over a Dataset reads its variables next
    candidates.sort(key=lambda p: p.rpartition("/")[0] != group)
    out, total = [], 0
    for path in candidates:
        size = decoded_nbytes(arrays[path])
        if size > small or total + size > budget:
            continue
        out.append(path)
        total += size
    return out


def follow_on(
    trigger: str,
    arrays: Mapping[str, ArrayRefs],
    opened: Iterable[str],
    exclude: Container[str],
    limit: int,
    held: int = 0,
) -> list[str]:
    """The arrays a loop reading large arrays whole reads next: those opened after
    ``trigger`` in its group, in order, as long as they fit in ``limit - held`` decoded bytes
    together (the first that does not fit ends the run).  Parameters as for
    :func:`read_ahead`."""
    order = list(dict.fromkeys(opened))
    if trigger not in order:
        return []
    group, budget = trigger.rpartition("/")[0], limit - held
    out, total = [], 0
    for path in order[order.index(trigger) + 1 :]:
        if path.rpartition("/")[0] != group:
            break
        if path in exclude:
            continue
        size = decoded_nbytes(arrays[path])
        if total + size > budget:
            break
        out.append(path)
        total += size
    return out


def is_whole(sel: Selection, shape: Sequence[int]) -> bool:
    """True when a selection is the whole array in order (no step, no dropped axis)."""
    return (
        tuple(sel.shape) == tuple(shape)
        and not any(sel.lo)
        and all(p == slice(0, n, 1) for p, n in zip(sel.post, shape, strict=True))
    )


def is_whole_key(key: Sequence[Any], shape: Sequence[int]) -> bool:
    """:func:`is_whole` of ``chunk_selection(shape, chunks, key)``, from the key alone: a loop
    taking a thousand held arrays asks this once each, and building each selection's chunk
    grid (a meshgrid) only to answer it cost more than handing the array out."""
    return len(key) == len(shape) and all(
        isinstance(k, slice) and n > 0 and k.indices(n) == (0, n, 1)
        for k, n in zip(key, shape, strict=True)
    )


def plan_ahead(reader: Any, prepared: list[tuple[str, ArrayRefs, Selection]]) -> list[Any]:
    """Whole reads of small neighbours for a :class:`~h5sidecar.read.native._batch_reader.NativeReader` to add
    to a batch: only once a second batch reads a small array whole (the sign of a loop over
    variables), never while xarray opens a Dataset (``reader.opening()``)."""
    limit = reader.fetcher.settings.prefetch_bytes
    if limit <= 0 or not reader.opened or reader._opening:
        return []
    whole_small = [
        p for p, arr, sel in prepared
        if is_whole(sel, arr.meta.shape) and is_small(arr, limit)
        and not is_dimension_coordinate(arr)
    ]  # fmt: skip
    reader._ahead_done.update(p for p, _, _ in prepared)
    if not whole_small:
        whole_large = [
            p for p, arr, sel in prepared
            if is_whole(sel, arr.meta.shape) and not is_dimension_coordinate(arr)
        ]  # fmt: skip
        if not whole_large:
            return []
        # three in a row, none small between: a loop over large arrays, not one variable
        # read with its two coordinates (``DataArray.load()``)
        reader._large_reads += 1
        if reader._large_reads < LARGE_RUN:
            return []
        # a budget of its own: the small arrays held for groups the loop has not reached yet
        # must not starve it (so at most twice prefetch_bytes are held in all)
        held_large = sum(a.nbytes for a in reader._prefetched.values()
                         if a.nbytes > limit // SMALL_FRACTION)
        paths = follow_on(whole_large[-1], reader.refs.arrays, reader.opened,
                          reader._ahead_done | reader._prefetched.keys(), limit, held_large)
    else:
        reader._large_reads = 0
        reader._small_reads += 1
        if reader._small_reads < 2:
            return []
        left = not_read_yet(reader)
        if not left:
            return []
        held = sum(a.nbytes for a in list(reader._prefetched.values())) + inflight_bytes(reader)
        # half the budget: the other half is read (plan_refill) while the loop takes these
        paths = read_ahead(whole_small[0], reader.refs.arrays, left, reader._prefetched.keys(),
                           limit, held + limit // 2)
        reader._refilling = reader._refilling or bool(paths)
    return _whole_reads(reader, paths)


def inflight_bytes(reader: Any) -> int:
    """Decoded bytes of the arrays a read-ahead is still reading: they count against the
    budget as held ones do (a refill may be in flight when a loop's own read plans the next
    read-ahead; counting only held arrays let the two together pass ``prefetch_bytes``)."""
    arrays = reader.refs.arrays
    return sum(decoded_nbytes(arrays[p]) for p in list(reader._ahead_inflight) if p in arrays)


def plan_refill(reader: Any, handed: str) -> list[Any]:
    """Whole reads of the next small arrays, once a loop that read ahead has taken a quarter
    of the budget (``REFILL_FRACTION``) from what was held (``handed``: the array it just took): the next read-ahead then arrives while the
    loop is still busy with the arrays held, instead of after its next miss.  Never with a
    read-ahead in flight, so held and in-flight arrays stay within ``prefetch_bytes``."""
    limit = reader.fetcher.settings.prefetch_bytes
    if limit <= 0 or not reader._refilling or reader._opening or reader._ahead_inflight:
        return []
    left = not_read_yet(reader)
    if not left:  # the loop's usual case once everything opened was read ahead
        return []
    held = sum(a.nbytes for a in list(reader._prefetched.values()))  # a copy: callers pop
    if limit - held < limit // REFILL_FRACTION:
        return []
    paths = read_ahead(handed, reader.refs.arrays, left, reader._prefetched.keys(), limit, held)
    return _whole_reads(reader, paths)


def not_read_yet(reader: Any) -> list[str]:
    """The arrays opened through ``reader`` that no read has read (or read ahead) yet, in
    opening order: the candidates of a read-ahead.

    A loop asks at every array it takes; scanning every opened array each time made a loop
    over a thousand variables quadratic (~40 ms of CPU on a 70 MB granule).  Both sets only
    grow, so while no array is opened the answer is the previous one minus what was read
    since: each call walks the previous answer only.
    """
    opened, done = reader.opened, reader._ahead_done
    memo = reader._not_read_memo
    source = memo[1] if memo is not None and memo[0] == len(opened) else list(opened)
    left = [p for p in source if p not in done]
    reader._not_read_memo = (len(opened), left)
    return left


def _whole_reads(reader: Any, paths: list[str]) -> list[Any]:
    paths = [p for p in paths if reader.supports(p)]
    reader._ahead_done.update(paths)
    out = []
    for p in paths:
        meta = reader.refs.arrays[p].meta
        whole = (slice(None),) * len(meta.shape)
        out.append((p, reader.refs.arrays[p], chunk_selection(meta.shape, meta.chunks, whole)))
    return out
