"""Fixed-length strings, the whole family: every padding, character set, layout and shape.

HDF5 fixed-length strings carry a padding rule (``H5T_STR_NULLTERM``, ``NULLPAD``, ``SPACEPAD``)
and a character set (ASCII, UTF-8).  A value may fill every byte of its type (ICESat-2 writes its
UTC time strings that way, ``NULLTERM`` with no room for the terminator), be shorter, or be
empty.  Each combination, in compact, contiguous and chunked datasets, scalar and arrays, and as
attributes, must read back as h5py reads it through plain zarr over both sidecar formats and
through h5sidecar's own reader.  The files are written with h5py's low-level API so the bytes in
the file are exactly the ones given (no conversion on write).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from h5py import h5d, h5p, h5s, h5t

from h5sidecar.indexer import index_granule
from h5sidecar.read import SidecarStore
from h5sidecar.references import write_json, write_parquet
from tests.indexer._compare import assert_values_equal, open_plain

PADS = {"nullterm": h5t.STR_NULLTERM, "nullpad": h5t.STR_NULLPAD, "spacepad": h5t.STR_SPACEPAD}
CSETS = {"ascii": h5t.CSET_ASCII, "utf8": h5t.CSET_UTF8}
LAYOUTS = ("compact", "contiguous", "chunked")
SIZE = 27
#: full-length (no room for a terminator), shorter, empty, and UTF-8 text filling every byte
VALUES = {
    "full": b"2019-03-21T15:06:30.123456Z",
    "short": b"ATL03",
    "empty": b"",
    "utf8_full": ("caf\u00e9 \u00e0 la cr\u00e8me br\u00fbl\u00e9e!!").encode()[:SIZE],
}


def _string_type(pad: int, cset: int, size: int = SIZE) -> h5t.TypeID:
    tid = h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(pad)
    tid.set_cset(cset)
    return tid


def _write(
    group: h5py.Group, name: str, tid: h5t.TypeID, data: np.ndarray, layout: str
) -> None:
    """A dataset holding exactly ``data``'s bytes (written with the file type as memory type)."""
    space = h5s.create_simple(data.shape) if data.shape else h5s.create(h5s.SCALAR)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    if layout == "compact":
        dcpl.set_layout(h5d.COMPACT)
    elif layout == "chunked":
        dcpl.set_chunk(tuple(max(1, (s + 1) // 2) for s in data.shape))
    dsid = h5d.create(group.id, name.encode(), tid, space, dcpl=dcpl)
    dsid.write(h5s.ALL, h5s.ALL, np.ascontiguousarray(data), mtype=tid)


def _write_attr(obj: h5py.HLObject, name: str, tid: h5t.TypeID, data: np.ndarray) -> None:
    space = h5s.create_simple(data.shape) if data.shape else h5s.create(h5s.SCALAR)
    aid = h5py.h5a.create(obj.id, name.encode(), tid, space)
    aid.write(np.ascontiguousarray(data), mtype=tid)


def _values(kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if not shape:
        return np.array(VALUES[kind], dtype=f"S{SIZE}")
    pool = [VALUES[kind], b"x", VALUES["full"], b""]
    flat = [pool[i % len(pool)] for i in range(int(np.prod(shape)))]
    return np.array(flat, dtype=f"S{SIZE}").reshape(shape)


CASES = [
    (pad, cset, layout, shape, kind)
    for pad, cset, layout, shape, kind in itertools.product(
        PADS, CSETS, LAYOUTS, [(), (5,), (3, 2)], VALUES
    )
    if not (layout == "chunked" and shape == ())  # a scalar cannot be chunked
]


def _name(pad: str, cset: str, layout: str, shape: tuple[int, ...], kind: str) -> str:
    dims = "x".join(str(s) for s in shape) or "scalar"
    return f"{pad}_{cset}_{layout}_{dims}_{kind}"


@pytest.fixture(scope="module")
def string_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("strings") / "strings.h5"
    with h5py.File(path, "w") as f:
        for pad, cset, layout, shape, kind in CASES:
            tid = _string_type(PADS[pad], CSETS[cset])
            _write(f, _name(pad, cset, layout, shape, kind), tid, _values(kind, shape), layout)
        holder = f.create_group("attrs")
        for pad, cset, shape, kind in itertools.product(PADS, CSETS, [(), (3,)], VALUES):
            tid = _string_type(PADS[pad], CSETS[cset])
            _write_attr(holder, _name(pad, cset, "attr", shape, kind), tid, _values(kind, shape))
    return path


@pytest.fixture(scope="module")
def readers(string_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    refs = index_granule(str(string_file))
    out = tmp_path_factory.mktemp("sidecars")
    write_json(refs, out / "s.json")
    write_parquet(refs, out / "s.parq")
    import zarr

    return {
        "refs": refs,
        "json": open_plain(str(out / "s.json")),
        "parquet": open_plain(str(out / "s.parq")),
        "h5sidecar": zarr.open_group(SidecarStore(out / "s.parq"), mode="r", zarr_format=2),
        "native": SidecarStore(out / "s.parq").native,
    }


def test_every_string_variable_is_indexed(readers: dict[str, Any]) -> None:
    refs = readers["refs"]
    assert refs.skipped == ()
    assert sorted(refs.arrays) == sorted(_name(*c) for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[_name(*c) for c in CASES])
def test_string_values_read_back_as_h5py_reads_them(
    case: tuple[Any, ...], string_file: Path, readers: dict[str, Any]
) -> None:
    name = _name(*case)
    with h5py.File(string_file) as h5:
        dset = h5[name]
        want = dset[()]
        for reader in ("json", "parquet", "h5sidecar"):
            got = readers[reader][name][...]
            assert_values_equal(got, want, dset, f"{name} ({reader})")
            # the bytes too, not only their text: no padding or terminator may leak
            assert np.asarray(got).tolist() == np.asarray(want).tolist(), f"{name} ({reader})"
        native = readers["native"]
        if native.supports(name):
            key = tuple(slice(None) for _ in dset.shape)
            (got,) = native.read_sync([(name, key)])
            assert np.asarray(got).tolist() == np.asarray(want).tolist(), f"{name} (native)"


def test_a_full_length_nullterm_compact_scalar_is_indexed(tmp_path: Path) -> None:
    """The ICESat-2 ``ancillary_data/*_utc`` shape of the value (regression: the whole granule
    failed with "When changing to a larger dtype ..."), also when h5py's write truncated it."""
    path = tmp_path / "utc.h5"
    with h5py.File(path, "w") as f:
        anc = f.create_group("ancillary_data")
        tid = _string_type(h5t.STR_NULLTERM, h5t.CSET_ASCII)
        _write(anc, "data_start_utc", tid, np.array(VALUES["full"], f"S{SIZE}"), "compact")
        # written through a NULLPAD memory type, HDF5 keeps room for the terminator
        space = h5s.create(h5s.SCALAR)
        dcpl = h5p.create(h5p.DATASET_CREATE)
        dcpl.set_layout(h5d.COMPACT)
        dsid = h5d.create(anc.id, b"data_end_utc", tid, space, dcpl=dcpl)
        dsid.write(h5s.ALL, h5s.ALL, np.array(VALUES["full"], f"S{SIZE}"))
        anc.create_dataset("numbers", data=np.arange(3))
    refs = index_granule(str(path))
    assert refs.skipped == ()
    group = open_plain(write_json(refs, tmp_path / "utc.json"))
    with h5py.File(path) as h5:
        for name in ("data_start_utc", "data_end_utc"):
            want = h5["ancillary_data"][name][()]
            assert group[f"ancillary_data/{name}"][()] == want
    assert group["ancillary_data/data_start_utc"][()] == VALUES["full"]
    assert group["ancillary_data/data_end_utc"][()] == VALUES["full"][:-1]


def _attr_text(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_attr_text(v) for v in value.tolist()]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def test_string_attributes_read_back_as_h5py_reads_them(
    string_file: Path, readers: dict[str, Any]
) -> None:
    with h5py.File(string_file) as h5:
        attrs = dict(h5["attrs"].attrs)
    assert attrs
    for reader in ("json", "parquet", "h5sidecar"):
        got = dict(readers[reader]["attrs"].attrs)
        assert set(got) == set(attrs), reader
        for name, value in attrs.items():
            want = _attr_text(value)
            if isinstance(want, list) and len(want) == 1:
                want = want[0]  # one-element arrays are unpacked, as netCDF readers do
            assert got[name] == want, f"{name} ({reader}): {got[name]!r} != {want!r}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bytes_after_a_terminator_are_dropped_as_hdf5_drops_them(
    tmp_path: Path, layout: str
) -> None:
    """NULLTERM values with bytes after the NUL (a reused write buffer): HDF5 reads up to the
    NUL, a raw ``|S`` reference would show the rest; NULLPAD keeps them in both."""
    path = tmp_path / "garbage.h5"
    data = np.array([b"AB\0XYZ", b"Q", b"full-len"], "S8")
    with h5py.File(path, "w") as f:
        for pad in ("nullterm", "nullpad"):
            _write(f, pad, _string_type(PADS[pad], h5t.CSET_ASCII, 8), data, layout)
    refs = index_granule(str(path))
    group = open_plain(write_json(refs, tmp_path / "g.json"))
    with h5py.File(path) as h5:
        for name in ("nullterm", "nullpad"):
            assert group[name][...].tolist() == h5[name][()].tolist(), name
    assert group["nullterm"][0] == b"AB"
    assert group["nullpad"][0] == b"AB\0XYZ"
    assert "bytes after the terminator" in refs.arrays["nullterm"].note
