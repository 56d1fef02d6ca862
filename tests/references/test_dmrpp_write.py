"""``write_dmrpp``: references written as a DMR++ document, read back by ``index_dmrpp``.

A file written with h5py holding what DMR++ can say (groups, shared dimensions, typed
attributes, deflate / shuffle / fletcher32, a never-written chunk and its fill value, big-endian
numbers, fixed-length strings, compact values) must audit clean against its written document
(:func:`check_dmrpp`: the same variables, shapes, types, chunks, filters, fill values and
attributes) and read back equal to h5py.  What DMR++ cannot say (compound and boolean types,
variable-length strings, text XML cannot hold) is left out with a record, never written wrong.
"""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar import check_dmrpp, index_dmrpp, index_granule
from h5sidecar.references import dmrpp_document, write_dmrpp, write_json
from tests.indexer._compare import assert_values_equal, h5_read, open_plain

DAP4 = "{http://xml.opendap.org/ns/DAP/4.0#}"


@pytest.fixture
def granule(tmp_path: Path) -> Path:
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "written by a test"
        f.attrs["version"] = np.int16(3)
        x = f.create_dataset("x", data=np.arange(12, dtype="<f8"))
        x.make_scale("x")
        t = f.create_dataset("t", shape=(12, 6), dtype="<f4", chunks=(4, 3), shuffle=True,
                             compression="gzip", compression_opts=6, fillvalue=-1.0)  # fmt: skip
        t[:8] = np.arange(48, dtype="<f4").reshape(8, 6)  # the last row of chunks never written
        t.dims[0].attach_scale(x)
        t.attrs["units"] = "K"
        t.attrs["valid_range"] = np.array([-5.0, 50.0], dtype="<f4")
        g = f.create_group("grp/sub")
        g.attrs["levels"] = np.array([1, 2, 3], dtype="<i4")
        g.create_dataset("be", data=np.arange(10, dtype=">i4"), chunks=(5,), fletcher32=True,
                         compression="gzip")  # fmt: skip
        g.create_dataset("names", data=np.array([b"ab", b"cde", b"f"], dtype="S4"))
        space = h5py.h5s.create_simple((4,))
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_U8LE, space, plist).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.array([7, 8, 9, 10], dtype="|u1")
        )
        _compact(g, "compact_be", (np.arange(6).reshape(2, 3) - 2).astype(">i4"))
        _compact(g, "compact_le", np.array([0.5, -1.25e300], dtype="<f8"))
        _compact(f, "compact_scalar", np.array(-7.5, dtype=">f4"))
    return path


def _compact(where: h5py.Group, name: str, values: np.ndarray) -> None:
    """A dataset of HDF5's compact layout (values in its object header) in ``values``' order."""
    space = (
        h5py.h5s.create_simple(values.shape) if values.shape else h5py.h5s.create(h5py.h5s.SCALAR)
    )
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_layout(h5py.h5d.COMPACT)
    tid = h5py.h5t.py_create(values.dtype)
    h5py.h5d.create(where.id, name.encode(), tid, space, plist).write(
        h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(values)
    )


def test_written_document_audits_clean_and_reads_equal(granule: Path, tmp_path: Path) -> None:
    refs = index_granule(str(granule))
    doc = tmp_path / "g.h5.dmrpp"
    assert write_dmrpp(refs, str(doc)) == ()
    audit = check_dmrpp(str(granule), str(doc))
    assert audit.ok and not audit.unchecked, audit
    back = index_dmrpp(str(doc), str(granule))
    assert set(back.arrays) == set(refs.arrays)
    assert back.groups["grp/sub"] == refs.groups["grp/sub"] and back.groups[""] == refs.groups[""]
    # a named axis keeps its name; an anonymous one is anonymous in the document too (its
    # phony_dim_N number is the DMR++ indexer's count)
    assert back.arrays["t"].meta.dimension_names[0] == "x"
    plain = open_plain(write_json(back, tmp_path / "back.json"))
    with h5py.File(granule) as h5:
        for path in refs.arrays:
            assert_values_equal(plain[path][...], h5_read(h5[path]), h5[path], path)


def test_document_shape(granule: Path) -> None:
    """DAP4 + dmrpp namespaces, the granule as dmrpp:href, what build_dmrpp writes per chunk."""
    text, _ = dmrpp_document(index_granule(str(granule)))
    root = ET.fromstring(text)
    assert root.tag == f"{DAP4}Dataset" and root.get("name") == "g.h5"
    assert root.get("{http://xml.opendap.org/dap/dmrpp/1.0.0#}href") == str(granule)
    assert [d.get("name") for d in root.iter(f"{DAP4}Dimension")] == ["x"]
    t = root.find(f"{DAP4}Float32[@name='t']")
    assert t is not None
    assert [d.get("name") for d in t.iter(f"{DAP4}Dim")] == ["/x", None]
    chunks = next(c for c in t if c.tag.endswith("chunks"))
    assert chunks.get("compressionType") == "shuffle deflate"
    assert chunks.get("deflateLevel") == "6" and chunks.get("byteOrder") == "LE"
    assert chunks.get("fillValue") == "-1.0"
    rows = [c for c in chunks if c.tag.endswith("chunk")]
    assert len(rows) == 4  # 6 chunks, 2 never written
    assert rows[-1].get("chunkPositionInArray") == "[4,3]"
    be = root.find(f"{DAP4}Group/{DAP4}Group/{DAP4}Int32[@name='be']")
    assert be is not None and "fletcher32" in ET.tostring(be).decode()


def test_compact_multi_byte_values_as_build_dmrpp_writes_them(granule: Path) -> None:
    """Multi-byte compact values: C order, little-endian whatever the granule's order, in a
    ``dmrpp:compact`` alone (Hyrax reads its bytes in its host's order and refuses a
    ``dmrpp:chunks`` beside it)."""
    root = ET.fromstring(dmrpp_document(index_granule(str(granule)))[0])
    want = {
        "Group/Group/Int32[@name='compact_be']": np.arange(6, dtype="<i4") - 2,
        "Group/Group/Float64[@name='compact_le']": np.array([0.5, -1.25e300], dtype="<f8"),
        "Float32[@name='compact_scalar']": np.array([-7.5], dtype="<f4"),
    }
    for where, values in want.items():
        var = root.find(f"{DAP4}{where.replace('/', '/' + DAP4)}")
        assert var is not None, where
        tags = [c.tag.rpartition("}")[2] for c in var]
        assert "compact" in tags and "chunks" not in tags, (where, tags)
        text = next(c.text for c in var if c.tag.endswith("compact"))
        assert base64.b64decode(text or "") == values.tobytes(), where


def test_left_out_with_a_record(tmp_path: Path) -> None:
    path = tmp_path / "odd.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("ok", data=np.arange(3, dtype="<i2"))
        f["ok"].attrs["tab"] = "a\x0bb"  # XML 1.0 has no vertical tab
        f.create_dataset("flag", data=np.array([True, False]))
        f.create_dataset("pair", data=np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]))
        f.create_dataset("text", data=["a", "bc"], dtype=h5py.string_dtype())
        space = h5py.h5s.create_simple((2,))
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I16LE, space, plist).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.array([7, 8], dtype="<i2")
        )
    refs = index_granule(str(path))
    doc = tmp_path / "odd.h5.dmrpp"
    left = {s.path: s.reason for s in write_dmrpp(refs, str(doc))}
    assert set(left) == {"ok@tab", "flag", "pair", "text"}, left
    assert all(reason for reason in left.values())
    back = index_dmrpp(str(doc), str(path))
    assert set(back.arrays) == {"ok", "compact"} and "tab" not in back.arrays["ok"].meta.attrs
    plain = open_plain(write_json(back, tmp_path / "r.json"))
    np.testing.assert_array_equal(plain["ok"][...], np.arange(3, dtype="<i2"))
    np.testing.assert_array_equal(plain["compact"][...], np.array([7, 8], dtype="<i2"))
