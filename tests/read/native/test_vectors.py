"""Whole 1-D arrays of many members in one fetch (a cube build's coordinate read), compared with
h5py, with the batch reader, and with the members' freshness guard."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.errors import ForbiddenSourceError, StaleReferenceError
from h5sidecar.indexer import index_granule
from h5sidecar.read import read_arrays
from h5sidecar.read.native._vectors import member_fetcher, read_vectors, vector_codecs
from h5sidecar.references import GranuleRefs, member_identities
from h5sidecar.settings import IndexSettings, ReadSettings

NAMES = ["be", "gz", "sparse", "tiny", "one"]


def _granule(path: Path, k: int) -> Path:
    with h5py.File(path, "w") as h:
        h.create_dataset("be", data=np.arange(1000, dtype=">f8") * (k + 1), chunks=(64,))
        h.create_dataset("gz", data=np.arange(300, dtype="<i4") - k, chunks=(128,),
                         compression="gzip", shuffle=True)  # fmt: skip
        sparse = h.create_dataset("sparse", shape=(500,), dtype="<i2", chunks=(100,))
        sparse[150:220] = k + 1  # chunks 1 and 2 written, the others never allocated (zeros)
        h.create_dataset("tiny", data=np.array([k, k + 1, k + 2], dtype="<u1"))  # inline
        h.create_dataset("one", data=np.array([k * 0.5], dtype="<f4"))
    return path


@pytest.fixture
def members(tmp_path: Path) -> tuple[list[Path], list[GranuleRefs]]:
    files = [_granule(tmp_path / f"g{k}.h5", k) for k in range(4)]
    refs = [index_granule(str(f), settings=IndexSettings(inline_threshold=4)) for f in files]
    return files, refs


def test_vectors_equal_h5py_and_the_batch_reader(members: tuple[list[Path], list[GranuleRefs]]
                                                 ) -> None:
    files, refs = members
    assert refs[0].arrays["tiny"].manifest.inline  # the inline path is exercised
    assert (refs[0].arrays["sparse"].manifest.codes == -1).sum() == 3  # and the fill path
    flat = [r.arrays[n] for r in refs for n in NAMES]
    codecs = vector_codecs(flat)
    assert codecs is not None
    fetcher = member_fetcher(member_identities(refs), flat, ReadSettings(), None)
    got = iter(read_vectors(flat, codecs, fetcher))
    assert fetcher.stats.requests <= len(files) * 8  # coalesced: a few requests a granule
    for f, r in zip(files, refs, strict=True):
        batch = read_arrays(r, NAMES)
        with h5py.File(f) as h:
            for n in NAMES:
                value = next(got)
                want = h[n][...]
                assert value.dtype == want.dtype.newbyteorder("="), (f.name, n)
                np.testing.assert_array_equal(value, want, err_msg=f"{f.name} {n}")
                assert value.dtype == batch[n].dtype
                np.testing.assert_array_equal(value, batch[n])


def test_a_changed_member_is_refused(members: tuple[list[Path], list[GranuleRefs]]) -> None:
    files, refs = members
    _granule(files[2], 9)  # rewritten after indexing: other bytes, another mtime
    os.utime(files[2], ns=(1, 1))
    flat = [r.arrays[n] for r in refs for n in NAMES]
    fetcher = member_fetcher(member_identities(refs), flat, ReadSettings(), None)
    with pytest.raises(StaleReferenceError, match=r"g2\.h5"):
        read_vectors(flat, vector_codecs(flat), fetcher)  # type: ignore[arg-type]


def test_only_members_are_read(members: tuple[list[Path], list[GranuleRefs]]) -> None:
    _, refs = members
    flat = [r.arrays[n] for r in refs[1:] for n in NAMES]
    fetcher = member_fetcher(member_identities(refs[1:]), flat, ReadSettings(), None)
    with pytest.raises(ForbiddenSourceError):  # refs[0]'s granule is not a member
        read_vectors([refs[0].arrays["be"]], vector_codecs([refs[0].arrays["be"]]), fetcher)  # type: ignore[arg-type]


def test_arrays_this_path_does_not_decode_are_left_to_the_general_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.h5"
    with h5py.File(path, "w") as h:
        h.create_dataset("grid", data=np.zeros((2, 3)))
        h.create_dataset("names", data=np.array(["a", "bc"], dtype=h5py.string_dtype()))
    refs = index_granule(str(path))
    assert vector_codecs([refs.arrays["grid"]]) is None  # 2-D
    assert vector_codecs([refs.arrays["names"]]) is None  # Python objects
