"""HDF5 names that are not UTF-8: kept under a %-escaped name that round-trips to the bytes.

HDF5 link and attribute names are bytes; h5py hands the ones that are not valid UTF-8 over as
``bytes``.  They used to fail the granule with AttributeError / UnicodeDecodeError.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote_to_bytes

import h5py
import numpy as np

from h5sidecar.indexer import index_granule
from h5sidecar.indexer._walk import escape_name
from h5sidecar.references import read_refs, write_json, write_parquet
from tests.indexer._compare import open_plain


def test_escape_rule_round_trips() -> None:
    for raw in (b"temp\xe9rature", b"caf\xe9", b"100%\xff", b"\xc3\xa9t\xe9 %25", b"\x80"):
        escaped = escape_name(raw)
        escaped.encode("utf-8")  # valid text for JSON and Zarr keys
        assert unquote_to_bytes(escaped) == raw
    assert escape_name("déjà 100%") == "déjà 100%"  # UTF-8 names are kept verbatim
    assert escape_name(b"temp\xe9rature") == "temp%E9rature"
    assert escape_name(b"100%\xff") == "100%25%FF"


def _build(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset(b"temp\xe9rature", data=np.arange(5.0))
        f.create_dataset("ok", data=np.arange(3))
        f["ok"].attrs[b"caf\xe9"] = 1.5
        f["ok"].attrs["units"] = "m"
        f.attrs[b"caf\xe9"] = "x"
        g = f.create_group(b"gr\xfcppe")
        g.create_dataset("v", data=np.arange(2), chunks=(1,))
        g.id.links.create_soft(b"l\xe9", b"/gr\xfcppe/v")
        # an escaped name equal to a UTF-8 name of the same group: the second one is skipped
        f.create_dataset("a%E9", data=np.arange(1))
        f.create_dataset(b"a\xe9", data=np.arange(2))


def _raw_path(path: str, escaped: set[str]) -> bytes:
    """The HDF5 path of a model path: only the names listed as escaped are unquoted."""
    parts = path.split("/")
    return b"/".join(
        unquote_to_bytes(p) if "/".join(parts[: i + 1]) in escaped else p.encode()
        for i, p in enumerate(parts)
    )


def test_non_utf8_names_are_kept_escaped(tmp_path: Path) -> None:
    path = tmp_path / "names.h5"
    _build(path)
    refs = index_granule(str(path))
    # the UTF-8 name "a%E9" holds '%', escaped too (see test_reserved_names)
    assert sorted(refs.arrays) == ["a%25E9", "gr%FCppe/l%E9", "gr%FCppe/v", "ok", "temp%E9rature"]
    (skip,) = refs.skipped
    assert skip.path == "a%E9" and skip.kind == "other" and "not UTF-8" in skip.reason
    assert refs.arrays["ok"].meta.attrs == {"caf%E9": 1.5, "units": "m"}
    assert "%-escaped" in refs.arrays["ok"].note
    assert refs.groups[""]["caf%E9"] == "x"
    assert sorted(refs.extra["names_escaped"]["links"]) == [
        "a%25E9", "gr%FCppe", "gr%FCppe/l%E9", "temp%E9rature"
    ]
    sidecars = (write_json(refs, tmp_path / "n.json"), write_parquet(refs, tmp_path / "n.parq"))
    for sidecar in sidecars:
        group = open_plain(str(sidecar))
        assert read_refs(sidecar).extra["names_escaped"] == refs.extra["names_escaped"]
        with h5py.File(path) as h5:
            for rel in refs.arrays:
                raw = _raw_path(rel, set(refs.extra["names_escaped"]["links"]))
                assert group[rel][...].tolist() == h5[raw][()].tolist(), rel
            assert group["ok"].attrs["caf%E9"] == h5["ok"].attrs[b"caf\xe9"]
            assert group.attrs["caf%E9"] == "x"


def test_references_to_escaped_names_are_escaped_paths(tmp_path: Path) -> None:
    path = tmp_path / "refs.h5"
    with h5py.File(path, "w") as f:
        target = f.create_dataset(b"temp\xe9rature", data=np.arange(2))
        refs_ds = f.create_dataset("refs", shape=(1,), dtype=h5py.ref_dtype)
        refs_ds[0] = target.ref
        f.attrs["points_to"] = target.ref
    refs = index_granule(str(path))
    assert open_plain(str(write_json(refs, tmp_path / "r.json")))["refs"][0] == "/temp%E9rature"
    assert refs.groups[""]["points_to"] == "/temp%E9rature"


def test_invalid_utf8_in_a_utf8_string_attribute_is_kept(tmp_path: Path) -> None:
    """h5py gives such values with lone surrogates, which no JSON or Parquet writer encodes: a
    bit-flipped granule failed as 'bug' on them (issue 14 item 7)."""
    path = tmp_path / "bad_text.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("x", data=np.arange(3))
        d.attrs.create("note", data=b"caf\xe9 ok", dtype=h5py.string_dtype("utf-8"))
    with h5py.File(path) as f:
        assert "\udce9" in f["x"].attrs["note"]  # what h5py hands the indexer
    refs = index_granule(str(path))
    assert refs.arrays["x"].meta.attrs["note"] == "café ok"  # the bytes, read as Latin-1
    for back in (write_json(refs, tmp_path / "r.json"), write_parquet(refs, tmp_path / "r.parq")):
        assert read_refs(str(back)).arrays["x"].meta.attrs["note"] == "café ok"
