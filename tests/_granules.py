"""Test helpers for the read path: small HDF5 granules and their references.

``refs_for(path)`` uses the real indexer (``h5sidecar.indexer.index_granule``) when it is
available, else a minimal chunk_iter-based builder kept here (chunked / contiguous / compact
datasets, HDF5 filters through the indexer's ``pipeline_for``, dimension scales): enough for the
gateway tests, with values always checked against h5py.
"""

from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  (registers HDF5 filter plugins for h5py)
import numpy as np
import pytest

from h5sidecar.references import (
    INLINE,
    MISSING,
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    SourceInfo,
)

DROPPED = {
    "DIMENSION_LIST",
    "REFERENCE_LIST",
    "CLASS",
    "NAME",
    "_Netcdf4Dimid",
    "_Netcdf4Coordinates",
    "_NCProperties",
    "_nc3_strict",
}


def refs_for(path: str | Path, **kwargs: Any) -> GranuleRefs:
    """References of a local granule: the real indexer if present, else :func:`build_refs`."""
    try:
        from h5sidecar.indexer import index_granule
    except ImportError:
        return build_refs(path)
    return index_granule(str(path), **kwargs)


def _json(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.size == 1:  # netCDF readers unpack one-element attributes
            value = value.reshape(())
        if value.dtype.kind == "S":
            return [v.decode() for v in value.tolist()]
        return [_json(v) for v in value.tolist()] if value.ndim else _json(value[()])
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return value.decode()
    return value


def _fill_json(fv: Any, dtype: np.dtype) -> Any:
    if dtype.kind in "SV" or dtype.fields is not None:
        return base64.b64encode(np.asarray(fv, dtype=dtype).tobytes()).decode()
    return _json(np.asarray(fv, dtype=dtype)[()])


def _v2_dtype(dtype: np.dtype) -> Any:
    if dtype.fields is not None:
        return [list(d) for d in dtype.descr]
    return dtype.str


def _dims(dset: h5py.Dataset) -> tuple[str, ...]:
    names = []
    for i, dim in enumerate(dset.dims):
        if len(dim):
            names.append(dim[0].name.rsplit("/", 1)[-1])
        elif dset.is_scale:
            names.append(dset.name.rsplit("/", 1)[-1])
        else:
            names.append(f"phony_dim_{dset.parent.name.strip('/').replace('/', '_')}_{i}")
    return tuple(names)


def _manifest(dset: h5py.Dataset, url: str, chunks: tuple[int, ...]) -> ChunkManifest:
    grid = tuple(-(-s // c) for s, c in zip(dset.shape, chunks, strict=True))
    codes = np.full(grid, MISSING, dtype=np.int32)
    offsets = np.zeros(grid, dtype=np.uint64)
    lengths = np.zeros(grid, dtype=np.uint64)
    inline: dict[int, bytes] = {}
    layout = dset.id.get_create_plist().get_layout()
    if layout == h5py.h5d.CHUNKED:

        def visit(info: Any) -> None:
            idx = tuple(o // c for o, c in zip(info.chunk_offset, chunks, strict=True))
            codes[idx] = 0
            offsets[idx] = info.byte_offset
            lengths[idx] = info.size

        dset.id.chunk_iter(visit)
    elif layout == h5py.h5d.COMPACT:
        codes[()] = INLINE
        inline[0] = dset[()].tobytes()
    else:
        off = dset.id.get_offset()
        if off is not None:
            codes[...] = 0
            offsets[...] = off
            lengths[...] = dset.id.get_storage_size()
    return ChunkManifest.from_arrays(
        urls=[url], codes=codes, offsets=offsets, lengths=lengths, inline=inline
    )


def build_refs(path: str | Path) -> GranuleRefs:
    """Minimal references for a local HDF5 file (numeric, |S and structured datasets)."""
    from h5sidecar.indexer.filters import pipeline_for

    url = str(Path(path).resolve())
    groups: dict[str, dict[str, Any]] = {}
    arrays: dict[str, ArrayRefs] = {}
    with h5py.File(url, "r") as f:
        groups[""] = {k: _json(v) for k, v in f.attrs.items() if k not in DROPPED}

        def visit(name: str, obj: Any) -> None:
            attrs = {k: _json(v) for k, v in obj.attrs.items() if k not in DROPPED}
            if isinstance(obj, h5py.Group):
                groups[name] = attrs
                return
            if obj.dtype.kind == "O" or obj.size == 0:
                return
            if str(_json(obj.attrs.get("NAME", ""))).startswith("This is a netCDF dimension"):
                return  # a netCDF dimension without a variable: not data
            chunks = obj.chunks or obj.shape
            meta = ArrayMeta(
                shape=obj.shape,
                chunks=chunks,
                dtype=_v2_dtype(obj.dtype),
                fill_value=_fill_json(obj.fillvalue, obj.dtype),
                filters=pipeline_for(obj) if obj.chunks else (),
                dimension_names=_dims(obj),
                attrs=attrs,
            )
            arrays[name] = ArrayRefs(name, meta, _manifest(obj, url, chunks))

        f.visititems(visit)
    st = Path(url).stat()
    return GranuleRefs(
        source=SourceInfo(url=url, size=st.st_size, mtime=st.st_mtime), groups=groups, arrays=arrays
    )


def write_small_granule(path: str | Path) -> Path:
    """A small netCDF-4-like HDF5 file: nested groups, gzip+shuffle chunks, dimension scales,
    big-endian, |S, structured, scalar, compact, contiguous and partially unallocated data."""
    path = Path(path)
    rng = np.random.default_rng(42)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "small test granule"
        g = f.create_group("gt1l/heights")
        g.attrs["description"] = "photon heights"
        n = 5000
        t = g.create_dataset(
            "delta_time",
            data=np.arange(n) * 0.5 + 1000.0,
            chunks=(1000,),
            maxshape=(None,),
            compression="gzip",
            shuffle=True,
        )
        t.attrs["units"] = "seconds since 2018-01-01"
        t.attrs["standard_name"] = "time"
        t.make_scale("delta_time")
        h = g.create_dataset(
            "h_ph",
            data=rng.normal(100, 5, n).astype("f4"),
            chunks=(1000,),
            maxshape=(None,),
            compression="gzip",
            shuffle=True,
        )
        h.attrs["units"] = "m"
        h.dims[0].attach_scale(t)
        q = g.create_dataset(
            "quality_ph",
            data=rng.integers(0, 4, n).astype(">i2"),
            chunks=(700,),
            compression="gzip",
        )
        q.dims[0].attach_scale(t)
        lat = g.create_dataset("lat_ph", data=np.linspace(-10, 10, n), chunks=(1000,))
        lat.dims[0].attach_scale(t)
        geo = f.create_group("gt1l/geolocation")
        geo.create_dataset("segment_id", data=np.arange(300, dtype="<i4"))  # contiguous
        geo.create_dataset("names", data=np.array([b"alpha", b"beta", b"gamma"], dtype="S6"))
        rec = np.zeros(4, dtype=[("a", "<i4"), ("b", ">f8")])
        rec["a"] = [1, 2, 3, 4]
        rec["b"] = [0.5, 1.5, 2.5, 3.5]
        geo.create_dataset("records", data=rec, chunks=(2,))
        anc = f.create_group("ancillary_data")
        anc.create_dataset("atlas_sdp_gps_epoch", data=np.float64(1198800018.0))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        sid = h5py.h5s.create_simple((16,))
        h5py.h5d.create(anc.id, b"compact_table", h5py.h5t.STD_I32LE, sid, dcpl=dcpl)
        anc["compact_table"][...] = np.arange(16, dtype="<i4") * 3
        sparse = anc.create_dataset(
            "sparse", shape=(10, 10), chunks=(5, 5), dtype="f4", fillvalue=-1.0
        )
        sparse[0:5, 0:5] = 7.0
        # CF _FillValue = the storage fill: never-written chunks stay missing in the sidecar
        # (with another or no _FillValue they would be stored as -1.0 instead)
        sparse.attrs["_FillValue"] = np.float32(-1.0)
    return path


# -- shared fixtures (imported by the gateway test modules) ----------------------------------


@pytest.fixture(scope="session")
def small_h5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small multi-feature granule (see :func:`write_small_granule`)."""
    return write_small_granule(tmp_path_factory.mktemp("small") / "small.h5")


@pytest.fixture(scope="session")
def small_refs(small_h5: Path) -> GranuleRefs:
    """References of ``small_h5``."""
    return refs_for(small_h5)


@pytest.fixture(scope="session")
def small_sidecars(small_refs: GranuleRefs, tmp_path_factory: pytest.TempPathFactory
                   ) -> dict[str, str]:
    """``small_refs`` written as a JSON file and as a Parquet directory."""
    from h5sidecar.references import write_refs

    d = tmp_path_factory.mktemp("small_sidecars")
    return {
        "json": write_refs(small_refs, d / "small.h5.json", format="json"),
        "parquet": write_refs(small_refs, d / "small.h5.parq", format="parquet"),
    }


@pytest.fixture(scope="session")
def cf_nc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CF netCDF-4 sample (packed int16 with float32 scale/offset, _FillValue, times)."""
    from h5sidecar.sample import write_netcdf_like

    return write_netcdf_like(tmp_path_factory.mktemp("cf") / "cf.nc")


@pytest.fixture(scope="session")
def atl03_h5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ATL03-like granule (~940 variables in ~140 groups), kept small in photons."""
    from h5sidecar.sample import write_atl03_like

    return write_atl03_like(tmp_path_factory.mktemp("atl03") / "ATL03_small.h5",
                            photons=20_000, seed=3)


@pytest.fixture(scope="session")
def atl03_refs(atl03_h5: Path) -> GranuleRefs:
    """References of ``atl03_h5`` (indexed once per session: ~940 datasets take seconds)."""
    return refs_for(atl03_h5)


def read_h5(path: str | Path, name: str) -> np.ndarray:
    """What h5py reads for dataset ``name`` (the oracle)."""
    with h5py.File(path, "r") as f:
        return f[name][()]


def source_bytes(refs: GranuleRefs, key: str) -> bytes | None:
    """The value of a Zarr v2 chunk key read straight from the source file (oracle, no store)."""
    path, _, name = key.rpartition("/")
    arr = refs.arrays.get(path)
    if arr is None:
        return None
    index = tuple(int(p) for p in name.split(".")) if arr.manifest.grid_shape else ()
    ref = arr.manifest.get(index)
    if ref is None or isinstance(ref, bytes):
        return ref
    url, offset, length = ref
    with open(url, "rb") as f:
        f.seek(offset)
        return f.read(length)


@pytest.fixture(autouse=True)
def fresh_read_caches() -> None:
    """Each test starts with empty process-wide read caches, so request counts are its own.

    Autouse wherever a conftest imports it."""
    from h5sidecar.read import clear_caches

    clear_caches()


#: The fixtures a test folder gets with ``from tests._granules import *`` in its conftest.
__all__ = [
    "atl03_h5",
    "atl03_refs",
    "cf_nc",
    "fresh_read_caches",
    "small_h5",
    "small_refs",
    "small_sidecars",
]
