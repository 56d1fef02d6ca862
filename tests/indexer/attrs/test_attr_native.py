"""Attributes decoded from the metadata bytes (:mod:`h5sidecar.indexer.attrs._native`) are exactly
what h5py reads: value, value type and dtype, names and their order, for every object of every
corpus file and of files written here with every attribute type and storage; what the native
path does not decode falls back to h5py, and the converted attributes (``read_attrs``) are the
same either way."""

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

from h5sidecar.indexer import index_granule, open_source
from h5sidecar.indexer._values import to_json
from h5sidecar.indexer._walk import object_key
from h5sidecar.indexer.attrs._native import NativeAttrs
from h5sidecar.indexer.attrs._netcdf_types import netcdf_view, type_spec
from h5sidecar.indexer.attrs._zarr_attrs import read_attrs
from h5sidecar.references import typed_value
from tests.conftest import corpus_hdf5_names

Builder = Callable[[h5py.File], Any]


def _same(got: Any, want: Any) -> bool:
    """Equal values of the same Python and numpy types (dtype metadata included)."""
    if type(got) is not type(want):
        return False
    if isinstance(want, h5py.Empty):
        return bool(got.dtype == want.dtype and got.dtype.metadata == want.dtype.metadata)
    if isinstance(want, np.ndarray):
        if (got.dtype, got.shape, got.dtype.metadata) != (want.dtype, want.shape,
                                                            want.dtype.metadata):  # fmt: skip
            return False
        if want.dtype.kind == "O":
            return all(
                type(a) is type(b) and a == b for a, b in zip(got.flat, want.flat, strict=True)
            )
        return got.dtype.str == want.dtype.str and got.tobytes() == want.tobytes()
    if isinstance(want, np.generic):
        return bool(got.dtype.str == want.dtype.str and got.tobytes() == want.tobytes())
    return bool(got == want)


def _objects(f: h5py.File) -> list[h5py.HLObject]:
    found: list[h5py.HLObject] = [f]

    def visit(_: str, obj: Any) -> None:
        if isinstance(obj, h5py.Group | h5py.Dataset):
            found.append(obj)

    with contextlib.suppress(KeyError, OSError, RuntimeError, ValueError):  # HDF5 cannot open one
        f.visititems(visit)
    return found


def compare_with_h5py(path: Path) -> Counter[str]:
    """Compare the native reading of every attribute of every object of ``path`` with h5py's;
    count objects served / left to h5py and attributes decoded / left to h5py."""
    counts: Counter[str] = Counter()
    with open_source(str(path)) as src, h5py.File(src, "r") as f:
        native = NativeAttrs(f, src)
        for obj in _objects(f):
            decoded = native.read(obj)
            if decoded is None:
                counts["objects_fallback"] += 1
                continue
            counts["objects_native"] += 1
            assert [d.name for d in decoded] == list(obj.attrs), obj.name
            _check_lookup(native, obj, [d.name for d in decoded if isinstance(d.name, str)])
            counts["dimension_lists_native"] += _check_dimension_list(native, f, obj)
            for d in decoded:
                try:
                    want = obj.attrs[d.name]
                    want_dtype = obj.attrs.get_id(d.name).dtype
                except (OSError, TypeError, ValueError, KeyError, RuntimeError):
                    assert d.value is None, (path, obj.name, d.name)  # h5py fails: so do we
                    counts["attrs_fallback"] += 1
                    continue
                if d.value is None:
                    counts["attrs_fallback"] += 1
                    continue
                counts["attrs_native"] += 1
                where = (path.name, obj.name, d.name, d.value, want)
                assert _same(d.value, want), where
                assert d.dtype == want_dtype and d.dtype.metadata == want_dtype.metadata, where
    return counts


#: what the dimension namer looks up (most arrays have none of them)
LOOKED_UP = ["DIMENSION_LIST", "DIMENSION_LABELS", "_Netcdf4Dimid", "_Netcdf4Coordinates", "nope"]


def _check_lookup(native: NativeAttrs, obj: h5py.HLObject, names: list[str]) -> None:
    """``lookup`` gives ``obj.attrs.get(name)`` whenever it says it knows it."""
    for name in [*names, *LOOKED_UP]:
        known, value = native.lookup(obj, name)
        if not known:
            assert name in names, (obj.name, name)  # only attributes it could not decode
            continue
        try:
            want = obj.attrs.get(name)
        except (OSError, TypeError, ValueError, KeyError, RuntimeError):
            raise AssertionError((obj.name, name, "h5py fails where lookup answered")) from None
        assert (value is None and want is None) or _same(value, want), (obj.name, name)


def _check_dimension_list(native: NativeAttrs, f: h5py.File, obj: h5py.HLObject) -> bool:
    """``dimension_list`` gives the keys of what h5py's ``DIMENSION_LIST`` references open
    (address 0 for a null reference); True when it answered for a list it has."""
    keys = native.dimension_list(obj)
    if keys is None:
        return False
    try:
        value = obj.attrs.get("DIMENSION_LIST")
    except (OSError, TypeError, ValueError, KeyError, RuntimeError):
        raise AssertionError((obj.name, "h5py fails where dimension_list answered")) from None
    if value is None:
        assert keys == [], obj.name
        return False
    want = [
        [object_key(f[ref]) if ref else (native.fileno, 0) for ref in np.atleast_1d(axis)]
        for axis in np.asarray(value, dtype=object).reshape(-1)
    ]
    assert keys == want, obj.name
    return True


def _results_match(path: Path) -> None:
    """``read_attrs`` converts the same attributes with and without the native reader."""
    with open_source(str(path)) as src, h5py.File(src, "r") as f:
        native = NativeAttrs(f, src)
        for obj in _objects(f):
            with_native = read_attrs(obj, lambda r: None, native=native)
            plain = read_attrs(obj, lambda r: None)
            assert list(with_native.attrs) == list(plain.attrs), obj.name
            assert json.dumps(with_native.attrs) == json.dumps(plain.attrs), obj.name  # NaN too
            assert (with_native.dropped, with_native.escaped, with_native.types) == (
                plain.dropped, plain.escaped, plain.types), obj.name  # fmt: skip


# -- files written here ---------------------------------------------------------------------------
def _fixed(obj: h5py.HLObject, name: bytes, raw: bytes, size: int, pad: int, cset: int,
           shape: tuple[int, ...] = ()) -> None:  # fmt: skip
    """A fixed-length string attribute written byte for byte (no conversion on the way)."""
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(pad)
    tid.set_cset(cset)
    space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
    attr = h5py.h5a.create(obj.id, name, tid, space)
    attr.write(np.frombuffer(raw, dtype=f"S{size}").reshape(shape), mtype=tid)


def _many_types(obj: h5py.HLObject) -> None:
    a = obj.attrs
    a["i8"] = np.int8(-3)
    a["u64"] = np.uint64(2**63 + 5)
    a["i16_be"] = np.array(-7, dtype=">i2")
    a["f32_be"] = np.array([1.5, -2.25], dtype=">f4")
    a["f64"] = 0.1
    a["f16"] = np.float16(3.5)
    a["grid"] = np.arange(12, dtype="<u2").reshape(3, 4)
    a["zero_len"] = np.zeros((0,), "i4")
    a["empty_f"] = h5py.Empty("f4")
    a["empty_s"] = h5py.Empty("S3")
    a.create("vlen_utf8", "héllo wörld", dtype=h5py.string_dtype("utf-8"))
    a.create("vlen_ascii", b"plain", dtype=h5py.string_dtype("ascii"))
    a.create("vlen_empty", "", dtype=h5py.string_dtype("utf-8"))
    a.create("vlen_list", ["a", "bc", "", "dé"], dtype=h5py.string_dtype("utf-8"))
    a.create("vlen_bad", np.array([b"\xff\xfeok"], dtype=h5py.string_dtype("ascii")))
    a["fixed_list"] = np.array([b"ab", b"cde", b""], dtype="S3")
    a["one_char"] = np.bytes_(b"x")
    a.create("arr_type", np.zeros((), dtype=("<i4", (3,))) + 7, dtype=("<i4", (3,)))
    a.create("arr_of_2", np.ones(2, dtype=(">f8", (2, 2))), dtype=(">f8", (2, 2)))
    a.create("arr_str", np.array([(b"ab", b"c")], dtype=("S2", (2,))), dtype=("S2", (2,)))
    a["bool"] = True  # an enum: left to h5py
    a["complex"] = np.complex64(1 + 2j)  # a compound: left to h5py
    a["compound"] = np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])
    a["ref"] = obj.ref  # an object reference: left to h5py
    a["opaque"] = np.void(b"\x01\x02")
    a["long_double"] = np.longdouble(1.25)
    for pad in (h5py.h5t.STR_NULLTERM, h5py.h5t.STR_NULLPAD, h5py.h5t.STR_SPACEPAD):
        for cset in (h5py.h5t.CSET_ASCII, h5py.h5t.CSET_UTF8):
            stem = f"s{pad}{cset}".encode()
            _fixed(obj, stem + b"_full", b"abcdef", 6, pad, cset)
            _fixed(obj, stem + b"_nul", b"ab\0cd\0", 6, pad, cset)
            _fixed(obj, stem + b"_sp", b"ab  \0 ", 6, pad, cset)
            _fixed(obj, stem + b"_arr", b"x  \0yz\0 w", 3, pad, cset, (3,))
            _fixed(obj, stem + b"_utf", "é ".encode(), 3, pad, cset)
    _fixed(obj, b"\xff\xfenot_utf8", b"abc", 3, h5py.h5t.STR_NULLPAD, h5py.h5t.CSET_ASCII)
    a["n" * 300] = 1  # a long name


def _dense_storage(f: h5py.File) -> None:
    many = f.create_dataset("many", data=np.arange(4))
    for i in range(40):
        many.attrs[f"attr_{39 - i:02d}"] = np.arange(i % 5, dtype="f8")
    for i in range(0, 40, 7):  # free space in the heap and the B-tree
        del many.attrs[f"attr_{i:02d}"]
    big = f.create_group("big")
    for i in range(30):
        big.attrs[f"text_{i}"] = "x" * (50 * i)  # direct blocks of an indirect root block
        big.attrs[f"blob_{i}"] = np.full(10 * i + 1, i, dtype="i8")


def _scales(f: h5py.File) -> None:
    """Dimension scales (``DIMENSION_LIST``: sequences of references), several on one axis,
    an axis without."""
    x = f.create_dataset("x", data=np.arange(3))
    x.make_scale("x")
    y = f.create_dataset("g/y", data=np.arange(2))
    y.make_scale()
    y2 = f.create_dataset("g/y2", data=np.arange(2))
    y2.make_scale()
    v = f.create_dataset("g/v", data=np.zeros((2, 3, 4)))
    v.dims[0].attach_scale(y)
    v.dims[0].attach_scale(y2)
    v.dims[1].attach_scale(x)
    for i in range(10):  # dense storage on "latest"
        v.attrs[f"a{i}"] = i


def _tracked(f: h5py.File) -> None:
    g = f.create_group("tracked", track_order=True)
    for name in ("zeta", "alpha", "mu"):
        g.attrs[name] = name
    d = f.create_dataset("tracked_dense", data=[1], track_order=True)
    for i in range(25):
        d.attrs[f"k{(i * 7) % 25}"] = i


def _continuations(f: h5py.File) -> None:
    """Attributes added after other objects were written: the header grows continuation
    chunks."""
    objs = [f.create_dataset(f"d{i}", data=np.arange(3)) for i in range(4)]
    for round_ in range(6):
        for obj in objs:
            obj.attrs[f"later_{round_}"] = np.arange(round_ * 20, dtype="i4")
            f.create_group(f"pad_{round_}_{obj.name[1:]}")


BUILDS: dict[str, Builder] = {
    "types": lambda f: _many_types(f.create_dataset("v", data=[1, 2])),
    "root": _many_types,
    "group": lambda f: _many_types(f.create_group("g")),
    "dense": _dense_storage,
    "tracked": _tracked,
    "continuations": _continuations,
    "scales": _scales,
}


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("build", list(BUILDS))
def test_native_attributes_equal_h5py(
    make_h5: Callable[..., Path], build: str, libver: str
) -> None:
    path = make_h5(BUILDS[build], libver=(libver, "latest"))
    counts = compare_with_h5py(path)
    assert counts["objects_fallback"] == 0, counts
    assert counts["attrs_native"] > counts["attrs_fallback"], counts
    if build == "scales":
        assert counts["dimension_lists_native"] == 1, counts
    _results_match(path)


def test_types_left_to_h5py(make_h5: Callable[..., Path]) -> None:
    """Enums, compounds, references, opaque and long doubles are read by h5py; the rest
    natively."""
    path = make_h5(lambda f: _many_types(f.create_dataset("v", data=[1])))
    with open_source(str(path)) as src, h5py.File(src, "r") as f:
        decoded = NativeAttrs(f, src).read(f["v"])
    assert decoded is not None
    left = {d.name for d in decoded if d.value is None}
    assert left == {"bool", "complex", "compound", "ref", "opaque", "long_double"}


def test_big_endian_file_types(make_h5: Callable[..., Path]) -> None:
    """Big-endian numbers keep h5py's dtype (``>i4``), arrays and scalars alike."""

    def build(f: h5py.File) -> None:
        f.attrs["be"] = np.arange(3, dtype=">i4")
        f.attrs["be_scalar"] = np.array(2.5, dtype=">f8")

    path = make_h5(build)
    counts = compare_with_h5py(path)
    assert counts["attrs_native"] == 2 and counts["attrs_fallback"] == 0


def test_huge_heap_objects_fall_back(make_h5: Callable[..., Path]) -> None:
    """Dense attributes too large for the heap's blocks (huge objects, in a B-tree of their
    own) are left to h5py, with the rest of their object's attributes."""

    def build(f: h5py.File) -> None:
        g = f.create_group("g")
        for i in range(12):
            g.attrs[f"a{i}"] = i
        g.attrs["huge"] = np.arange(5000, dtype="f8")

    path = make_h5(build, libver="latest")
    counts = compare_with_h5py(path)
    assert counts["objects_fallback"] == 1 and counts["objects_native"] == 1, counts
    _results_match(path)


def test_corrupt_heap_falls_back(make_h5: Callable[..., Path], tmp_path: Path) -> None:
    """A checksum mismatch in dense storage leaves the object to h5py (which then reports the
    error itself), never a guessed value."""
    path = make_h5(_dense_storage, libver="latest")
    data = bytearray(path.read_bytes())
    pos = data.find(b"FHDB")
    assert pos > 0
    data[pos + 40] ^= 0xFF
    bad = tmp_path / "bad.h5"
    bad.write_bytes(bytes(data))
    with open_source(str(bad)) as src, h5py.File(src, "r") as f:
        native = NativeAttrs(f, src)
        assert native.read(f["many"]) is None or native.read(f["big"]) is None
        assert native.fallbacks >= 1


def test_index_granule_same_attributes(make_h5: Callable[..., Path]) -> None:
    """A whole granule: attributes, type specs and what is left out, as h5py reads them."""
    path = make_h5(lambda f: (_dense_storage(f), _tracked(f), _many_types(f)), libver="latest")
    refs = index_granule(str(path))
    assert list(refs.groups["tracked"]) == ["zeta", "alpha", "mu"]
    assert list(refs.arrays["tracked_dense"].meta.attrs)[:3] == ["k0", "k7", "k14"]
    _results_match(path)


# -- the corpus -----------------------------------------------------------------------------------
@pytest.mark.corpus
def test_corpus_attributes_equal_h5py(corpus_dir: Path) -> None:
    """Every attribute of every object of every corpus file; the native path must serve most."""
    totals: Counter[str] = Counter()
    for name in corpus_hdf5_names():
        path = corpus_dir / "files" / name
        try:
            h5py.File(path, "r").close()
        except OSError:
            continue  # HDF5 itself refuses the file (the conformance tests pin why)
        totals.update(compare_with_h5py(path))
        _results_match(path)
    assert totals["objects_native"] > 10 * totals["objects_fallback"], totals
    assert totals["attrs_native"] > 5 * totals["attrs_fallback"], totals
    assert totals["dimension_lists_native"] > 20, totals


def test_over_s3_from_the_cache_only(
    make_h5: Callable[..., Path], s3: Any, s3_bucket: str, s3_storage_options: Any
) -> None:
    """Over S3 attributes are decoded from the bytes already fetched, without a request of
    their own, and the index equals the local one."""
    path = make_h5(lambda f: (_dense_storage(f), _tracked(f), _many_types(f)), libver="latest")
    url = f"s3://{s3_bucket}/attrs.h5"
    s3.put(str(path), url)
    with open_source(url, storage_options=s3_storage_options) as src, h5py.File(src, "r") as f:
        native = NativeAttrs(f, src)
        objects = _objects(f)
        before = src.stats.requests
        found = [native.read(obj) for obj in objects]
        assert src.stats.requests == before  # nothing fetched for the attributes
        assert native.served >= 3, (native.served, native.fallbacks)
        for obj, decoded in zip(objects, found, strict=True):
            for d in decoded or []:
                if d.value is not None:
                    assert _same(d.value, obj.attrs[d.name]), (obj.name, d.name)
    remote = index_granule(url, storage_options=s3_storage_options)
    local = index_granule(str(path))
    assert json.dumps({k: dict(v) for k, v in remote.groups.items()}) == json.dumps(
        {k: dict(v) for k, v in local.groups.items()}
    )
    for name, arr in local.arrays.items():
        got = remote.arrays[name].meta
        assert json.dumps(dict(got.attrs)) == json.dumps(dict(arr.meta.attrs)), name
        assert got.dimension_names == arr.meta.dimension_names, name
        assert remote.arrays[name].note == arr.note, name
    assert remote.extra.get("attribute_dtypes") == local.extra.get("attribute_dtypes")


def test_kept_attributes_bounded_by_bytes(make_h5: Callable[..., Path]) -> None:
    """The objects read last are kept up to a byte bound; read again after they left, their
    attributes are the same."""
    path = make_h5(lambda f: (_dense_storage(f), _many_types(f)), libver="latest")
    with open_source(str(path)) as src, h5py.File(src, "r") as f:
        native = NativeAttrs(f, src, keep_bytes=2000)
        objects = _objects(f)
        first = [native.read(obj) for obj in objects]
        again = [native.read(obj) for obj in reversed(objects)][::-1]
        assert native._kept <= 2000
        assert [[d.name for d in r or []] for r in first] == [
            [d.name for d in r or []] for r in again
        ]
        assert native.served > len(objects)  # parsed again once they left


def test_object_info_asked_once_per_object(
    make_h5: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dimension namer and the indexer ask for one object's attributes several times, in
    different orders: HDF5 is asked for the object's address (``H5Oget_info``) once, and the
    attributes are the same each time."""
    path = make_h5(lambda f: (_dense_storage(f), _many_types(f)), libver="latest")
    calls: Counter[str] = Counter()
    get_info = h5py.h5o.get_info

    def counting(oid: Any, *args: Any, **kwargs: Any) -> Any:
        calls[h5py.h5i.get_name(oid)] += 1
        return get_info(oid, *args, **kwargs)

    with open_source(str(path)) as src, h5py.File(src, "r") as f:
        native = NativeAttrs(f, src)
        objects = _objects(f)
        monkeypatch.setattr(h5py.h5o, "get_info", counting)
        rounds = [[native.read(obj) for obj in order] for order in (objects, objects[::-1])]
        monkeypatch.undo()
        for obj, got, again in zip(objects, rounds[0], rounds[1][::-1], strict=True):
            assert got is not None and [d.name for d in got] == list(obj.attrs)
            assert again is not None and [d.name for d in again] == list(obj.attrs)
            assert all(_same(a.value, b.value) for a, b in zip(got, again, strict=True))
    assert len(objects) > 2 and set(calls.values()) == {1}


def _scalars_and_texts(f: h5py.File) -> None:
    """Values the conversion's shortcuts (text as read, numbers by type and bytes) meet."""
    a = f.create_dataset("v", data=np.arange(2)).attrs
    for i, dtype in enumerate(["i1", "u1", "<i2", ">u2", "<i4", ">i4", "<u8", ">i8", "<f2",
                               ">f2", "<f4", ">f4", "<f8", ">f8"]):  # fmt: skip
        kind = np.dtype(dtype).kind
        a[f"n{i}"] = np.array(np.iinfo(dtype).max if kind in "iu" else 1.5, dtype=dtype)
        a[f"m{i}"] = np.array(np.iinfo(dtype).min if kind in "iu" else -0.0, dtype=dtype)
    a["nan_payload"] = np.frombuffer(b"\x01\x00\xc0\x7f", dtype="<f4")[0]
    a["inf"], a["tiny"] = np.float64(-np.inf), np.float32(1e-45)
    a["_FillValue"], a["same_again"] = np.float32(-9999.0), np.float32(-9999.0)
    a["text"], a["empty_text"] = "plain text é", ""
    a.create("not_utf8", data=b"caf\xe9 \x80", dtype=h5py.string_dtype("utf-8"))
    a.create("not_utf8_ascii", data=b"\xff", dtype=h5py.string_dtype("ascii"))


def test_shortcuts_convert_as_the_general_path(make_h5: Callable[..., Path]) -> None:
    """Text and numeric scalars, recorded without the general conversion, give exactly what
    it gives (JSON value, type spec, dtype), and the spec gives h5py's value back."""
    path = make_h5(_scalars_and_texts)
    with open_source(str(path)) as src, h5py.File(src, "r") as f:
        obj = f["v"]
        result = read_attrs(obj, lambda r: None, native=NativeAttrs(f, src))
        assert set(result.attrs) == set(obj.attrs) and not result.dropped
        for name in obj.attrs:
            value = obj.attrs[name]
            dtype = obj.attrs.get_id(name).dtype
            view = netcdf_view(name, value, dtype)
            stored = to_json(view, lambda r: None)
            spec = type_spec(name, view, stored)
            assert json.dumps(result.attrs[name]) == json.dumps(stored), name  # NaN too
            assert type(result.attrs[name]) is type(stored), name
            assert result.types.get(name) == spec, name
            assert result.dtypes[name] == dtype, name
            back = typed_value(stored, spec) if spec is not None else stored
            assert _same(back, view), name
