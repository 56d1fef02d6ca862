"""Datatypes: what is referenced in place, what is decoded into the sidecar, what is skipped."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from h5sidecar.indexer import ENUMS_KEY, REFERENCES_KEY, index_granule
from h5sidecar.indexer._values import fill_value_json
from h5sidecar.indexer.dtypes._dtype_plan import plan_dtype
from tests.indexer._compare import assert_refs_match_h5py, open_refs


def _lowlevel(f: h5py.File, name: str, tid: h5py.h5t.TypeID, data: np.ndarray, mtype=None):
    space = h5py.h5s.create_simple(data.shape) if data.shape else h5py.h5s.create(h5py.h5s.SCALAR)
    dsid = h5py.h5d.create(f.id, name.encode(), tid, space)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=mtype)


NUMERIC = ["<i1", ">i2", "<i4", ">i8", "|u1", ">u2", "<u4", ">u8", "<f2", ">f4", "<f8", "|b1"]


@pytest.mark.parametrize("dtype", NUMERIC)
def test_numeric_types_are_referenced_in_place(make_h5, dtype: str) -> None:
    data = (np.arange(24) % 2 == 0) if dtype == "|b1" else np.arange(24).astype(dtype)
    path = make_h5(lambda f: f.create_dataset("x", data=data.reshape(4, 6), chunks=(2, 3)))
    refs = index_granule(str(path))
    arr = refs.arrays["x"]
    assert arr.meta.dtype == np.dtype(dtype).str and arr.status == "virtual"
    assert_refs_match_h5py(refs, path)


@pytest.mark.parametrize("dtype", ["<c8", ">c16"])
def test_complex_compounds(make_h5, dtype: str) -> None:
    data = (np.arange(6) + 1j * np.arange(6)[::-1]).astype(dtype)
    path = make_h5(lambda f: f.create_dataset("z", data=data))
    with h5py.File(path) as f:
        assert f["z"].id.get_type().get_class() in (h5py.h5t.COMPOUND, h5py.h5t.COMPLEX)
    refs = index_granule(str(path))
    assert refs.arrays["z"].meta.dtype == dtype
    assert_refs_match_h5py(refs, path)


def test_enum_keeps_base_integers_and_the_mapping(make_h5) -> None:
    dt = h5py.enum_dtype({"RED": 0, "GREEN": 1, "BLUE": 42}, basetype="i1")
    path = make_h5(lambda f: f.create_dataset("e", data=np.array([0, 42, 1], "i1"), dtype=dt))
    refs = index_granule(str(path))
    arr = refs.arrays["e"]
    assert arr.meta.dtype == "|i1"
    # the mapping is in the extras, not an attribute (h5netcdf shows none)
    assert dict(arr.meta.attrs) == {}
    assert refs.extra[ENUMS_KEY] == {"e": {"RED": 0, "GREEN": 1, "BLUE": 42}}
    assert_refs_match_h5py(refs, path)


def test_bitfield(make_h5) -> None:
    data = np.array([1, 2, 0xFFFF, 7], "<u2")
    path = make_h5(lambda f: _lowlevel(f, "b", h5py.h5t.STD_B16LE, data, h5py.h5t.STD_B16LE))
    refs = index_granule(str(path))
    assert refs.arrays["b"].meta.dtype == "<u2"
    assert_refs_match_h5py(refs, path)


def _string_type(size: int, pad: int) -> h5py.h5t.TypeID:
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(pad)
    return tid


def test_fixed_strings_nullpad_nullterm_and_spacepad(make_h5) -> None:
    words = np.array([b"abc", b"de", b"fghijk"], "S8")

    def build(f: h5py.File) -> None:
        f.create_dataset("nullpad", data=words)
        _lowlevel(f, "nullterm", _string_type(8, h5py.h5t.STR_NULLTERM), words)
        _lowlevel(
            f,
            "spacepad",
            _string_type(8, h5py.h5t.STR_SPACEPAD),
            words,
            _string_type(8, h5py.h5t.STR_NULLPAD),
        )

    path = make_h5(build)
    with h5py.File(path) as f:
        offset = f["spacepad"].id.get_offset()
    assert path.read_bytes()[offset : offset + 8] == b"abc     "  # really space-padded
    refs = index_granule(str(path))
    assert refs.arrays["nullpad"].status == "virtual"
    assert refs.arrays["nullterm"].status == "virtual"
    assert refs.arrays["spacepad"].status == "inlined"
    assert "space-padded" in refs.arrays["spacepad"].note
    group = assert_refs_match_h5py(refs, path)
    assert group["spacepad"][0] == b"abc"


def test_vlen_strings_are_materialised(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f.create_dataset("utf8", data=["héllo", "", "wörld"], dtype=h5py.string_dtype("utf-8"))
        f.create_dataset("ascii", data=[b"a", b"bc"], dtype=h5py.string_dtype("ascii"))
        f.create_dataset("binary", data=[b"\xff\xfe", b"ok"], dtype=h5py.string_dtype("ascii"))
        f.create_dataset(
            "chunked", data=[f"s{i}" for i in range(10)], dtype=h5py.string_dtype(), chunks=(4,)
        )
        f["scalar"] = "just one"

    path = make_h5(build)
    refs = index_granule(str(path))
    for name in ("utf8", "ascii", "binary", "chunked", "scalar"):
        assert refs.arrays[name].status == "inlined" and refs.arrays[name].meta.dtype == "|O"
    assert [c["id"] for c in refs.arrays["utf8"].meta.filters] == ["vlen-utf8"]
    assert [c["id"] for c in refs.arrays["binary"].meta.filters] == ["vlen-bytes"]
    assert refs.arrays["chunked"].manifest.n_inline == 3
    group = assert_refs_match_h5py(refs, path)
    assert group["utf8"][0] == "héllo"
    assert group["binary"][0] == b"\xff\xfe"


def test_compound_types_flat_padded_nested_and_with_arrays(make_h5) -> None:
    flat = np.dtype([("a", "<i4"), ("b", ">f8")])
    padded = np.dtype(
        {"names": ["a", "b"], "formats": ["i1", "<f8"], "offsets": [0, 8], "itemsize": 24}
    )
    nested = np.dtype([("id", "<u2"), ("pos", [("x", "<f4"), ("y", "<f4")]), ("tag", "S3")])
    with_array = np.dtype([("m", "<f8", (2, 2)), ("s", "S5", (2,)), ("k", "<i2")])

    def build(f: h5py.File) -> None:
        for name, dt in [
            ("flat", flat),
            ("padded", padded),
            ("nested", nested),
            ("with_array", with_array),
        ]:
            data = np.zeros(5, dt)
            data.view(np.uint8)[...] = np.arange(data.nbytes, dtype=np.uint64) % 251
            f.create_dataset(name, data=data, chunks=(2,))

    path = make_h5(build)
    refs = index_granule(str(path))
    assert refs.arrays["flat"].meta.dtype == [["a", "<i4"], ["b", ">f8"]]
    assert refs.arrays["padded"].meta.dtype == [
        ["a", "|i1"],
        ["_pad1", "|V7"],
        ["b", "<f8"],
        ["_pad16", "|V8"],
    ]
    assert [f[0] for f in refs.arrays["nested"].meta.dtype] == ["id", "pos.x", "pos.y", "tag"]
    assert [f[0] for f in refs.arrays["with_array"].meta.dtype][:5] == [
        "m[0,0]",
        "m[0,1]",
        "m[1,0]",
        "m[1,1]",
        "s[0]",
    ]
    for name in ("flat", "padded", "nested", "with_array"):
        assert refs.arrays[name].status == "virtual"
    assert "flattened" in refs.arrays["nested"].note
    assert_refs_match_h5py(refs, path)


def test_array_type_datasets_get_a_trailing_dimension(make_h5) -> None:
    dt = np.dtype(("<f4", (2, 3)))
    data = np.arange(4 * 6, dtype="<f4").reshape(4, 2, 3)

    def build(f: h5py.File) -> None:
        f.create_dataset("a", shape=(4,), dtype=dt, chunks=(2,))[...] = data

    path = make_h5(build)
    refs = index_granule(str(path))
    arr = refs.arrays["a"]
    assert arr.meta.shape == (4, 2, 3) and arr.meta.chunks == (2, 2, 3)
    assert len(set(arr.meta.dimension_names)) == 3
    assert_refs_match_h5py(refs, path)


def test_object_references_become_target_paths(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f.create_group("grp")
        f["grp/data"] = np.arange(3)
        refs = f.create_dataset("refs", shape=(3,), dtype=h5py.ref_dtype)
        refs[0] = f["grp"].ref
        refs[1] = f["grp/data"].ref

    path = make_h5(build)
    refs = index_granule(str(path))
    arr = refs.arrays["refs"]
    assert arr.status == "inlined" and dict(arr.meta.attrs) == {}
    assert refs.extra[REFERENCES_KEY] == ["refs"]
    assert open_refs(refs)["refs"][...].tolist() == ["/grp", "/grp/data", ""]
    assert_refs_match_h5py(refs, path)


def test_opaque_is_kept_as_raw_bytes(make_h5) -> None:
    data = np.frombuffer(bytes(range(21)), dtype="V7")
    path = make_h5(lambda f: f.create_dataset("o", data=data))
    refs = index_granule(str(path))
    assert refs.arrays["o"].meta.dtype == "|V7"
    assert_refs_match_h5py(refs, path)


def _custom_float() -> h5py.h5t.TypeFloatID:
    """bfloat16: 1 sign bit, 8-bit exponent, 7-bit mantissa in 2 bytes."""
    tid = h5py.h5t.IEEE_F32LE.copy()
    tid.set_fields(15, 7, 8, 0, 7)
    tid.set_offset(0)
    tid.set_precision(16)
    tid.set_size(2)
    tid.set_ebias(127)
    return tid


def test_converted_types_are_decoded_into_the_sidecar(make_h5) -> None:
    values = np.array([1.0, -2.5, 3.25, 1e3], "<f4")
    ints = np.array([1, -5, 100, -100_000], "<i4")

    def build(f: h5py.File) -> None:
        _lowlevel(f, "bfloat16", _custom_float(), values, h5py.h5t.NATIVE_FLOAT)
        narrow = h5py.h5t.STD_I32LE.copy()
        narrow.set_precision(20)
        _lowlevel(f, "int20", narrow, ints, h5py.h5t.NATIVE_INT32)

    path = make_h5(build)
    refs = index_granule(str(path))
    assert "custom 16-bit float" in refs.arrays["bfloat16"].note
    assert "20-bit integer" in refs.arrays["int20"].note
    assert refs.arrays["bfloat16"].status == refs.arrays["int20"].status == "inlined"
    assert_refs_match_h5py(refs, path)


@pytest.mark.parametrize(
    ("make", "phrase"),
    [
        (
            lambda f: f.create_dataset("v", shape=(2,), dtype=h5py.vlen_dtype("i4")),
            "variable-length sequences",
        ),
        (
            lambda f: f.create_dataset("v", shape=(2,), dtype=h5py.regionref_dtype),
            "region references",
        ),
        (lambda f: f.create_dataset("v", shape=(2,), dtype=np.longdouble), "long double"),
        (
            lambda f: f.create_dataset(
                "v", shape=(2,), dtype=np.dtype([("s", h5py.string_dtype()), ("i", "i4")])
            ),
            "variable-length strings inside compound",
        ),
    ],
    ids=["vlen-sequence", "region-ref", "long-double", "compound-vlen-member"],
)
def test_unrepresentable_types_are_skipped_with_reasons(make_h5, make, phrase: str) -> None:
    path = make_h5(lambda f: (make(f), f.create_dataset("ok", data=[1, 2])))
    refs = index_granule(str(path))
    assert [(s.path, s.kind) for s in refs.skipped] == [("v", "unsupported_dtype")]
    assert phrase in refs.skipped[0].reason
    assert list(refs.arrays) == ["ok"]


def test_array_types_of_strings_and_references_and_mixed_compounds(make_h5) -> None:
    def build(f: h5py.File) -> None:
        f["t"] = np.arange(3)
        strings = f.create_dataset(
            "strings", shape=(3,), dtype=np.dtype((h5py.string_dtype(), (2,)))
        )
        strings[0] = ["a", "bb"]
        refs = f.create_dataset("refs", shape=(2,), dtype=np.dtype((h5py.ref_dtype, (2,))))
        refs[0] = [f["t"].ref, f["t"].ref]
        mixed = np.dtype([("e", h5py.enum_dtype({"A": 0, "B": 1}, "u1")), ("b", "?"), ("c", "<c8")])
        f.create_dataset("mixed", data=np.array([(1, True, 1 + 2j), (0, False, 3j)], dtype=mixed))

    path = make_h5(build)
    refs = index_granule(str(path))
    assert refs.arrays["strings"].meta.shape == (3, 2)
    assert refs.arrays["refs"].meta.shape == (2, 2)
    assert refs.arrays["mixed"].meta.dtype == [["e", "|u1"], ["b", "|b1"], ["c", "<c8"]]
    assert_refs_match_h5py(refs, path)


def test_flattened_compound_names_are_unambiguous_with_dots_in_member_names(make_h5) -> None:
    """``outer.inner`` was ambiguous when a member name has a dot: in a flattened compound,
    ``%``, ``.``, ``[`` and ``]`` inside member names are %-escaped; flat compounds keep their
    names verbatim (as h5netcdf shows them)."""
    inner = np.dtype([("b", "<i4"), ("c.d", "<f4")])
    nested = np.dtype([("a", inner), ("a.b", "<i2"), ("m[0]", "<u1", (2,)), ("p%", "u1")])
    flat = np.dtype([("x.y", "<i4"), ("z[1]", "<f8")])

    def build(f: h5py.File) -> None:
        f.create_dataset("nested", data=np.zeros(3, nested), dtype=nested)
        f["nested"][1] = ((7, 1.5), 3, (4, 5), 9)
        f.create_dataset("flat", data=np.array([(1, 2.0), (3, 4.0)], flat))

    path = make_h5(build)
    refs = index_granule(str(path))
    assert [f[0] for f in refs.arrays["nested"].meta.dtype] == [
        "a.b", "a.c%2Ed", "a%2Eb", "m%5B0%5D[0]", "m%5B0%5D[1]", "p%25"
    ]
    assert [f[0] for f in refs.arrays["flat"].meta.dtype] == ["x.y", "z[1]"]
    group = assert_refs_match_h5py(refs, path)
    assert group["nested"][1]["a%2Eb"] == 3 and group["nested"][1]["a.b"] == 7


def test_number_types_share_one_plan_and_keep_their_own_fill(make_h5) -> None:
    """Plans of integer/float datasets are cached by their file datatype (issue 24): datasets of
    one type share a plan, yet each keeps its own storage fill value (read per dataset)."""
    fills = {"a": (">i2", -3), "b": (">i2", 5), "c": (">i2", None),
             "d": ("<f4", np.nan), "e": ("<f4", -9999.5), "f": ("<f4", None)}  # fmt: skip

    def build(f: h5py.File) -> None:
        for name, (dtype, fill) in fills.items():
            d = f.create_dataset(name, shape=(8,), chunks=(4,), dtype=dtype, fillvalue=fill)
            d[:4] = np.arange(4)  # the second chunk never written: it reads as the fill

    path = make_h5(build)
    with h5py.File(path) as f:
        assert plan_dtype(f["a"]) is plan_dtype(f["b"]) is plan_dtype(f["c"])
        assert plan_dtype(f["d"]) is plan_dtype(f["e"]) is not plan_dtype(f["a"])
        expected = {name: f[name].fillvalue for name in fills}
    refs = index_granule(str(path))
    for name, value in expected.items():
        meta = refs.arrays[name].meta
        assert meta.fill_value == fill_value_json(np.asarray(value), np.dtype(meta.dtype))
    assert [refs.arrays[n].meta.fill_value for n in fills] == [-3, 5, 0, "NaN", -9999.5, 0.0]
    assert_refs_match_h5py(refs, path)
