"""Indexing a granule on S3 (the moto server fixture, through the options users pass)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from h5sidecar.indexer import index_granule
from h5sidecar.references import to_kerchunk
from h5sidecar.settings import IndexSettings
from tests.indexer._compare import assert_values_equal, h5_read, open_plain


def _granule(f: h5py.File) -> None:
    t = f.create_dataset("beam/delta_time", data=np.arange(50, dtype="f8"), chunks=(20,))
    t.make_scale("delta_time")
    h = f.create_dataset(
        "beam/h", data=np.linspace(0, 1, 50, dtype="f4"), chunks=(20,), compression="gzip"
    )
    h.dims[0].attach_scale(t)
    f.create_dataset("beam/names", data=["a", "bb", "ccc"], dtype=h5py.string_dtype())
    f.attrs["title"] = "small granule"


def test_index_s3_granule(make_h5, s3, s3_bucket: str, s3_storage_options, tmp_path: Path) -> None:
    path = make_h5(_granule)
    url = f"s3://{s3_bucket}/dir/granule.h5"
    s3.put(str(path), url)

    refs = index_granule(
        url, storage_options=s3_storage_options, settings=IndexSettings(checksums=True)
    )
    assert refs.source.url == url
    assert refs.source.size == path.stat().st_size and refs.source.etag
    assert refs.arrays["beam/h"].manifest.urls == (url,)
    assert refs.arrays["beam/names"].status == "inlined"
    assert refs.arrays["beam/h"].meta.dimension_names == ("delta_time",)
    # the same byte ranges as indexing the local copy
    local = index_granule(str(path))
    assert np.array_equal(
        refs.arrays["beam/h"].manifest.offsets, local.arrays["beam/h"].manifest.offsets
    )

    # a plain reader reaches S3 with its own remote options
    group = open_plain(to_kerchunk(refs), "s3", dict(s3_storage_options))
    with h5py.File(path) as h5:
        for rel in refs.arrays:
            assert_values_equal(group[rel][...], h5_read(h5[rel]), h5[rel], rel)
    assert group.attrs["title"] == "small granule"
