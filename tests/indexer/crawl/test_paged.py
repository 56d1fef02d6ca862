"""Granules written with paged aggregation: HDF5 reads their metadata a page at a time.

Without HDF5's page buffer every object header, heap block and B-tree node of such a file was
read on its own through the file object (locally a Python call each, over S3 a round trip
each time the crawl had not fetched it yet).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from h5sidecar.indexer import index_granule
from h5sidecar.indexer.crawl._h5file import open_granule
from tests.indexer._compare import assert_values_equal, h5_read, open_refs

PAGE = 64 << 10


def _paged_granule(path: Path) -> Path:
    """40 variables with 11 attributes each (dense attribute storage), chunked, contiguous
    and compact, in nested groups, libver latest with 64 KiB pages."""
    rng = np.random.default_rng(3)
    with h5py.File(path, "w", libver="latest", fs_strategy="page", fs_persist=True,
                   fs_page_size=PAGE, track_order=True) as f:
        for b in range(4):
            g = f.create_group(f"gt{b}/heights")
            t = g.create_dataset("delta_time", data=np.arange(5000, dtype="f8"), chunks=(500,))
            t.make_scale("delta_time")
            for i in range(9):
                kw = {"chunks": (700,), "compression": "gzip"} if i % 2 else {}
                ds = g.create_dataset(f"v{i}", data=rng.normal(size=5000).astype("f4"), **kw)
                ds.dims[0].attach_scale(t)
                for k in range(10):
                    ds.attrs[f"attr_{k}"] = f"value {k} of {ds.name}"
                ds.attrs["valid_max"] = np.float32(9)
        f.create_dataset("ancillary/names", data=["a", "bb", "ccc"], dtype=h5py.string_dtype())
    return path


def test_a_paged_granule_is_read_a_page_at_a_time(tmp_path: Path) -> None:
    path = _paged_granule(tmp_path / "paged.h5")
    with open_granule(str(path)) as granule:
        with_attrs = []
        granule.h5.visititems(lambda _, o: with_attrs.append(dict(o.attrs.items()))
                              if isinstance(o, h5py.Dataset) else None)
        reads = granule.fileobj.stats.reads_by_hdf5
    assert len(with_attrs) == 41
    # the file has ~12 pages; object by object it took ~900 reads
    assert reads <= 2 * path.stat().st_size // PAGE


def test_a_paged_granule_indexes_to_the_values_h5py_reads(tmp_path: Path) -> None:
    path = _paged_granule(tmp_path / "paged.h5")
    refs = index_granule(str(path))
    group = open_refs(refs)
    with h5py.File(path) as h5:
        assert len(refs.arrays) == 41
        for rel in refs.arrays:
            assert_values_equal(group[rel][...], h5_read(h5[rel]), h5[rel], rel)
        assert refs.arrays["gt0/heights/v1"].meta.attrs["attr_3"] == (
            "value 3 of /gt0/heights/v1")
        assert refs.arrays["gt0/heights/v1"].meta.dimension_names == ("delta_time",)
