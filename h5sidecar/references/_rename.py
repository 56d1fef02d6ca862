"""An array's references under another path (a batch over many granules gathers their arrays
under distinct paths into one reference set)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from h5sidecar.references._lazy_refs import LazyArrayRefs
from h5sidecar.references._manifest import ChunkManifest
from h5sidecar.references._model import ArrayRefs

__all__ = ["renamed"]


class _Renamed:
    """The :class:`ManifestLoader` of an array under another path: asks the original array."""

    def __init__(self, original: LazyArrayRefs) -> None:
        self._original = original

    def load(self, path: str) -> tuple[ChunkManifest, np.ndarray | None]:
        return self._original.manifest, self._original.checksums

    def is_loaded(self, path: str) -> bool:
        return self._original.manifest_loaded

    def resident_nbytes(self, path: str) -> int:
        return 0  # counted by the original's loader

    def urls(self, path: str) -> Sequence[str]:
        return self._original.urls


def renamed(arr: ArrayRefs, path: str) -> ArrayRefs:
    """``arr`` under another ``path``, its manifest not loaded when it was not.

    A batch over many granules gathers their arrays under distinct paths into one reference
    set; a lazily held manifest then still loads when (and where) the batch reader needs it,
    through the original array's loader.
    """
    if isinstance(arr, LazyArrayRefs):
        return LazyArrayRefs(path, arr.meta, _Renamed(arr), status=arr.status, note=arr.note,
                             zarray_fill=arr.zarray_fill_value())
    return ArrayRefs(path, arr.meta, arr.manifest, arr.status, arr.note, arr.checksums)
