"""``h5sidecar index --from-dmrpp`` and :func:`h5sidecar.indexer.index_source`: granules indexed
from the DMR++ beside them (``auto``: where one exists, ``only``: or fail), and the sidecar
checked by ``h5sidecar verify`` like any other."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.cli import main
from h5sidecar.errors import InvalidDmrppError, SourceNotFoundError
from h5sidecar.indexer import DMRPP_KEY, index_source
from h5sidecar.references import read_refs
from tests.indexer.dmrpp._documents import document, write_beside


def _granule(path: Path, seed: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.random.default_rng(seed).random((6, 8)).astype("<f4")
    with h5py.File(path, "w") as f:
        t = f.create_dataset("t", data=data, chunks=(3, 4), compression="gzip", shuffle=True)
        t.attrs["units"] = "K"  # the attributes the handmade document gives
        t.attrs["scale_factor"] = np.float32(0.5)
    return path


def test_index_source_modes(tmp_path: Path) -> None:
    with_doc = _granule(tmp_path / "a.h5", 0)
    write_beside(with_doc, document(with_doc, "t", filters="shuffle deflate"))
    without = _granule(tmp_path / "b.h5", 1)
    assert DMRPP_KEY in index_source(str(with_doc), from_dmrpp="auto").extra
    assert DMRPP_KEY not in index_source(str(with_doc), from_dmrpp="never").extra
    assert DMRPP_KEY not in index_source(str(without), from_dmrpp="auto").extra
    with pytest.raises(SourceNotFoundError):
        index_source(str(without), from_dmrpp="only")
    write_beside(without, "not xml")  # a bad document is reported, not crawled around
    with pytest.raises(InvalidDmrppError):
        index_source(str(without), from_dmrpp="auto")


def test_cli_index_from_dmrpp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in"
    a = _granule(src / "a.h5", 0)
    write_beside(a, document(a, "t", filters="shuffle deflate"))
    _granule(src / "b.h5", 1)
    dest = tmp_path / "out"
    assert main(["index", str(src), "-o", str(dest), "--serial", "--from-dmrpp", "auto"]) == 0
    assert "2 indexed" in capsys.readouterr().out
    assert DMRPP_KEY in read_refs(str(dest / "a.h5.parq")).extra
    assert DMRPP_KEY not in read_refs(str(dest / "b.h5.parq")).extra
    # the sidecar from the DMR++ reads the file's values, checked as any sidecar
    assert main(["verify", str(dest / "a.h5.parq"), "--sample", "all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    args = ["index", str(src), "-o", str(tmp_path / "o2"), "--serial", "--json"]
    assert main([*args, "--from-dmrpp", "only"]) == 1
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts == {"ok": 1, "failed": 1, "up_to_date": 0}
