"""The cheap ways the engine builds Datasets and DataTrees give what xarray's generic ways give.

* Each group's Dataset (:func:`h5sidecar.read.xarray._dataset_build.store_dataset`) equals xarray's
  ``StoreBackendEntrypoint().open_dataset`` of the same data store -- variables in the same
  order, their types, dimensions, attributes with their types, encodings, coordinates, no
  indexes, values -- with and without CF decoding, on the corpus and an ATL03-like granule.
* A whole DataTree (``h5sidecar.open_datatree``: those Datasets, indexed and assembled once,
  see :mod:`h5sidecar.read.xarray._datatree_direct`) equals ``xarray.open_datatree``'s over an engine that
  opens groups with ``StoreBackendEntrypoint`` and assembles them with ``DataTree.from_dict``,
  node by node, for ``chunks=None`` and ``{}``, with and without decoding and default indexes,
  on granules with dimension clashes; its values equal h5py's.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr
from xarray.backends.store import StoreBackendEntrypoint

import h5sidecar
from h5sidecar.indexer import index_granule
from h5sidecar.read import SidecarStore
from h5sidecar.read.xarray import _datatree as _groups
from h5sidecar.read.xarray import _zarr_data_store as _xr_store
from h5sidecar.read.xarray._dataset_build import store_dataset
from h5sidecar.read.xarray._zarr_data_store import open_data_store, open_zarr_store
from h5sidecar.references import GranuleRefs, write_parquet, write_refs
from tests._granules import refs_for
from tests.conftest import corpus_hdf5_names
from tests.read.xarray.test_refs_open import _encoding, _typed, assert_same_dataset

#: what xarray passes the engine for ``decode_cf=False``, the default, and mixed options
RAW = {"mask_and_scale": False, "decode_times": False, "concat_characters": False,
       "decode_coords": False, "decode_timedelta": False, "use_cftime": False}
DECODINGS: tuple[dict[str, Any], ...] = (
    {},
    RAW,
    {**RAW, "use_cftime": None, "decode_timedelta": None},
    {**RAW, "decode_coords": True},
    {"mask_and_scale": False, "decode_times": False},
)


def _wrappers(var: xr.Variable) -> list[type]:
    """The classes of a variable's lazy-array wrappers, outermost first."""
    out, data = [type(var)], var._data
    while True:
        out.append(type(data))
        if not hasattr(data, "array"):
            return out
        data = data.array


def _same_structure(ours: xr.Dataset, theirs: xr.Dataset, where: str) -> None:
    """What :func:`assert_same_dataset` leaves out: variable classes and their wrappers (what
    xarray caches, what is copy-on-write), coordinate names, sizes, indexes, the closer."""
    assert {k: _wrappers(v) for k, v in ours.variables.items()} == {
        k: _wrappers(v) for k, v in theirs.variables.items()}, where
    assert ours._coord_names == theirs._coord_names, where
    assert dict(ours.sizes) == dict(theirs.sizes), where
    assert list(ours.xindexes) == list(theirs.xindexes), where
    assert (ours._close is None) == (theirs._close is None), where


def _check_store(store: SidecarStore, native: bool = True) -> int:
    """Every group of ``store``, every decoding: store_dataset == StoreBackendEntrypoint."""
    opened = 0
    for group in store.refs.groups:
        for decoding in DECODINGS:
            where = f"{group!r} {decoding}"
            out: list[Any] = []
            for open_ in (store_dataset, StoreBackendEntrypoint().open_dataset):
                zstore = (open_data_store(store, group) if native
                          else open_zarr_store(store, group))
                try:
                    with store.native.opening():
                        out.append(open_(zstore, **decoding))
                except (ValueError, KeyError, TypeError, Warning) as exc:  # both fail alike
                    out.append(exc)
            ours, theirs = out
            if isinstance(theirs, Exception):
                assert type(ours) is type(theirs), (where, ours, theirs)
                continue
            assert not isinstance(ours, Exception), (where, ours)
            assert_same_dataset(ours, theirs, where)
            _same_structure(ours, theirs, where)
            opened += 1
    return opened


@pytest.mark.corpus
@pytest.mark.xdist_group("corpus")
@pytest.mark.parametrize("name", corpus_hdf5_names())
def test_group_datasets_equal_xarrays_on_the_corpus(name: str, corpus_dir: Path,
                                                    tmp_path: Path) -> None:
    refs = index_granule(str(corpus_dir / "files" / name))
    store = SidecarStore(write_parquet(refs, tmp_path / "refs.parq"))
    assert _check_store(store) or not refs.arrays


@pytest.mark.slow
def test_group_datasets_equal_xarrays_on_atl03(atl03_refs: GranuleRefs, tmp_path: Path) -> None:
    store = SidecarStore(write_parquet(atl03_refs, tmp_path / "refs.parq"))
    assert _check_store(store) >= len(DECODINGS) * 130


def test_group_datasets_equal_xarrays_through_zarr(small_refs: GranuleRefs,
                                                   tmp_path: Path) -> None:
    """The zarr path (``native=False``: xarray's ZarrStore) gets the same Datasets too."""
    store = SidecarStore(write_parquet(small_refs, tmp_path / "refs.parq"))
    assert _check_store(store, native=False) >= len(DECODINGS)


def test_undecoded_variables_get_xarrays_encoding(small_refs: GranuleRefs) -> None:
    """Without decoding, a variable keeps its attributes (``_FillValue``, ``scale_factor``...)
    and gains ``encoding["dtype"]``, as with xarray's decoding; a dropped variable is gone."""
    store = SidecarStore(small_refs)
    group = "gt1l/heights"
    ds = store_dataset(open_data_store(store, group), drop_variables="h_ph", **RAW)
    assert "h_ph" not in ds.variables
    meta = {p.rpartition("/")[2]: a.meta for p, a in small_refs.arrays.items()
            if p.rpartition("/")[0] == group}
    assert set(ds.variables) == set(meta) - {"h_ph"}
    for name, var in ds.variables.items():
        assert var.encoding["dtype"] == var.dtype == meta[name].numpy_dtype.newbyteorder("="), name
        assert set(var.attrs) == set(meta[name].attrs), name


# -- whole trees ------------------------------------------------------------------------------
def _write_clashing_tree(path: Path) -> Path:
    """Groups with same-named dimension scales of other lengths and values, an intermediate
    group without variables, CF times and a packed variable."""
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "clashes"
        for group, n in (("g", 3), ("g/a", 5), ("g/a/b", 3), ("c/d", 4)):
            g = f.require_group(group)
            t = g.create_dataset("time", data=np.arange(n) * 10.0 + len(group))
            t.make_scale("time")
            v = g.create_dataset("v", data=np.arange(n, dtype="i2") + n)
            v.dims[0].attach_scale(t)
            t.attrs["units"] = "seconds since 2020-01-01"
            v.attrs["scale_factor"] = np.float32(0.5)
            v.attrs["_FillValue"] = np.int16(-1)
            g.attrs["n"] = n
    return path


def _old_way(sidecar: Any, options: dict[str, Any]) -> xr.DataTree:
    """xarray.open_datatree over the engine opening groups with StoreBackendEntrypoint and
    assembling them with DataTree.from_dict."""
    def generic(zstore: Any, **kwargs: Any) -> xr.Dataset:
        return StoreBackendEntrypoint().open_dataset(zstore, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(_xr_store, "store_dataset", generic)
        m.setattr(_groups, "assemble_tree", xr.DataTree.from_dict)
        return xr.open_datatree(sidecar, engine="h5sidecar", **options)


OPTIONS: tuple[dict[str, Any], ...] = (
    {"chunks": None},
    {"chunks": None, "decode_cf": False, "create_default_indexes": False},
    {"chunks": None, "decode_cf": False},
    {"chunks": None, "mask_and_scale": False, "cache": False, "drop_variables": "v"},
    {"chunks": None, "group": "g"},
    {"chunks": {}},
    {"chunks": {}, "decode_cf": False, "create_default_indexes": False},
)


def _assert_same_tree(ours: xr.DataTree, theirs: xr.DataTree) -> None:
    assert [n.path for n in ours.subtree] == [n.path for n in theirs.subtree]
    for a, b in zip(ours.subtree, theirs.subtree, strict=True):
        assert _encoding(a.encoding) == _encoding(b.encoding), a.path
        assert _typed(a.attrs) == _typed(b.attrs), a.path
        assert list(a.xindexes) == list(b.xindexes), a.path
        assert list(a._node_indexes) == list(b._node_indexes), a.path
        assert (a._close is None) == (b._close is None), a.path  # closing the tree closes it
        ds_a, ds_b = a.to_dataset(inherit=False), b.to_dataset(inherit=False)
        assert_same_dataset(ds_a, ds_b, a.path)
        _same_structure(ds_a, ds_b, a.path)
    xr.testing.assert_identical(ours, theirs)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: repr(o))
def test_tree_equals_xarrays_tree(options: dict[str, Any], tmp_path: Path) -> None:
    path = _write_clashing_tree(tmp_path / "clash.h5")
    sidecar = write_refs(refs_for(path), tmp_path / "clash.h5.json", format="json")
    ours = h5sidecar.open_datatree(sidecar, **options)
    if "group" not in options:
        assert ours["g/a/b"].encoding["h5sidecar_renamed"] == {"time_b": "time"}
    _assert_same_tree(ours, _old_way(sidecar, options))
    if options.get("decode_cf") is False:  # raw values: h5py's
        with h5py.File(path, "r") as f:
            for node in ours.subtree:
                renamed = node.encoding.get("h5sidecar_renamed", {})
                for name, var in node.to_dataset(inherit=False).variables.items():
                    src = f"{node.path.strip('/')}/{renamed.get(name, name)}".lstrip("/")
                    np.testing.assert_array_equal(var.values, f[src][()], err_msg=src)


@pytest.mark.parametrize("options", OPTIONS[:2], ids=lambda o: repr(o))
def test_atl03_tree_equals_xarrays_tree(options: dict[str, Any], atl03_refs: GranuleRefs,
                                       tmp_path: Path) -> None:
    sidecar = write_refs(atl03_refs, tmp_path / "a.h5.json", format="json")
    ours = h5sidecar.open_datatree(sidecar, **options)
    theirs = _old_way(sidecar, options)
    assert sum(len(n.to_dataset(inherit=False).variables) for n in ours.subtree) == len(
        atl03_refs.arrays)
    _assert_same_tree(ours, theirs)


@pytest.mark.parametrize("options", OPTIONS[:2], ids=lambda o: repr(o))
def test_without_xarrays_private_pieces_the_tree_is_the_same(
        options: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An xarray without ``Dataset._construct_direct`` / ``_normalize_path`` (private API)
    gets xarray's own way, with the same result: nothing breaks on an upgrade."""
    from h5sidecar.read.xarray import _dataset_build as _xr_dataset
    from h5sidecar.read.xarray import _datatree_direct as _tree_open

    path = _write_clashing_tree(tmp_path / "clash.h5")
    sidecar = write_refs(refs_for(path), tmp_path / "clash.h5.json", format="json")
    direct = h5sidecar.open_datatree(sidecar, **options)
    monkeypatch.setattr(_xr_dataset, "DIRECT", False)
    monkeypatch.setattr(_tree_open, "AVAILABLE", False)
    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the direct way was taken")

    # only the direct ways call these
    monkeypatch.setattr(_xr_dataset, "calculate_dimensions", refused)
    monkeypatch.setattr(_tree_open, "open_tree_direct", refused)
    fallback = h5sidecar.open_datatree(sidecar, **options)
    _assert_same_tree(fallback, direct)


# -- typed attributes -------------------------------------------------------------------------
class _Float(float):
    """A float the fast path of ``_lossless`` does not take (it checks exact types)."""


class _Int(int):
    """An int the fast path of ``_lossless`` does not take."""


NUMBERS = (0, 1, -1, 127, 128, 255, 256, -129, 32767, 32768, 65535, 70000, 2**31, 2**32,
           2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 0.0, -0.0, 0.5, 1.5, 0.1, 1e10,
           3.5e38, 1e300, -1e300, float("nan"), float("inf"), -float("inf"), 16777217.0, 1e-45,
           3.4028234663852886e38)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning")
@pytest.mark.parametrize("dtype", ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4",
                                   "f8", ">i2", ">f4"])
def test_typed_number_attributes_as_the_array_path(dtype: str) -> None:
    """A CF attribute that is one Python number takes a cheaper path to its type: the same
    value, NumPy type and refusals as the general (array) path."""
    from h5sidecar.references._typed_attrs import _lossless

    kept = 0
    for value in NUMBERS:
        fast = _lossless(value, np.dtype(dtype))
        slow = _lossless(_Float(value) if isinstance(value, float) else _Int(value),
                         np.dtype(dtype))
        assert (fast is None) == (slow is None), (value, dtype, fast, slow)
        if fast is not None:
            assert type(fast) is type(slow), (value, dtype, fast, slow)
            assert fast == slow or (np.isnan(fast) and np.isnan(slow)), (value, dtype)
            kept += 1
    assert kept >= 3


# -- xarray's peeks at CF times ----------------------------------------------------------------
def test_time_peeks_served_from_one_batch(atl03_refs: GranuleRefs, tmp_path: Path) -> None:
    """The first and last values xarray peeks at in every CF time variable while it opens the
    groups come from one batch read before (no blocking read each), and the tree is the same
    as when xarray reads them itself."""
    from h5sidecar.read.native import _batch_reader as _batch

    sidecar = write_refs(atl03_refs, tmp_path / "a.h5.json", format="json")
    times = [p for p, a in atl03_refs.arrays.items()
             if " since " in str(a.meta.attrs.get("units", ""))]
    assert len(times) >= 10
    calls: list[int] = []  # reads that go to the I/O loop (held whole arrays do not)
    real = _batch.NativeReader.read

    async def counted(self: Any, items: Any) -> Any:
        calls.append(len(items))
        return await real(self, items)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(_batch.NativeReader, "read", counted)
        ours = h5sidecar.open_datatree(sidecar, chunks=None)
        held = list(calls)
        calls.clear()
        m.setattr(_groups, "held_peeks", lambda reader, boxes: contextlib.nullcontext())
        theirs = h5sidecar.open_datatree(sidecar, chunks=None)
    assert len(held) <= 3 and max(held) >= len(times), held  # the peeks: one call
    assert len(calls) >= len(times), calls  # xarray alone: at least one read per variable
    _assert_same_tree(ours, theirs)
    assert ours["gt1l/heights"]["delta_time"].dtype.kind == "M"  # decoded with its peeks


def test_reads_served_from_held_boxes() -> None:
    """A read inside a held box is that box's values (a copy); any other read is not served."""
    from h5sidecar.read.xarray._lazy_array import _from_boxes

    values = np.arange(12.0).reshape(3, 4)
    boxes = [((10, 4), values)]  # rows 10-12, columns 4-7 of a (20, 8) array
    shape = (20, 8)
    got = _from_boxes(boxes, (slice(11, 12, 1), slice(None)), shape)
    assert got is None  # columns 0-3 are outside the box
    got = _from_boxes(boxes, (slice(11, 13, 1), slice(5, 8)), shape)
    assert got is not None
    np.testing.assert_array_equal(got, values[1:3, 1:4])
    got[...] = -1  # a copy: the held values stay
    assert values[1, 1] == 5.0
    got = _from_boxes(boxes, (12, np.int64(7)), shape)
    assert got is not None and got.shape == () and got == values[2, 3]
    for key in ((13, 4), (slice(9, 11), 4), (slice(10, 12, 2), 4), (10,), (slice(12, 10), 4)):
        assert _from_boxes(boxes, key, shape) is None, key
    whole = [((0,), np.arange(5))]
    np.testing.assert_array_equal(_from_boxes(whole, (slice(None),), (5,)), np.arange(5))
    np.testing.assert_array_equal(_from_boxes(whole, (slice(-1, None),), (5,)), [4])
