"""Array references whose metadata is in memory and whose chunk manifest loads on first use.

:class:`LazyArrayRefs` stands in for an :class:`~h5sidecar.references.ArrayRefs` and asks a
:class:`ManifestLoader` for its manifest when first needed; the Parquet reader
(:mod:`~h5sidecar.references.parquet_sidecar._parquet_lazy`) and the lazy JSON reader
(:mod:`~h5sidecar.references.json_sidecar._json_lazy`) are its two loaders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._manifest import ChunkManifest
from h5sidecar.references._model import ArrayRefs

__all__ = ["LazyArrayRefs", "ManifestLoader"]


class ManifestLoader(Protocol):
    """Where a :class:`LazyArrayRefs` gets its manifest from (a sidecar reader's loader)."""

    def load(self, path: str) -> tuple[ChunkManifest, np.ndarray | None]:
        """``(manifest, checksums or None)`` of the array ``path`` (cached by the loader)."""
        ...

    def is_loaded(self, path: str) -> bool:
        """True when ``path``'s manifest is in the loader's cache."""
        ...

    def resident_nbytes(self, path: str) -> int:
        """Bytes of ``path``'s manifest held in the loader's cache (0 when not loaded)."""
        ...

    def urls(self, path: str) -> Sequence[str]:
        """The URLs of ``path``'s manifest, known without loading it."""
        ...


class LazyArrayRefs(ArrayRefs):
    """An :class:`ArrayRefs` whose metadata is in memory and whose manifest loads on first use.

    Reading ``meta``, ``status``, ``note``, :attr:`urls` or :meth:`zarray_fill_value` never
    loads anything; ``manifest`` and ``checksums`` ask the loader, which fetches the array's
    record files once and keeps them in a byte-bounded cache (an evicted manifest is fetched
    again when next needed).  Pickles without its manifest: a Dask worker loads what it reads.
    """

    # The parent's ``manifest``/``checksums`` slots stay unset: the properties below shadow them.
    __slots__ = ("_fill", "_loader")
    _fill: Any
    _loader: ManifestLoader

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # dataclasses.replace() passes every field of ArrayRefs (``manifest`` included): what it
        # builds is a plain ArrayRefs with the manifest given, no longer lazy
        if "manifest" in kwargs:
            return ArrayRefs(*args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        path: str,
        meta: ArrayMeta,
        loader: ManifestLoader,
        *,
        status: Literal["virtual", "inlined"] = "virtual",
        note: str = "",
        zarray_fill: Any = None,
    ) -> None:
        if path.startswith("/") or path.endswith("/") or not path:
            raise InvalidReferenceError(f"array path {path!r} must be relative and non-empty")
        for name, value in (("path", path), ("meta", meta), ("status", status), ("note", note)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_loader", loader)
        object.__setattr__(self, "_fill", zarray_fill)

    @property  # type: ignore[override]
    def manifest(self) -> ChunkManifest:
        """The chunk manifest, fetched on first use (blocking I/O)."""
        return self._loader.load(self.path)[0]

    @property  # type: ignore[override]
    def checksums(self) -> np.ndarray | None:
        """Chunk checksums (or None), loaded with the manifest."""
        return self._loader.load(self.path)[1]

    @property
    def urls(self) -> Sequence[str]:
        """The manifest's URLs, from the extras (no I/O)."""
        return self._loader.urls(self.path)

    @property
    def urls_are_members(self) -> bool:
        """True when the extras say the URLs are the cube's members' (no I/O)."""
        from_members = getattr(self._loader, "from_members", None)  # a cube's Parquet loader
        return bool(from_members is not None and from_members(self.path))

    @property
    def manifest_loaded(self) -> bool:
        """True when the manifest is in the loader's cache."""
        return self._loader.is_loaded(self.path)

    @property
    def resident_nbytes(self) -> int:
        """Bytes of this array's manifest in the loader's cache now."""
        return self._loader.resident_nbytes(self.path)

    def load(self) -> None:
        """Load the manifest now (blocking I/O: async callers run this in a thread)."""
        self._loader.load(self.path)

    def zarray_fill_value(self) -> Any:
        """The ``fill_value`` the sidecar's ``.zarray`` persists (what the writer computed)."""
        return self._fill

    def __repr__(self) -> str:
        state = "loaded" if self.manifest_loaded else "not loaded"
        return f"LazyArrayRefs(path={self.path!r}, meta={self.meta!r}, manifest {state})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _lazy_array,
            (self.path, self.meta, self._loader, self.status, self.note, self._fill),
        )


def _lazy_array(
    path: str, meta: ArrayMeta, loader: ManifestLoader, status: Any, note: str, fill: Any
) -> LazyArrayRefs:
    return LazyArrayRefs(path, meta, loader, status=status, note=note, zarray_fill=fill)
