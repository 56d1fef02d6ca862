"""Variables shorter than their unlimited netCDF dimension, by storage (the chunked case goes
through every reader in :mod:`tests.test_feature_mixes`, file ``short_records.nc``): decoded
ones (variable-length strings, compact) are padded as netCDF-C pads them, a contiguous one
keeps its HDF5 extent."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from h5sidecar import index_granule, read_arrays, write_parquet


def test_decoded_and_compact_variables_padded_contiguous_kept(tmp_path: Path) -> None:
    import netCDF4

    path = tmp_path / "kinds.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("t", None)
        f.createVariable("t", "f8", ("t",))[:3] = [0.0, 1.0, 2.0]
        f.createVariable("s", str, ("t",))[0] = "a"
    with h5py.File(path, "r+") as h5:
        space = h5py.h5s.create_simple((1,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        dcpl.set_fill_value(np.array(-7, "<i4"))
        h5py.h5d.create(h5.id, b"comp", h5py.h5t.STD_I32LE, space, dcpl)
        h5["comp"][...] = [5]
        h5.create_dataset("contig", data=np.arange(2.0))
        for name in ("comp", "contig"):
            h5[name].dims[0].attach_scale(h5["t"])
    refs = index_granule(str(path))
    assert refs.extra["extended_past_hdf5_extent"] == {"s": [1], "comp": [1]}
    assert refs.arrays["s"].meta.dimension_names == ("t",)
    assert "past HDF5's extent [1]" in refs.arrays["comp"].note
    got = read_arrays(write_parquet(refs, tmp_path / "k.parq"), ["s", "comp", "contig"])
    with netCDF4.Dataset(path) as nc:  # netCDF-C pads them (h5netcdf refuses the strings)
        assert list(got["s"]) == list(nc["s"][:]) == ["a", "", ""]
        comp = nc["comp"]
        comp.set_auto_mask(False)
        assert got["comp"].tolist() == comp[:].tolist() == [5, -7, -7]
    # contiguous: its HDF5 extent, under a phony name (netCDF-C shows 3 values)
    assert got["contig"].tolist() == [0.0, 1.0]
    assert refs.arrays["contig"].meta.dimension_names[0].startswith("phony_dim_")


def test_a_far_longer_claim_keeps_the_extent_and_says_why(tmp_path: Path) -> None:
    """One dataset far longer than the others on its unlimited dimension (a corrupt extent looks
    so: a bit flipped in a dataspace claimed 4,278,190,083 records where 3 were stored) does
    not lengthen the others past MAX_ADDED_CHUNKS chunks each: they keep HDF5's extent, their
    values equal h5py's, and the extras say which and why."""
    from h5sidecar.indexer.dims._unlimited_dims import MAX_ADDED_CHUNKS

    path = tmp_path / "far.h5"
    far = MAX_ADDED_CHUNKS * 20 + 5  # 2 * MAX_ADDED_CHUNKS + 1 chunks of 10
    with h5py.File(path, "w") as h5:
        t = h5.create_dataset("t", data=np.arange(3.0), maxshape=(None,), chunks=(10,))
        t.make_scale("t")
        near = h5.create_dataset("near", data=np.arange(2, dtype="i4"), maxshape=(None,),
                                 chunks=(10,), fillvalue=-1)  # fmt: skip
        big = h5.create_dataset("big", shape=(far,), dtype="i4", maxshape=(None,), chunks=(10,))
        big[far - 1] = 9
        for d in (near, big):
            d.dims[0].attach_scale(t)
    refs = index_granule(str(path))
    kept = refs.extra["kept_hdf5_extent"]
    assert set(kept) == {"t", "near"}, kept
    assert "would gain" in kept["near"] and f"{MAX_ADDED_CHUNKS:,}" in kept["near"]
    assert refs.arrays["near"].meta.shape == (2,) and refs.arrays["t"].meta.shape == (3,)
    got = read_arrays(write_parquet(refs, tmp_path / "f.parq"), ["t", "near"])
    with h5py.File(path, "r") as h5:
        np.testing.assert_array_equal(got["near"], h5["near"][()])
        np.testing.assert_array_equal(got["t"], h5["t"][()])
