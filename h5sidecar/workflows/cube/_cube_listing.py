"""The sidecars a cube is built from, listed from DEST into one Arrow column (bounded memory).

A build holds every listed sidecar path until its end (a member's record names the sidecar it
came from).  As Python strings in a list that is ~130 bytes a path, and listing them through
:func:`~h5sidecar.dest.list_indexed` held a :class:`~h5sidecar.dest.GranuleInfo` each on top
(~0.7 KB a granule at the listing's peak: ~700 MB at a million).  :class:`SidecarPaths`
holds them in an Arrow string array (their characters and 4 bytes each) and gives Python
strings only for the slice a batch loads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.settings import RecordSettings

__all__ = ["SidecarPaths", "list_sidecars"]

#: Paths turned into Python strings (or into Arrow) at a time.
_SLICE = 10_000


class SidecarPaths(Sequence[str]):
    """Sidecar paths held in an Arrow string array; a read-only sequence of ``str``.

    A slice is a plain ``list`` of ``str`` (what a batch loads), an index one ``str``.
    """

    __slots__ = ("arrow",)

    def __init__(self, paths: pa.Array) -> None:
        self.arrow = paths

    def __len__(self) -> int:
        return len(self.arrow)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self.arrow))
            if step != 1:
                return self.arrow.to_pylist()[index]
            return self.arrow.slice(start, max(stop - start, 0)).to_pylist()
        if index < 0:
            index += len(self.arrow)
        if not 0 <= index < len(self.arrow):
            raise IndexError(index)
        return str(self.arrow[index].as_py())

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self.arrow), _SLICE):
            yield from self.arrow.slice(start, _SLICE).to_pylist()

    def take(self, order: Sequence[int] | np.ndarray) -> SidecarPaths:
        """The paths at ``order`` (positions), in that order."""
        return SidecarPaths(self.arrow.take(pa.array(np.asarray(order, np.int64))))


def list_sidecars(dest: str | os.PathLike[str], storage_options: Mapping[str, Any] | None,
                  record_settings: RecordSettings | None = None) -> SidecarPaths:
    """The sidecars under DEST (as :func:`~h5sidecar.dest.list_indexed` finds them: granules
    marked failed left out), sorted by granule name, as :class:`SidecarPaths`.

    The listing is streamed (:func:`~h5sidecar.dest.iter_sidecars`) into Arrow columns of
    :data:`_SLICE` names and paths at a time, and sorted there: Arrow orders strings by their
    UTF-8 bytes, which is Python's order of ``str`` (by code point).  ``record_settings``: the
    record cache an object-store DEST's failed granules are read through (default:
    ``from_env(RecordSettings)``).
    """
    from h5sidecar.dest import iter_sidecars

    names: list[pa.Array] = []
    paths: list[pa.Array] = []
    batch_names: list[str] = []
    batch_paths: list[str] = []

    def flush() -> None:
        names.append(pa.array(batch_names, pa.string()))
        paths.append(pa.array(batch_paths, pa.string()))
        batch_names.clear()
        batch_paths.clear()

    for info, _ in iter_sidecars(os.fspath(dest), storage_options=storage_options,
                                 identity=False, record_settings=record_settings):
        batch_names.append(info.name)
        batch_paths.append(info.sidecar)
        if len(batch_names) >= _SLICE:
            flush()
    flush()
    name_column = pa.chunked_array(names, pa.string())
    path_column = pa.concat_arrays(paths)
    order = pc.sort_indices(name_column)
    return SidecarPaths(path_column.take(order))
