"""Oracle helpers: open references with *plain* fsspec + zarr and compare with h5py.

Nothing here imports an h5sidecar reader: references are opened with fsspec's
``ReferenceFileSystem`` and zarr 3's ``FsspecStore``, as any kerchunk user would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import fsspec
import h5py
import hdf5plugin  # noqa: F401  (registers the filter plugins h5py needs to read the oracle)
import numpy as np
import zarr
import zarr.storage

from h5sidecar.references import GranuleRefs, to_kerchunk


def open_plain(
    fo: Any, remote_protocol: str = "file", remote_options: dict[str, Any] | None = None
) -> zarr.Group:
    """A zarr group over kerchunk references (a dict, a JSON path or a Parquet directory).

    ``remote_protocol`` is given as kerchunk's documentation advises; without it fsspec scans
    every reference to guess it, and that scan fails on Parquet references with nested groups
    (``LazyReferenceMapper.listdir`` takes groups for arrays).
    """
    fs = fsspec.filesystem(
        "reference",
        fo=fo,
        remote_protocol=remote_protocol,
        remote_options={**(remote_options or {}), "asynchronous": True},
        asynchronous=True,
        skip_instance_cache=True,
    )
    store = zarr.storage.FsspecStore(fs, read_only=True, path="")
    return zarr.open_group(store, mode="r", zarr_format=2)


def open_refs(refs: GranuleRefs) -> zarr.Group:
    """A zarr group over the in-memory references (kerchunk dict via ``to_kerchunk``)."""
    return open_plain(to_kerchunk(refs))


# -- h5py side ------------------------------------------------------------------------------------
def _is_flat(dt: np.dtype) -> bool:
    assert dt.names is not None
    return all(dt.fields[n][0].names is None and dt.fields[n][0].subdtype is None for n in dt.names)


def _esc(name: str) -> str:
    """A member name in a flattened compound: ``%``, ``.``, ``[`` and ``]`` %-escaped."""
    return "".join({"%": "%25", ".": "%2E", "[": "%5B", "]": "%5D"}.get(c, c) for c in name)


def _leaves(
    arr: np.ndarray, prefix: str = "", escape: bool | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """Fields of a structured array flattened the way the indexer names them."""
    assert arr.dtype.names is not None
    if escape is None:
        escape = not _is_flat(arr.dtype)
    for name in arr.dtype.names:
        label = _esc(name) if escape else name
        yield from _field_leaves(arr[name], arr.dtype.fields[name][0], prefix + label)


def _field_leaves(values: np.ndarray, fdt: np.dtype, name: str) -> Iterator[tuple[str, np.ndarray]]:
    if fdt.subdtype is not None:
        _, shape = fdt.subdtype
        sub = fdt.subdtype[0]
        for idx in np.ndindex(*shape):
            label = f"{name}[{','.join(str(i) for i in idx)}]"
            yield from _field_leaves(values[(Ellipsis, *idx)], sub, label)
    elif values.dtype.names is not None:
        yield from _leaves(values, name + ".", escape=True)
    else:
        yield name, values


def _as_text(values: np.ndarray) -> np.ndarray:
    def one(v: Any) -> Any:
        if isinstance(v, bytes):
            return v.decode("utf-8", "surrogateescape")
        return "" if v is None else str(v)

    return np.vectorize(one, otypes=[object])(values) if values.size else values.astype(object)


def _ref_targets(values: np.ndarray, h5: h5py.File) -> np.ndarray:
    def one(ref: Any) -> Any:
        if not ref:
            return None
        return h5py.h5o.get_info(h5[ref].id).addr

    return np.vectorize(one, otypes=[object])(values)


def _path_targets(values: np.ndarray, h5: h5py.File) -> np.ndarray:
    def one(path: Any) -> Any:
        # the sidecar's paths are %XX-escaped where a name cannot be a Zarr key
        return h5py.h5o.get_info(h5[unquote(str(path))].id).addr if path else None

    return np.vectorize(one, otypes=[object])(values)


def assert_values_equal(got: np.ndarray, want: Any, dset: h5py.Dataset, where: str) -> None:
    """Compare values read through zarr (``got``) with what h5py read (``want``).

    Numbers with ``array_equal(equal_nan=True)``, strings as ``str``, compound types field by
    field (flattened names), references by target object.
    """
    want = np.asarray(want) if not isinstance(want, np.ndarray) else want
    got = np.asarray(got)
    assert got.shape == want.shape, f"{where}: shape {got.shape} != h5py {want.shape}"
    base = dset.dtype.subdtype[0] if dset.dtype.subdtype is not None else dset.dtype
    ref_kind = h5py.check_ref_dtype(base)
    if ref_kind is not None:
        np.testing.assert_array_equal(
            _path_targets(got, dset.file), _ref_targets(want, dset.file), err_msg=where
        )
        return
    if want.dtype.kind == "O" or want.dtype.kind == "U":
        assert _as_text(got).tolist() == _as_text(want).tolist(), f"{where}: strings differ"
        return
    if want.dtype.names is not None:
        for name, values in _leaves(want):
            assert name in (got.dtype.names or ()), f"{where}: field {name!r} missing"
            assert_values_equal(got[name], values, dset, f"{where}[{name!r}]")
        return
    if want.dtype.kind == "S":
        assert _as_text(got).tolist() == _as_text(want).tolist(), f"{where}: strings differ"
        return
    if want.dtype.kind == "V":
        assert got.tobytes() == want.tobytes(), f"{where}: raw bytes differ"
        return
    assert np.array_equal(got, want, equal_nan=want.dtype.kind in "fc"), (
        f"{where}: values differ (got {got.ravel()[:8]}, h5py {want.ravel()[:8]})"
    )


def h5_dataset(h5: h5py.File, name: str) -> h5py.Dataset:
    """Open a dataset with its external raw-data files looked up beside the HDF5 file.

    That is ``HDF5_EXTFILE_PREFIX=${ORIGIN}``; HDF5 2.0 reads that variable once, when the
    library starts, so the prefix is set on the dataset access property list instead.
    """
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_efile_prefix(b"${ORIGIN}")
    return h5py.Dataset(h5py.h5d.open(h5.id, name.encode(), dapl=dapl))


def h5_read(dset: h5py.Dataset, selection: Any = ()) -> Any:
    """What h5py reads (variable-length strings as bytes/str objects, as h5py returns them).

    Opaque data are read with the file's own type as memory type: HDF5 2.0 has no conversion
    path from some opaque tags to the type h5py asks for, and opaque bytes need none.
    """
    if isinstance(dset.id.get_type(), h5py.h5t.TypeOpaqueID):
        out = np.empty(dset.shape, dtype=dset.dtype)
        dset.id.read(h5py.h5s.ALL, h5py.h5s.ALL, out, mtype=dset.id.get_type())
        return out[selection]
    return dset[selection]


def h5_padded(dset: h5py.Dataset, shape: tuple[int, ...]) -> Any:
    """:func:`h5_read` padded with the storage fill value to ``shape``: a variable shorter than
    its unlimited netCDF dimension, as netCDF readers (and the sidecar) show it."""
    want = h5_read(dset)
    if np.shape(want) == tuple(shape):
        return want
    out = np.empty(shape, dtype=want.dtype)
    out[...] = dset.fillvalue
    out[tuple(slice(0, s) for s in np.shape(want))] = want
    return out


def assert_refs_match_h5py(refs: GranuleRefs, path: Any) -> zarr.Group:
    """Every array of ``refs`` read through plain fsspec + zarr equals h5py's values.

    Returns the zarr group so tests can look further.
    """
    group = open_refs(refs)
    assert refs.arrays, "nothing was indexed"
    with h5py.File(path, "r") as h5:
        for rel in refs.arrays:
            dset = h5_dataset(h5, "/" + rel)
            got = group[rel][...]
            assert_values_equal(got, h5_padded(dset, np.shape(got)), dset, rel)
    return group
