"""Opening groups straight from the references (``read.xarray._refs_data_store.RefsGroupStore``) gives xarray
exactly what opening them through xarray's ZarrStore gave: the same variables in the same
order, dimensions, attributes (with their types), encodings, coordinates and values -- on the
whole corpus and on an ATL03-like granule -- and values equal to h5py's and to
xarray + h5netcdf's."""

from __future__ import annotations

import json
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
from h5sidecar.read.xarray._lazy_array import SidecarArray
from h5sidecar.read.xarray._refs_data_store import RefsGroupStore, group_members
from h5sidecar.read.xarray._zarr_data_store import open_data_store, open_zarr_store
from h5sidecar.references import GranuleRefs, write_parquet
from h5sidecar.workflows.checks._cfcheck import open_truth
from tests.conftest import corpus_hdf5_names

DECODINGS = ({}, {"mask_and_scale": False, "decode_times": False})


def _open(zstore: Any, store: SidecarStore, **decoding: Any) -> xr.Dataset:
    with store.native.opening():
        return StoreBackendEntrypoint().open_dataset(zstore, **decoding)


def _both(store: SidecarStore, group: str, **decoding: Any) -> tuple[Any, Any]:
    """(dataset or exception) through the references, and through xarray's ZarrStore."""
    out = []
    for make in (lambda: open_data_store(store, group), lambda: open_zarr_store(store, group)):
        try:
            out.append(_open(make(), store, **decoding))
        except (ValueError, KeyError, TypeError, Warning) as exc:  # both must fail alike
            out.append(exc)
    return out[0], out[1]


def _backend_array(var: xr.Variable) -> Any:
    data = var._data
    while hasattr(data, "array"):  # xarray's lazy indexing / decoding wrappers
        data = data.array
    return data


def assert_same_dataset(ours: xr.Dataset, zarr: xr.Dataset, where: str) -> None:
    """Everything xarray exposes of a Dataset is equal, attribute types included."""
    assert list(ours.variables) == list(zarr.variables), where
    assert set(ours.coords) == set(zarr.coords), where
    assert ours.encoding == zarr.encoding, where
    assert _typed(ours.attrs) == _typed(zarr.attrs), where
    for name, var in ours.variables.items():
        other = zarr.variables[name]
        assert var.dims == other.dims and var.dtype == other.dtype, (where, name)
        assert _typed(var.attrs) == _typed(other.attrs), (where, name)
        assert _encoding(var.encoding) == _encoding(other.encoding), (where, name)
        assert type(_backend_array(var)) is type(_backend_array(other)), (where, name)
        # values as bytes (structured arrays with NaN fields are never ==), or the same error
        for part, other_part in zip(_parts(var), _parts(other), strict=True):
            assert _bytes_or_error(part) == _bytes_or_error(other_part), (where, name)
    readable = [n for n, v in ours.variables.items()
                if v.dtype.kind != "V" and v.nbytes <= _WHOLE_BYTES
                and not isinstance(_bytes_or_error(v), str)]  # fmt: skip
    xr.testing.assert_identical(ours[readable], zarr[readable])


#: Variables larger than this are compared at both ends, not whole (a corpus file holds a 2 GiB
#: fill-only array: reading it whole for every decoding, twice, took minutes)
_WHOLE_BYTES = 64 << 20


def _parts(var: xr.Variable) -> list[xr.Variable]:
    """``var`` itself, or its first and last ~1 MiB along the first axis when it is large."""
    if var.nbytes <= _WHOLE_BYTES or var.ndim == 0:
        return [var]
    n = max(1, (1 << 20) // max(1, var.nbytes // var.shape[0]))
    return [var[:n], var[-n:]]


def _bytes_or_error(var: xr.Variable) -> bytes | str:
    try:
        values = var.values
    except (TypeError, h5sidecar.errors.ChunkDecodeError) as exc:
        # xarray cannot present some padded compounds; a corpus file has a corrupt chunk
        return type(exc).__name__
    if values.dtype.kind in "OT":
        return repr(values.tolist()).encode()
    return bytes(values.tobytes())


def _typed(attrs: dict[str, Any]) -> str:
    """Attributes with every value's type (xarray's decoded dtype depends on them)."""
    def one(v: Any) -> Any:
        if isinstance(v, np.ndarray | np.generic):
            return [str(v.dtype), np.asarray(v).tolist()]
        if isinstance(v, list | tuple):
            return [type(v).__name__, [one(x) for x in v]]
        if isinstance(v, dict):
            return {k: one(x) for k, x in v.items()}
        return [type(v).__name__, repr(v) if isinstance(v, float) else v]  # nan: repr
    return json.dumps({k: one(v) for k, v in attrs.items()}, sort_keys=True, default=repr)


def _encoding(enc: dict[str, Any]) -> list[Any]:
    out = []
    for k, v in enc.items():
        if k in ("compressors", "filters"):
            v = [c.get_config() for c in v]
        elif isinstance(v, np.dtype | np.generic | float):
            v = repr(v)  # nan == nan
        out.append((k, v))
    return out


def _check_granule(refs: GranuleRefs, tmp_path: Path) -> int:
    """Every group of a granule, both ways, with and without CF decoding; returns how many
    groups opened."""
    store = SidecarStore(write_parquet(refs, tmp_path / "refs.parq"))
    opened = 0
    for group in store.refs.groups:
        for decoding in DECODINGS:
            ours, zarr = _both(store, group, **decoding)
            where = f"{group!r} {decoding}"
            if isinstance(zarr, Exception):
                assert type(ours) is type(zarr), (where, ours, zarr)
                continue
            assert not isinstance(ours, Exception), (where, ours)
            assert_same_dataset(ours, zarr, where)
            opened += 1
    return opened


@pytest.mark.corpus
@pytest.mark.xdist_group("corpus")
@pytest.mark.parametrize("name", corpus_hdf5_names())
def test_same_datasets_as_zarr_store_on_the_corpus(name: str, corpus_dir: Path,
                                                   tmp_path: Path) -> None:
    refs = index_granule(str(corpus_dir / "files" / name))
    opened = _check_granule(refs, tmp_path)
    assert opened or not refs.arrays


@pytest.mark.slow
def test_same_datasets_as_zarr_store_on_atl03(atl03_refs: GranuleRefs, tmp_path: Path) -> None:
    assert _check_granule(atl03_refs, tmp_path) >= 2 * 130


@pytest.mark.slow
def test_tree_values_equal_h5py_and_h5netcdf(atl03_refs: GranuleRefs, atl03_h5: Path) -> None:
    tree = h5sidecar.open_datatree(SidecarStore(atl03_refs), chunks=None)
    h5sidecar.load(tree)
    compared = 0
    with h5py.File(atl03_h5) as f:
        for node in tree.subtree:
            group = node.path.strip("/")
            ds = node.to_dataset(inherit=False)
            # xarray + h5netcdf, its dimension sizes computed once (tests/_matrix.py)
            pair = open_truth(atl03_h5, group, frozen_sizes=True)
            assert pair is not None, group
            truth = pair[0]
            for name, var in ds.variables.items():
                if name not in truth.variables:
                    continue  # a clash renamed by open_datatree (see read.xarray._datatree)
                want = truth[name].values
                np.testing.assert_array_equal(var.values, want, err_msg=f"{group}/{name}")
                if var.dtype.kind in "biuf" and not var.attrs.get("scale_factor"):
                    raw = f[f"{group}/{name}".strip("/")][()]
                    if "_FillValue" not in var.encoding:
                        np.testing.assert_array_equal(var.values, raw)
                compared += 1
    assert compared > 800


def test_every_variable_read_natively(atl03_refs: GranuleRefs) -> None:
    """No zarr hierarchy is built to open a granule whose arrays the batch reader decodes."""
    store = SidecarStore(atl03_refs)
    tree = h5sidecar.open_datatree(store, chunks=None, create_default_indexes=False)
    assert store._root is None  # never asked for zarr's root group
    kinds = {type(_backend_array(v)) for node in tree.subtree for v in node.variables.values()}
    assert kinds == {SidecarArray}


def test_group_members_and_missing_group(atl03_refs: GranuleRefs) -> None:
    members = group_members(atl03_refs)
    assert sum(len(m) for m in members.values()) == len(atl03_refs.arrays)
    assert members["gt1l/heights"] == [
        p for p in atl03_refs.arrays if p.rpartition("/")[0] == "gt1l/heights"
    ]
    store = SidecarStore(atl03_refs)
    assert isinstance(open_data_store(store, "gt1l"), RefsGroupStore)
    with pytest.raises(h5sidecar.errors.NotIndexedError, match="no group"):
        open_data_store(store, "gt9x")


def test_groups_opened_one_at_a_time_sort_the_arrays_once(
    atl03_refs: GranuleRefs, atl03_h5: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``open_dataset`` of every group in turn finds each group's members from one pass over
    the granule's arrays per store (not one per group); the Datasets hold the group's arrays
    with h5py's values."""
    from h5sidecar.read.xarray import _zarr_data_store as _xr_store

    calls = []
    real = _xr_store.group_members

    def counted(refs: GranuleRefs, groups: Any = None) -> dict[str, list[str]]:
        calls.append(groups)
        return real(refs, groups)

    monkeypatch.setattr(_xr_store, "group_members", counted)
    store = SidecarStore(atl03_refs)
    groups = sorted(atl03_refs.groups)
    assert len(groups) > 100
    opened = {g: xr.open_dataset(store, engine="h5sidecar", group=g or None, chunks=None,
                                 decode_cf=False, create_default_indexes=False)
              for g in groups}
    assert calls == [None]
    with h5py.File(atl03_h5, "r") as f:
        for g in ("gt1l/heights", "orbit_info"):
            want = {p.rpartition("/")[2] for p in atl03_refs.arrays if p.rpartition("/")[0] == g}
            assert set(opened[g].variables) == want
            for name, v in opened[g].variables.items():
                np.testing.assert_array_equal(v.values, f[f"{g}/{name}"][()], err_msg=name)
