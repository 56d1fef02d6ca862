"""Dimension names and coordinates equal h5netcdf's through every reader, when groups at
several levels define dimensions of one name.

The truth is ``xr.open_dataset(file, engine="h5netcdf", phony_dims="access", group=g)``: each
variable's dimension names, whether it is a coordinate, whether it has an index.  The readers:
plain xarray ``engine="zarr"`` over fsspec's ``reference://`` (JSON and Parquet sidecars), our
engine ``engine="h5sidecar"`` (JSON and Parquet), and the DataTrees of plain xarray and
``h5sidecar.open_datatree`` node by node.  The one difference allowed is the one xarray forces
(:mod:`h5sidecar.workflows.checks._dimcheck`): a subgroup's dimension of another length than an
ancestor's of the same name is renamed in the subgroup; each case below says where.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import h5netcdf
import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr
from fsspec.implementations.reference import LazyReferenceMapper

import h5sidecar
from h5sidecar.indexer import index_granule
from h5sidecar.references import GranuleRefs, write_json, write_parquet
from h5sidecar.workflows import verify_refs
from h5sidecar.workflows.checks._dimcheck import dimension_differences, outer_lengths
from tests._matrix import groups_of


def _scale(f: h5py.Group, name: str, n: int) -> h5py.Dataset:
    d = f.create_dataset(name, data=np.arange(n, dtype="f8"))
    d.make_scale(name.rpartition("/")[2])
    return d


def _var(f: h5py.Group, name: str, *scales: h5py.Dataset | int) -> None:
    """A float variable with a scale attached to each axis (an int: an axis of that length
    without a scale)."""
    shape = [s if isinstance(s, int) else s.shape[0] for s in scales]
    d = f.create_dataset(name, data=np.ones(shape, "f4"))
    for i, s in enumerate(scales):
        if not isinstance(s, int):
            d.dims[i].attach_scale(s)


# -- the files: each writer, and the groups where the subgroup's names must fall back ----------
def atl14(path: Path) -> set[str]:
    """NASA ATL14: ``x``, ``y`` scales in the root, ``tile_stats/`` with its own ``x`` (11) and
    ``y`` (7), written first (creation order is the link order)."""
    with h5py.File(path, "w", track_order=True) as f:
        tx, ty = _scale(f, "tile_stats/x", 11), _scale(f, "tile_stats/y", 7)
        _var(f, "tile_stats/n", ty, tx)
        x, y = _scale(f, "x", 5), _scale(f, "y", 4)
        _var(f, "h", y, x)
        _var(f, "h_sigma", y, x)
    return {"tile_stats"}


def subgroup_uses_root_scale(path: Path) -> set[str]:
    """A subgroup variable attached to the root's scale, beside the subgroup's own ``y``."""
    with h5py.File(path, "w") as f:
        x = _scale(f, "x", 5)
        _var(f, "v", x)
        y = _scale(f, "a/y", 3)
        _var(f, "a/w", y, x)
        _var(f, "a/u", x)
    return set()


def three_levels(path: Path) -> set[str]:
    """A scale ``x`` at three levels, of three lengths, and an unscaled array of the root's
    length in the deepest group."""
    with h5py.File(path, "w") as f:
        _var(f, "a/v", _scale(f, "a/x", 11))
        _var(f, "a/b/v", _scale(f, "a/b/x", 7))
        _var(f, "a/b/same", 5)  # a phony name of a/b, not the root's "x"
        _var(f, "v", _scale(f, "x", 5))
    return {"a", "a/b"}


def three_levels_same_length(path: Path) -> set[str]:
    """``x`` at three levels, the deepest of the root's length: only the middle one differs."""
    with h5py.File(path, "w") as f:
        _var(f, "a/v", _scale(f, "a/x", 11))
        _var(f, "a/b/v", _scale(f, "a/b/x", 5))
        _var(f, "v", _scale(f, "x", 5))
    return {"a"}


def netcdf4_python(path: Path) -> set[str]:
    """netCDF4-python (creation order kept): group ``a`` redefines ``x`` before the root's
    variables are written; ``a/b`` uses ``a``'s ``x`` and the root's ``t``."""
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("t", 3)
        a = nc.createGroup("a")
        a.createDimension("x", 11)
        a.createVariable("x", "f8", ("x",))[:] = np.arange(11.0)
        a.createVariable("w", "f4", ("t", "x"))[:] = np.ones((3, 11))
        b = a.createGroup("b")
        b.createVariable("u", "f4", ("x", "t"))[:] = np.ones((11, 3))
        nc.createDimension("x", 5)
        nc.createVariable("x", "f8", ("x",))[:] = np.arange(5.0)
        nc.createVariable("t", "f8", ("t",))[:] = np.arange(3.0)
        nc.createVariable("v", "f4", ("t", "x"))[:] = np.ones((3, 5))
    return {"a", "a/b"}


def h5netcdf_nested(path: Path) -> set[str]:
    """h5netcdf's writer: ``g`` redefines ``x`` (3); ``g/h`` defines ``y`` of the root's
    length-less name and uses ``g``'s ``x``."""
    with h5netcdf.File(path, "w") as f:
        g = f.create_group("g")
        g.dimensions = {"x": 3}
        g.create_variable("x", ("x",), "f8", data=np.arange(3.0))
        g.create_variable("m", ("x",), "i4", data=np.arange(3))
        h = g.create_group("h")
        h.dimensions = {"y": 2}
        h.create_variable("y", ("y",), "f8", data=np.arange(2.0))
        h.create_variable("k", ("y", "x"), "f4", data=np.ones((2, 3)))
        f.dimensions = {"x": 4}
        f.create_variable("x", ("x",), "f8", data=np.arange(4.0))
        f.create_variable("r", ("x",), "f4", data=np.ones(4))
    return {"g", "g/h"}


def phony_mixed(path: Path) -> set[str]:
    """Arrays with and without scales (h5netcdf refuses both in one array) in the root and a
    subgroup, of lengths the scales have, and a subgroup scale of a root phony length."""
    with h5py.File(path, "w") as f:
        x = _scale(f, "x", 5)
        _var(f, "g/c", 4, 3)
        _var(f, "g/d", x)
        _var(f, "g/p", _scale(f, "g/q", 4))
        _var(f, "z", x, _scale(f, "w", 6))
        _var(f, "z2", 4, 4)
        _var(f, "z3", 5, 6)
    return set()


CASES: dict[str, Callable[[Path], set[str]]] = {
    f.__name__: f
    for f in (
        atl14,
        subgroup_uses_root_scale,
        three_levels,
        three_levels_same_length,
        netcdf4_python,
        h5netcdf_nested,
        phony_mixed,
    )
}


# -- readers ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Sidecars:
    path: Path
    refs: GranuleRefs
    json: Path
    parquet: Path
    renamed: set[str]  # groups where the subgroup's own names fall back


@pytest.fixture(params=list(CASES))
def sidecars(request: pytest.FixtureRequest, tmp_path: Path) -> Sidecars:
    path = tmp_path / f"{request.param}.h5"
    renamed = CASES[request.param](path)
    refs = index_granule(str(path))
    json_path = write_json(refs, tmp_path / "refs.json")
    parquet = write_parquet(refs, tmp_path / "refs.parq")
    return Sidecars(path, refs, Path(json_path), Path(parquet), renamed)


def _plain(sidecar: Path, group: str) -> xr.Dataset:
    # fsspec reads Parquet references with fastparquet unless told (pandas warns about it)
    fo: Any = str(sidecar)
    if sidecar.is_dir():
        fo = LazyReferenceMapper(fo, fs=fsspec.filesystem("file"), engine="pyarrow")
    so = {"fo": fo, "remote_protocol": "file"}
    return xr.open_dataset(
        "reference://",
        engine="zarr",
        group=group or None,
        backend_kwargs={"consolidated": True, "storage_options": so},
    )


READERS: dict[str, Callable[[Sidecars, str], xr.Dataset]] = {
    "zarr-json": lambda s, g: _plain(s.json, g),
    "zarr-parquet": lambda s, g: _plain(s.parquet, g),
    "h5sidecar-json": lambda s, g: xr.open_dataset(s.json, engine="h5sidecar", group=g or None),
    "h5sidecar-parquet": lambda s, g: xr.open_dataset(
        s.parquet, engine="h5sidecar", group=g or None
    ),
}


def _truths(path: Path) -> dict[str, xr.Dataset]:
    return {
        g: xr.open_dataset(path, engine="h5netcdf", phony_dims="access", group=g or None)
        for g in groups_of(path)
    }


def _check_group(
    got: xr.Dataset,
    truths: dict[str, xr.Dataset],
    group: str,
    renamed: set[str],
    reader: str,
    hidden: frozenset[str] = frozenset(),
) -> None:
    want = truths[group]
    assert set(got.variables) == set(want.variables) - hidden, (reader, group)
    strict = dimension_differences(got, want, outer_lengths({group: want}, group))
    allowed = dimension_differences(got, want, outer_lengths(truths, group))
    assert allowed == {}, (reader, group, allowed)
    if group in renamed:  # the subgroup's own dimensions fall back, as xarray requires
        assert strict, (reader, group)
    else:  # every name, coordinate and index exactly as h5netcdf has them
        assert strict == {}, (reader, group, strict)
        assert set(got.coords) == set(want.coords) - hidden, (reader, group)
        assert set(got.xindexes) == set(want.xindexes) - hidden, (reader, group)
    for name in got.variables:
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)


@pytest.mark.parametrize("reader", list(READERS))
def test_every_group_has_h5netcdfs_dimensions(sidecars: Sidecars, reader: str) -> None:
    truths = _truths(sidecars.path)
    for group in truths:
        with READERS[reader](sidecars, group) as got:
            _check_group(got, truths, group, sidecars.renamed, reader)
    for ds in truths.values():
        ds.close()


def _hidden(tree: xr.DataTree, group: str, want: xr.Dataset) -> frozenset[str]:
    """Variables of a group that are named like an index its node inherits, which xarray's
    DataTree leaves out of the node: an index equal to the inherited one is the inherited one
    (``DataTree`` deduplicates it), and xarray's chunked ``open_datatree`` rebuilds each node
    from ``node.dataset``, where the inherited coordinate hides the node's own variable of
    that name (a renamed subgroup's ``x``; plain ``engine="zarr"`` with ``chunks={}`` drops it
    alike, xarray 2026.9)."""
    node = tree[group] if group else tree
    own = node.to_dataset(inherit=False).variables
    return frozenset(str(k) for k in node.xindexes if k not in own and k in want.variables)


@pytest.mark.parametrize(
    "tree", ["zarr-json", "zarr-json-chunked", "h5sidecar", "h5sidecar-chunked"]
)
def test_datatree_nodes_have_h5netcdfs_dimensions(sidecars: Sidecars, tree: str) -> None:
    """Each node without its inherited coordinates equals its group opened alone; where
    h5netcdf's own DataTree opens (no shadowing), the trees equal node by node with them."""
    truths = _truths(sidecars.path)
    chunks = {} if tree.endswith("-chunked") else None
    if tree.startswith("zarr-json"):
        so = {"fo": str(sidecars.json), "remote_protocol": "file"}
        ours = xr.open_datatree(
            "reference://",
            engine="zarr",
            chunks=chunks,
            backend_kwargs={"consolidated": True, "storage_options": so},
        )
    else:
        ours = h5sidecar.open_datatree(sidecars.parquet, chunks=chunks)
    for group in truths:
        node = ours[group] if group else ours
        hidden = _hidden(ours, group, truths[group])
        for k in hidden:  # an index equal to the inherited one, or the chunked trees' loss
            assert node[k].equals(truths[group][k]) or (
                chunks is not None and group in sidecars.renamed
            ), (group, k)
        _check_group(node.to_dataset(inherit=False), truths, group, sidecars.renamed, tree, hidden)
    if not sidecars.renamed:
        want = xr.open_datatree(sidecars.path, engine="h5netcdf", phony_dims="access")
        for group in truths:
            got, node = (ours[group], want[group]) if group else (ours, want)
            assert dimension_differences(got.to_dataset(), node.to_dataset()) == {}, group
            assert set(got.xindexes) == set(node.xindexes), group
        want.close()
    else:
        with pytest.raises(ValueError, match="not aligned"):
            xr.open_datatree(sidecars.path, engine="h5netcdf", phony_dims="access")
    ours.close()
    for ds in truths.values():
        ds.close()


def test_atl14_root_keeps_its_coordinates(tmp_path: Path) -> None:
    """The reported case: the root, not the shadowing subgroup, keeps ``x`` and ``y``."""
    path = tmp_path / "atl14.h5"
    atl14(path)
    refs = index_granule(str(path))
    dims = {p: a.meta.dimension_names for p, a in refs.arrays.items()}
    assert dims["h"] == dims["h_sigma"] == ("y", "x")
    assert dims["x"] == ("x",) and dims["y"] == ("y",)
    assert refs.arrays["h"].note == ""
    assert all(d.startswith("phony_dim_") for d in dims["tile_stats/n"])
    assert dims["tile_stats/x"] == dims["tile_stats/n"][1:]
    assert "is not named 'x': that name has another size here" in refs.arrays["tile_stats/x"].note


def _renamed(refs: GranuleRefs, path: str, names: tuple[str, ...]) -> GranuleRefs:
    arr = refs.arrays[path]
    meta = dataclasses.replace(arr.meta, dimension_names=names)
    return dataclasses.replace(
        refs, arrays={**refs.arrays, path: dataclasses.replace(arr, meta=meta)}
    )


@pytest.mark.parametrize("writer", [write_json, write_parquet])
def test_verify_compares_dimension_names(tmp_path: Path, writer: Any) -> None:
    """``verify`` passes the ATL14-like sidecar (the subgroup's renaming is allowed) and reports
    a variable whose dimensions differ from h5netcdf's though its values are equal."""
    path = tmp_path / "atl14.h5"
    atl14(path)
    refs = index_granule(str(path))
    good = writer(refs, tmp_path / "good")
    report = verify_refs(str(good))
    assert report.ok, [v for v in report.variables if v.status != "ok"]
    bad = writer(_renamed(refs, "h", ("phony_dim_0", "phony_dim_1")), tmp_path / "bad")
    report = verify_refs(str(bad))
    by_path = {v.path: v for v in report.variables}
    assert not report.ok
    assert by_path["h"].status == "different"
    assert "dimensions ('phony_dim_0', 'phony_dim_1') where h5netcdf has ('y', 'x')" in (
        by_path["h"].message
    )
    assert by_path["h_sigma"].status == "ok"
