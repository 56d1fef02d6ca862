"""``h5sidecar index --format dmrpp``: DEST gets a DMR++ document per granule, which
``index_dmrpp`` reads back equal to h5py; a second run finds them up to date."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar import index_dmrpp
from h5sidecar.cli import main
from h5sidecar.references import write_json
from tests.indexer._compare import open_plain


def test_index_format_dmrpp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    data = np.arange(60, dtype="<f4").reshape(10, 6)
    with h5py.File(src / "a.h5", "w") as f:
        f.create_dataset("v", data=data, chunks=(5, 3), compression="gzip", shuffle=True)
        f.create_dataset("pair", data=np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]))
    assert main(["index", str(src), "-o", str(dest), "--format", "dmrpp", "--serial"]) == 0
    doc = dest / "a.h5.dmrpp"
    assert doc.is_file() and not (dest / "a.h5.parq").exists()
    refs = index_dmrpp(str(doc), str(src / "a.h5"))
    assert set(refs.arrays) == {"v"}  # the compound variable is left out of the DMR++
    got = open_plain(write_json(refs, tmp_path / "r.json"))["v"][...]
    np.testing.assert_array_equal(got, data)
    assert main(["index", str(src), "-o", str(dest), "--format", "dmrpp", "--serial",
                 "--json"]) == 0  # fmt: skip
    assert '"up_to_date": 1' in capsys.readouterr().out
