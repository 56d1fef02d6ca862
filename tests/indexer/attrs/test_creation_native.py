"""Creation properties (layout, chunks, filters, fill value) decoded from a dataset's header
bytes equal what HDF5's own creation property list says, on synthetic files and on every
dataset of the corpus; what is not decoded is left to HDF5, never guessed."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar._compat.h5py import chunk_opts
from h5sidecar.indexer import index_granule, open_source
from h5sidecar.indexer.attrs._creation_messages import NativeCreation, creation_messages
from h5sidecar.indexer.attrs._native import NativeAttrs
from h5sidecar.indexer.attrs._object_header import NotNative
from h5sidecar.references import write_json
from tests.conftest import corpus_hdf5_names


def _datasets(f: h5py.File) -> list[h5py.Dataset]:
    found: list[h5py.Dataset] = []

    def visit(_: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            found.append(obj)

    with contextlib.suppress(KeyError, OSError, RuntimeError, ValueError):  # HDF5 cannot open one
        f.visititems(visit)
    return found


def _fill(plist: Any, dtype: np.dtype) -> bytes | str:
    one = np.zeros(1, dtype=dtype)
    try:
        plist.get_fill_value(one)
    except (OSError, RuntimeError, ValueError, TypeError) as exc:
        return type(exc).__name__
    return one.tobytes()


def _check(native: NativeCreation, dset: h5py.Dataset) -> None:
    """Every answer the native list gives equals HDF5's list's."""
    want = dset.id.get_create_plist()
    where = dset.file.filename, dset.name
    assert native.get_layout() == want.get_layout(), where
    if want.get_layout() == h5py.h5d.CHUNKED:
        assert native.get_chunk() == want.get_chunk(), where
    assert native.get_nfilters() == want.get_nfilters(), where
    for i in range(want.get_nfilters()):
        assert native.get_filter(i) == want.get_filter(i), where
    assert native.get_external_count() == want.get_external_count(), where
    if native.get_layout() == h5py.h5d.CHUNKED and native.chunk_options is not None:
        assert native.chunk_options == chunk_opts(want), where
    try:
        dtype = dset.dtype
    except TypeError:  # a type h5py does not map (the conformance tests pin which)
        dtype = np.dtype("V1")
    if dtype.kind in "iuf" and dtype.subdtype is None:
        assert _fill(native, dtype) == _fill(want, dtype), where
        assert native.fill_value_defined() == want.fill_value_defined(), where
    assert native.get_fill_time() == want.get_fill_time(), where  # asked of HDF5's list
    assert native.get_alloc_time() == want.get_alloc_time(), where


def compare_with_hdf5(path: Path) -> Counter[str]:
    """Decode every dataset of ``path`` and compare with HDF5's creation property list."""
    counts: Counter[str] = Counter()
    with open_source(str(path)) as src, h5py.File(src, "r") as f:
        native = NativeAttrs(f, src)
        for dset in _datasets(f):
            info = h5py.h5o.get_info(dset.id)
            try:
                plist = creation_messages(dset, info.addr, native.view, native.layout)
            except NotNative as exc:
                counts[f"fallback: {str(exc)[:40]}"] += 1
                continue
            counts["native"] += 1
            _check(plist, dset)
    return counts


def _variety(f: h5py.File) -> None:
    f.create_dataset("contig", data=np.arange(10, dtype="i4"))
    f.create_dataset("compact", data=np.arange(3, dtype="f8"),
                     dcpl=_compact_dcpl())  # fmt: skip
    f.create_dataset("gz", data=np.arange(100.0), chunks=(7,), compression="gzip",
                     compression_opts=4, shuffle=True, fletcher32=True, fillvalue=-9.5)  # fmt: skip
    f.create_dataset("be", data=np.arange(20, dtype=">i2").reshape(4, 5), chunks=(2, 3),
                     fillvalue=-7)  # fmt: skip
    f.create_dataset("u8", shape=(30,), dtype="u8", chunks=(10,), fillvalue=2**64 - 3)
    f.create_dataset("f4be", shape=(6,), dtype=">f4", fillvalue=np.float32(1.5))
    f.create_dataset("nofill", shape=(5,), dtype="i8", chunks=(5,), fillvalue=None)
    f.create_dataset("lzf", data=np.arange(64, dtype="u1"), chunks=(16,), compression="lzf")
    f.create_dataset("szip", data=np.arange(64, dtype="i4"), chunks=(32,),
                     compression="szip")  # fmt: skip
    f.create_dataset("text", data=np.array([b"ab", b"cd"]), chunks=(1,))
    f.create_dataset("scaleoffset", data=np.arange(40, dtype="i4"), chunks=(20,),
                     scaleoffset=0)  # fmt: skip
    f.create_dataset("grow", shape=(3, 4), maxshape=(None, 4), chunks=(2, 2), dtype="f4")


def _compact_dcpl() -> Any:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    return dcpl


@pytest.mark.parametrize("libver", ["earliest", "v110", "latest"])
def test_native_creation_equals_hdf5(make_h5: Callable[..., Path], libver: str) -> None:
    """Layout messages 3, 4 and 5, filter pipelines 1 and 2, fill value messages 2 and 3."""
    path = make_h5(_variety, name=f"{libver}.h5", libver=(libver, "latest"))
    counts = compare_with_hdf5(path)
    # scaleoffset's 20 client values are more than h5py's get_filter reads: left to HDF5
    assert counts == {"native": 11, "fallback: filter 6 with 20 client values": 1}, counts


def test_index_uses_native_creation(make_h5: Callable[..., Path],
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Indexing copies no creation property list out of HDF5 for the datasets decoded, and
    gives the same sidecar as HDF5's lists do."""
    path = make_h5(_variety, libver=("v110", "latest"))
    refs = index_granule(str(path))
    copied: list[str] = []
    real = NativeCreation.__getattr__

    def counting(self: NativeCreation, name: str) -> Any:
        copied.append(name)
        return real(self, name)

    monkeypatch.setattr(NativeCreation, "__getattr__", counting)
    native_refs = index_granule(str(path))
    # HDF5's list only for what is not decoded: the fill value of the bytes dataset
    assert set(copied) == {"get_fill_value"}, copied
    monkeypatch.setattr(NativeAttrs, "attach_creation", lambda self, dset: False)
    plain = index_granule(str(path))
    docs = []
    for i, r in enumerate((native_refs, plain)):
        out = path.with_name(f"{i}.json")
        write_json(r, out)
        docs.append(_strip(json.loads(out.read_text())))
    assert docs[0] == docs[1]
    assert set(refs.arrays) == set(native_refs.arrays)


def _strip(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _strip(v) for k, v in doc.items() if k not in ("created", "index_seconds")}
    if isinstance(doc, str) and '"created"' in doc:
        return _strip(json.loads(doc))
    return doc


@pytest.mark.corpus
def test_corpus_creation_equals_hdf5(corpus_dir: Path) -> None:
    """Every dataset of every corpus file: the decoded properties equal HDF5's; most are
    decoded."""
    totals: Counter[str] = Counter()
    for name in corpus_hdf5_names():
        path = corpus_dir / "files" / name
        try:
            h5py.File(path, "r").close()
        except OSError:
            continue  # HDF5 itself refuses the file (the conformance tests pin why)
        totals.update(compare_with_hdf5(path))
    fallbacks = sum(n for k, n in totals.items() if k != "native")
    assert totals["native"] > 3 * fallbacks, totals
