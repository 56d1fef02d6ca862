"""xarray's private API, as the xarray engine and the batch loader use it.

:data:`CHECKED` runs from the floor ``pyproject.toml`` declares to the newest release these
uses were checked on (2026.9, with ``tests/test_compat.py``; ``make test-upstream`` checks the
newest release).  Uses with a public
alternative take it outside :data:`CHECKED` (the flag says so); uses without one fail on
import with an error naming xarray's version when the private name is gone.

With a public fallback (slower, same result):

- :func:`construct_dataset` (``Dataset._construct_direct``) builds a Dataset from decoded
  variables without xarray's merge and checks; :data:`CONSTRUCT_DIRECT` False means callers
  go through ``xarray.backends.StoreBackendEntrypoint``.
- :func:`normalize_source_path` (``xarray.backends.common._normalize_path``) is what
  ``open_datatree`` puts in ``encoding["source"]``; :data:`NORMALIZE_PATH` False means
  callers go through ``xarray.open_datatree`` itself.

Without one:

- :func:`variable_data` / :func:`cached_lazy_array` / :func:`set_loaded_data`: a Variable's
  wrapped array (``Variable._data``), read without loading it (``Variable.data`` loads lazy
  arrays), and the ``MemoryCachedArray(CopyOnWriteArray(LazilyIndexedArray(...)))`` chain
  xarray wraps backend arrays in, written as ``Variable.load`` writes it.
- :class:`ZarrStoreAdapter` is xarray's public ``ZarrStore`` with a named hook,
  :meth:`~ZarrStoreAdapter.adapt_variable`, on its undocumented ``open_store_variable``;
  subclasses also override ``get_attrs`` and read ``zarr_group`` (undocumented too).
- :func:`split_basic_key` and :func:`apply_in_memory_key`: what
  ``explicit_indexing_adapter`` does with a key for a backend of basic indexing, in two steps
  (``indexing.decompose_indexer``, ``indexing.apply_indexer`` over ``as_indexable``), so the
  batch loader reads many variables' backend keys in one batch (checked on xarray 2026.9.0).
- :func:`calculate_dimensions` (``xarray.core.variable.calculate_dimensions``, what the Dataset
  constructor computes) and :func:`is_explicitly_indexed`
  (``indexing.ExplicitlyIndexedNDArrayMixin``: xarray's lazy array wrappers), for the
  direct Dataset builder (checked on xarray 2026.9.0).
- :func:`protect_variables` wraps a Dataset's lazy variables as xarray's
  ``_protect_dataset_variables_inplace`` does (``CopyOnWriteArray``, ``MemoryCachedArray``).
- :func:`requested_chunks` reads the ``chunks`` argument of the ``xarray.open_dataset`` /
  ``open_datatree`` / ``open_groups`` call running the engine (xarray keeps it from
  engines) from that call's frame, only to name the extra when Dask is missing; outside
  :data:`CHECKED`, or when no such frame is found, it answers None (xarray's own error then).
- :data:`ZARR_DIMENSION_KEY` and :class:`ZarrArrayWrapper` are ``xarray.backends.zarr``
  names outside ``xarray.backends``' public list; :class:`FrozenDict` is
  ``xarray.core.utils.FrozenDict`` (what data stores return).
- :func:`decode_cf_datetime` and :func:`encode_cf_datetime` are
  ``xarray.coding.times``' converters between CF time numbers and dates (a cube's time
  labels and its ``normalize_time``; checked on xarray 2026.9.0): the numbers as
  ``xr.open_dataset`` decodes them, and encoded in the units asked or, with a warning, in
  others (the public ``xr.coders.CFDatetimeCoder`` wraps them in Variables and is newer than
  the floor).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Mapping
from types import FrameType
from typing import Any

import numpy as np
import xarray as xr
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from xarray.backends.zarr import DIMENSION_KEY, ZarrArrayWrapper, ZarrStore
from xarray.coding import times as xr_times
from xarray.core import indexing
from xarray.core import variable as xr_variable
from xarray.core.utils import FrozenDict
from xarray.core.variable import Variable

__all__ = [
    "CHECKED",
    "CONSTRUCT_DIRECT",
    "NORMALIZE_PATH",
    "ZARR_DIMENSION_KEY",
    "FrozenDict",
    "ZarrArrayWrapper",
    "ZarrStoreAdapter",
    "apply_in_memory_key",
    "cached_lazy_array",
    "calculate_dimensions",
    "is_explicitly_indexed",
    "is_in_memory_or_cached",
    "construct_dataset",
    "decode_cf_datetime",
    "encode_cf_datetime",
    "normalize_source_path",
    "protect_variables",
    "requested_chunks",
    "set_loaded_data",
    "split_basic_key",
    "variable_data",
]

#: The xarray versions these uses are known to work on (checked: 2026.9).
CHECKED = SpecifierSet(">=2025.1,<2026.10")
#: Whether the installed xarray is one of them.
IN_CHECKED = Version(xr.__version__) in CHECKED

try:
    from xarray.backends.common import _normalize_path
except ImportError:  # pragma: no cover - present in every xarray of CHECKED
    _normalize_path = None  # type: ignore[assignment]

#: True when :func:`construct_dataset` may be used.
CONSTRUCT_DIRECT = IN_CHECKED and hasattr(xr.Dataset, "_construct_direct")
#: True when :func:`normalize_source_path` may be used.
NORMALIZE_PATH = IN_CHECKED and _normalize_path is not None

_MISSING = [
    what for what, ok in (
        ("Variable._data", "_data" in getattr(Variable, "__slots__", ())),
        ("ZarrStore.open_store_variable", hasattr(ZarrStore, "open_store_variable")),
        ("MemoryCachedArray.array", "array" in indexing.MemoryCachedArray.__slots__),
        ("indexing._wrap_numpy_scalars", hasattr(indexing, "_wrap_numpy_scalars")),
        ("indexing.decompose_indexer", hasattr(indexing, "decompose_indexer")),
        ("indexing.apply_indexer", hasattr(indexing, "apply_indexer")),
        ("indexing.ExplicitlyIndexedNDArrayMixin",
         hasattr(indexing, "ExplicitlyIndexedNDArrayMixin")),
        ("variable.calculate_dimensions", hasattr(xr_variable, "calculate_dimensions")),
        ("coding.times.decode_cf_datetime", hasattr(xr_times, "decode_cf_datetime")),
        ("coding.times.encode_cf_datetime", hasattr(xr_times, "encode_cf_datetime")),
    ) if not ok
]
if _MISSING:  # pragma: no cover - present in every xarray of CHECKED
    raise ImportError(
        f"xarray {xr.__version__} lacks {', '.join(_MISSING)}, which h5sidecar's xarray engine "
        f"uses (checked on xarray {CHECKED}): install an xarray in that range"
    )

#: The attribute naming a Zarr v2 array's dimensions (``"_ARRAY_DIMENSIONS"``).
ZARR_DIMENSION_KEY: str = DIMENSION_KEY


def construct_dataset(*, variables: dict[Hashable, Variable], coord_names: set[Hashable],
                      dims: dict[Hashable, int], attrs: dict[Hashable, Any] | None,
                      indexes: dict[Hashable, Any], encoding: dict[Hashable, Any],
                      close: Callable[[], None] | None = None) -> xr.Dataset:
    """``Dataset._construct_direct``: a Dataset of exactly these parts, nothing checked or
    merged (only where :data:`CONSTRUCT_DIRECT`); the dicts are taken, not copied."""
    return xr.Dataset._construct_direct(  # type: ignore[no-any-return]
        variables=variables, coord_names=coord_names, dims=dims, attrs=attrs,
        indexes=indexes, encoding=encoding, close=close,
    )


def normalize_source_path(path: str | Any) -> str:
    """What ``xarray.open_datatree`` records as ``encoding["source"]`` for ``path`` (only
    where :data:`NORMALIZE_PATH`)."""
    return _normalize_path(path)  # type: ignore[misc,no-any-return]


def variable_data(var: Variable) -> Any:
    """The array ``var`` wraps, as it is (a lazy backend array stays lazy)."""
    return var._data


def cached_lazy_array(var: Variable) -> indexing.LazilyIndexedArray | None:
    """The ``LazilyIndexedArray`` of a variable wrapped as xarray wraps a backend's array
    without Dask (``MemoryCachedArray(CopyOnWriteArray(LazilyIndexedArray(...)))``, those
    exact types), else None."""
    mem = var._data
    if type(mem) is not indexing.MemoryCachedArray:
        return None
    if type(mem.array) is not indexing.CopyOnWriteArray:
        return None
    lazy = mem.array.array
    return lazy if type(lazy) is indexing.LazilyIndexedArray else None


def set_loaded_data(var: Variable, result: Any) -> None:
    """Give ``var`` (wrapped as :func:`cached_lazy_array` finds it) its loaded values as
    ``Variable.load`` does: the shared in-memory cache (seen by the variable's copies) holds
    them, and the variable holds them itself."""
    result = indexing._wrap_numpy_scalars(result)
    # the MemoryCachedArray is shared by the variable's copies: they see the values too
    var._data.array = indexing.as_indexable(result)  # type: ignore[union-attr]
    var._data = result


def is_in_memory_or_cached(var: Variable) -> bool:
    """True when ``var`` holds a NumPy array, or is wrapped lazily without Dask (a
    ``MemoryCachedArray`` or ``LazilyIndexedArray``): then it has no chunks."""
    return type(var._data) in (indexing.MemoryCachedArray, indexing.LazilyIndexedArray, np.ndarray)


def split_basic_key(key: indexing.ExplicitIndexer, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """``(backend key, in-memory key)``: ``key`` split as ``explicit_indexing_adapter`` splits
    it for a backend of basic indexing; the backend reads the first (a ``BasicIndexer``), then
    :func:`apply_in_memory_key` applies the second to what it read."""
    return indexing.decompose_indexer(key, shape, indexing.IndexingSupport.BASIC)  # type: ignore[no-any-return]


def apply_in_memory_key(values: Any, key: Any) -> Any:
    """``values`` (what the backend read) indexed by the in-memory key of
    :func:`split_basic_key`, as ``explicit_indexing_adapter`` indexes them."""
    return indexing.apply_indexer(indexing.as_indexable(values), key)


def calculate_dimensions(variables: Mapping[Any, Variable]) -> dict[Hashable, int]:
    """The dimensions of a Dataset of ``variables``, as its constructor computes them
    (``ValueError`` when two variables give one dimension two sizes)."""
    return xr_variable.calculate_dimensions(variables)


def is_explicitly_indexed(data: Any) -> bool:
    """Whether ``data`` is one of xarray's explicitly indexed array wrappers (a backend's lazy
    array and the wrappers xarray puts around it), which ``decode_cf_variable`` re-wraps."""
    return isinstance(data, indexing.ExplicitlyIndexedNDArrayMixin)


def decode_cf_datetime(values: np.ndarray, units: str, calendar: str) -> np.ndarray:
    """``values`` in CF ``units`` as dates: ``datetime64`` values, or cftime dates for a
    calendar (or range) NumPy cannot hold; as ``xr.open_dataset`` decodes a time variable."""
    return np.asarray(xr_times.decode_cf_datetime(values, units, calendar))


def encode_cf_datetime(dates: np.ndarray, units: str, calendar: str, dtype: np.dtype
                       ) -> tuple[np.ndarray, str, str]:
    """``(numbers, units, calendar)`` of ``dates``: in ``units`` as ``dtype`` when they hold
    the dates exactly, else in units that do, and a ``UserWarning`` says so."""
    num, out_units, out_calendar = xr_times.encode_cf_datetime(dates, units, calendar,
                                                               dtype=dtype)
    return np.asarray(num), out_units, out_calendar


class ZarrStoreAdapter(ZarrStore):
    """xarray's ``ZarrStore`` whose variables pass through :meth:`adapt_variable`."""

    def open_store_variable(self, name: str) -> Variable:
        return self.adapt_variable(name, super().open_store_variable(name))

    def adapt_variable(self, name: str, var: Variable) -> Variable:
        """The variable ``name`` as xarray's ZarrStore opened it, to be replaced."""
        return var


def protect_variables(ds: xr.Dataset, cache: bool) -> None:
    """Wrap every variable of ``ds`` without an index copy-on-write, and cached in memory once
    read when ``cache`` (what xarray's openers do to a backend's Dataset)."""
    indexed = ds.xindexes
    for name, variable in ds.variables.items():
        if name not in indexed:
            data: Any = indexing.CopyOnWriteArray(variable._data)
            if cache:
                data = indexing.MemoryCachedArray(data)
            variable.data = data


#: xarray's openers whose ``chunks`` argument :func:`requested_chunks` reads.
_OPENERS = frozenset({"open_dataset", "open_datatree", "open_groups"})


def requested_chunks(max_depth: int = 12) -> Any:
    """The ``chunks`` given to the ``xarray.backends.api`` opener that called the engine, or
    None (not given, no such call within ``max_depth`` frames, xarray outside CHECKED, or a
    chunk manager other than Dask asked for with ``chunked_array_type``).
    """
    if not IN_CHECKED:  # pragma: no cover - the newest release is tested
        return None
    frame: FrameType | None = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        if (frame.f_code.co_name in _OPENERS
                and frame.f_globals.get("__name__") == "xarray.backends.api"):  # fmt: skip
            manager = frame.f_locals.get("chunked_array_type")
            return frame.f_locals.get("chunks") if manager in (None, "dask") else None
        frame = frame.f_back
    return None
