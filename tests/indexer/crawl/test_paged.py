"""Granules written with paged aggregation: HDF5 reads their metadata a page at a time.

Without HDF5's page buffer every object header, heap block and B-tree node of such a file was
read on its own through the file object (locally a Python call each, over S3 a round trip
each time the crawl had not fetched it yet).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar.indexer import index_granule
from h5sidecar.indexer._granule import index_open_granule
from h5sidecar.indexer.crawl import _hints as hints
from h5sidecar.indexer.crawl._h5file import PAGE_BUFFER_BYTES, OpenGranule, open_granule
from h5sidecar.indexer.crawl._source_file import SourceStats, open_source
from h5sidecar.references import GranuleRefs, gc_paused, to_kerchunk
from h5sidecar.settings import IndexSettings
from h5sidecar.sources.fetch._pages import PAGE as CACHE_PAGE
from tests.faultproxy import FaultProxy
from tests.indexer._compare import assert_values_equal, h5_read, open_refs
from tests.indexer.crawl.test_source import _Recorder, crawl, write_granule

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


# -- over S3: the crawl fetches HDF5's pages before HDF5 asks ------------------------------------
def _paged_with_strings(path: Path) -> Path:
    """The paged granule, plus scalar variable-length string datasets: their heap IDs are
    contiguous raw data in raw-data pages, their strings in global heap collections."""
    _paged_granule(path)
    with h5py.File(path, "a") as f:
        for i in range(6):
            f.create_dataset(f"METADATA/item{i}/text", data=f"text {i} " * (400 * i + 1),
                             dtype=h5py.string_dtype())
    return path


def _index_over_s3(url: str, options: dict[str, object], prefetch: bool = True,
                   ) -> tuple[GranuleRefs, SourceStats]:
    # a small object is fetched whole unless told otherwise: here the crawl is what is tested
    settings = IndexSettings(source_whole_object_bytes=0)
    # as index_granule does: h5py reads through the fetcher's I/O thread holding its global
    # lock, so a garbage collection there that frees an h5py object would wait for it forever
    with gc_paused(), open_source(url, storage_options=options, settings=settings,
                                  prefetch=prefetch) as f:  # fmt: skip
        with h5py.File(f, "r", page_buf_size=PAGE_BUFFER_BYTES) as h5:
            granule = OpenGranule(h5, f.identity, f)
            refs = index_open_granule(granule, settings, options)
        return refs, f.stats


@pytest.mark.parametrize("paged", [True, False], ids=["paged", "latest"])
def test_hdf5_seldom_waits_for_the_network(
    paged: bool, tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, object],
    proxy: FaultProxy,
) -> None:
    """The crawl fetches ahead what HDF5 reads: a paged file's whole pages (HDF5's page buffer
    reads them whole), the strings of variable-length attributes (dense storage too) and
    datasets, and the data blocks of chunk indexes.  Before, each of those was fetched when
    HDF5 asked for it, one request after another (7 on the paged granule, 5 on the other)."""
    path = tmp_path / "granule.h5"
    _paged_with_strings(path) if paged else write_granule(path, "latest")
    url = f"s3://{s3_bucket}/{path.name}"
    s3.put(str(path), url)
    proxy.delay = 0.05  # a request is surely slower than the crawl's parsing
    options = {**s3_storage_options, "endpoint_url": proxy.url}
    refs, stats = _index_over_s3(url, options)
    proxy.delay = 0  # without the crawl, HDF5's reads are one after another whatever the delay
    _, plain = _index_over_s3(url, options, prefetch=False)
    # demand requests: the head, the superblock extension's, at most one more
    assert stats.requests - stats.prefetch_requests <= 3 < plain.requests
    # no more bytes than HDF5 reads (plus what the indexer reads itself), and not one
    # reference differs from the local file's
    assert stats.bytes_fetched <= 1.25 * plain.bytes_fetched
    assert to_kerchunk(refs)["refs"] == _local_refs(path, url)


def _local_refs(path: Path, url: str) -> dict[str, Any]:
    refs = to_kerchunk(index_granule(str(path)))["refs"]
    return json.loads(json.dumps(refs).replace(json.dumps(str(path))[1:-1], url))


def test_the_page_size_of_a_paged_file_is_found(tmp_path: Path) -> None:
    """In the superblock extension's File Space Info message, also when the extension is a
    version-1 header whose messages sit in a continuation chunk (a paged file opened again
    with the default libver); 0 for every file that is not paged."""
    files = {"paged": _paged_granule(tmp_path / "paged.h5"),
             "reopened": _paged_with_strings(tmp_path / "reopened.h5")}
    for name, kw in {"fsm": {"fs_strategy": "fsm", "fs_persist": True},
                     "latest": {}, "earliest": {"libver": "earliest"}}.items():
        with h5py.File(tmp_path / f"{name}.h5", "w", **{"libver": "latest", **kw}) as f:
            f["x"] = np.arange(10)
        files[name] = tmp_path / f"{name}.h5"
    found = {}
    for name, path in files.items():
        data = path.read_bytes()
        layout, _ = hints.find_superblock(lambda a, b: data[a:b], len(data))  # noqa: B023
        found[name] = hints.file_space_page(lambda a, b: data[a:b], layout)  # noqa: B023
    assert found == {"paged": PAGE, "reopened": PAGE, "fsm": 0, "latest": 0, "earliest": 0}


def test_hints_locate_every_page_an_index_reads(tmp_path: Path) -> None:
    """Every file page HDF5 reads while the indexer reads attributes and values (strings of
    variable-length attributes and datasets included) holds a structure the hints locate."""
    path = _paged_with_strings(tmp_path / "paged.h5")
    recorder = _Recorder(path)
    with h5py.File(recorder, "r", page_buf_size=PAGE_BUFFER_BYTES) as f:
        f.visititems(_read_what_an_index_reads)
    read = {off // PAGE for off, n in recorder.reads if n}
    located = {p * CACHE_PAGE // PAGE for p in crawl(path)[0]}
    assert read <= located, f"pages read but not located: {sorted(read - located)}"


def _read_what_an_index_reads(_: str, obj: Any) -> None:
    """Attributes, and the values of string datasets (which the indexer inlines)."""
    dict(obj.attrs.items())
    if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "O":
        obj[()]


@pytest.mark.parametrize("layout", ["compact", "contiguous", "dense attributes"])
def test_hints_reach_the_strings_of_variable_length_values(layout: str, tmp_path: Path) -> None:
    """A global heap collection is found from a variable-length dataset's values (compact:
    in its header; contiguous: in its raw data) and from dense attribute storage."""
    path = tmp_path / "strings.h5"
    with h5py.File(path, "w", libver="latest") as f:
        if layout == "dense attributes":
            g = f.create_group("g")
            for i in range(12):  # more than 8: dense storage
                g.attrs[f"a{i}"] = f"value {i}"
        else:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT if layout == "compact" else h5py.h5d.CONTIGUOUS)
            f.create_dataset("s", data=np.array(["one", "two", "three"], dtype=object),
                             dtype=h5py.string_dtype(), dcpl=dcpl)
    data = path.read_bytes()
    collections = {i for i in range(len(data)) if data.startswith(b"GCOL", i)}
    assert collections

    def view(start: int, stop: int) -> bytes:
        return data[start:stop]

    layout_, todo = hints.find_superblock(view, len(data))
    found: set[tuple[str, int]] = set()
    while todo:
        hint = todo.pop()
        if (hint.kind, hint.addr) not in found:
            found.add((hint.kind, hint.addr))
            todo += hints.expand(hint, view, layout_)
    assert collections <= {addr for kind, addr in found if kind == "gcol"}
