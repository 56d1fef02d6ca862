"""``check_dmrpp`` / ``h5sidecar dmrpp-check`` on handmade DMR++ documents.

Each document is written from what the HDF5 indexer finds in a file written with h5py, then
changed the way documents drift from their files: a chunk moved, a filter dropped, another
shape, another byte order, a chunk left out, an attribute changed, a variable not described.
The unchanged document must audit clean (and read equal to h5py); each change must be
reported, with exit 1 from the command line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar import check_dmrpp, index_dmrpp
from h5sidecar.cli import main
from h5sidecar.references import write_json
from tests.indexer._compare import open_plain
from tests.indexer.dmrpp._documents import chunk_rows, document, write_beside

DATA = np.arange(40 * 6, dtype="<f4").reshape(40, 6)


@pytest.fixture
def granule(tmp_path: Path) -> Path:
    """g.h5: float32 "t" of 40 x 6 in 10 x 3 chunks, shuffled and deflated, with the two
    attributes the handmade document gives, and a fill value."""
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("t", data=DATA, chunks=(10, 3), shuffle=True, compression="gzip",
                             compression_opts=4, fillvalue=-9.0)  # fmt: skip
        d.attrs["units"] = "K"
        d.attrs["scale_factor"] = np.float32(0.5)
    return path


def _clean(path: Path, **kwargs: object) -> str:
    return document(path, "t", filters="shuffle deflate", **kwargs)  # type: ignore[arg-type]


def _kinds(path: Path, text: str) -> dict[str, set[str]]:
    audit = check_dmrpp(str(path), write_beside(path, text))
    assert not audit.ok
    out: dict[str, set[str]] = {}
    for f in audit.findings:
        out.setdefault(f.kind, set()).add(f.path)
    return out


def test_clean_document_reads_equal(granule: Path, tmp_path: Path) -> None:
    doc = write_beside(granule, _clean(granule))
    audit = check_dmrpp(str(granule))  # the document beside it by default
    assert audit.ok and audit.findings == () and audit.n_variables == 1, audit
    assert audit.dmrpp == doc
    refs = index_dmrpp(doc)
    np.testing.assert_array_equal(open_plain(write_json(refs, tmp_path / "r.json"))["t"][...], DATA)


def test_offset_moved(granule: Path) -> None:
    rows, _ = chunk_rows(granule, "t")
    offset = int(re.search(r'offset="(\d+)"', rows[2]).group(1))  # type: ignore[union-attr]
    moved = rows[2].replace(f'offset="{offset}"', f'offset="{offset - 8}"')  # 8 bytes early
    found = _kinds(granule, _clean(granule, rows=[*rows[:2], moved, *rows[3:]]))
    assert found == {"chunks": {"t"}}


def test_filter_removed(granule: Path) -> None:
    assert _kinds(granule, document(granule, "t", filters="shuffle")) == {"filters": {"t"}}


def test_all_filters_removed(granule: Path) -> None:
    # unfiltered chunks of the wrong size: the DMR++ indexer skips it as the document's error
    assert _kinds(granule, document(granule, "t")) == {"chunks": {"t"}}


def test_shape_changed(granule: Path) -> None:
    text = _clean(granule).replace('<Dim size="40"/>', '<Dim size="50"/>')
    assert _kinds(granule, text) == {"shape": {"t"}}


def test_shape_off_the_grid_is_an_invalid_document(granule: Path) -> None:
    text = _clean(granule).replace('<Dim size="40"/>', '<Dim size="20"/>')
    assert _kinds(granule, text) == {"invalid document": {""}}


def test_byte_order_changed(granule: Path) -> None:
    assert _kinds(granule, _clean(granule, byte_order="BE")) == {"dtype": {"t"}}


def test_chunk_left_out_and_fill_value(granule: Path) -> None:
    rows, _ = chunk_rows(granule, "t")
    # the document gives no fill value: a missing chunk reads as 0 through it, -9 through HDF5
    found = _kinds(granule, _clean(granule, rows=rows[:-1]))
    assert found == {"chunks": {"t"}, "fill value": {"t"}}


def test_attribute_and_missing_variable(granule: Path) -> None:
    with h5py.File(granule, "a") as f:
        f["t"].attrs["units"] = "m"
        f.create_dataset("other", data=np.arange(3))
    found = _kinds(granule, _clean(granule))
    assert found == {"attribute": {"t@units"}, "missing from DMR++": {"other"}}


def test_cli_exit_codes_and_json(granule: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = write_beside(granule, _clean(granule))
    assert main(["dmrpp-check", str(granule)]) == 0
    assert "OK" in capsys.readouterr().out
    other = granule.with_name("drift.dmrpp")
    other.write_text(document(granule, "t", filters="shuffle"))
    assert main(["dmrpp-check", str(granule), str(other)]) == 1
    assert "DISAGREEMENTS FOUND" in capsys.readouterr().out
    assert main(["dmrpp-check", str(granule), str(other), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["dmrpp"] == str(other)
    assert [(f["path"], f["kind"]) for f in report["findings"]] == [("t", "filters")]
    assert main(["dmrpp-check", str(granule), doc, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
