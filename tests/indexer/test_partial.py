"""One variable must not sink a granule: an unexpected error on one variable skips that
variable (kind ``internal_error``, with the error and where it happened), the rest of the
granule is indexed, the granule is reported as partial and the CLI exits 1.

The fault is injected by wrapping the indexer's dtype planning for one dataset name, the way a
bug of h5sidecar on one unusual variable would surface.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar.cli import main
from h5sidecar.indexer import _dataset, index_granule
from h5sidecar.references import read_refs, write_json
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows import index_many, read_report
from tests.indexer._compare import assert_refs_match_h5py, open_plain


@pytest.fixture
def buggy(monkeypatch: pytest.MonkeyPatch) -> None:
    """``plan_dtype`` raises a plain ValueError (a bug, not HDF5) for datasets named ``bad``."""
    real = _dataset.plan_dtype

    def plan(dset: h5py.Dataset) -> Any:
        if dset.name.endswith("/bad"):
            np.zeros((), "S3").view("S9")  # raises ValueError, as the real bug did
        return real(dset)

    monkeypatch.setattr(_dataset, "plan_dtype", plan)


def _granule(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("good", data=np.arange(10.0))
        g = f.create_group("ancillary_data")
        g.create_dataset("bad", data=np.arange(3))
        g.create_dataset("fine", data=np.array(b"2019-03-21T15:06:30.123456Z"))
    return path


def test_an_unexpected_error_skips_only_that_variable(buggy: None, tmp_path: Path) -> None:
    path = _granule(tmp_path / "g.h5")
    refs = index_granule(str(path))
    assert sorted(refs.arrays) == ["ancillary_data/fine", "good"]
    (skip,) = refs.skipped
    assert skip.path == "ancillary_data/bad" and skip.kind == "internal_error"
    assert "ValueError" in skip.reason and "test_partial.py" in skip.reason
    assert_refs_match_h5py(refs, path)
    # the skip survives the sidecar round trip (plain readers still see the other variables)
    sidecar = write_json(refs, tmp_path / "g.json")
    assert read_refs(sidecar).skipped == refs.skipped
    assert "ancillary_data/bad" not in open_plain(str(sidecar))["ancillary_data"]


def test_raise_mode_raises_the_original_error(buggy: None, tmp_path: Path) -> None:
    path = _granule(tmp_path / "g.h5")
    with pytest.raises(ValueError, match="itemsize"):
        index_granule(str(path), settings=IndexSettings(on_unsupported="raise"))


def test_the_granule_is_partial_in_the_report_and_the_cli_exits_1(
    buggy: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _granule(src / "g.h5")
    with h5py.File(src / "ok.h5", "w") as f:
        f.create_dataset("x", data=np.arange(4))
    # no time limit: serial then runs in this process, where the bug is patched in
    in_process = IndexSettings(max_granule_seconds=0)
    report = index_many(str(src), str(tmp_path / "out"), executor="serial", settings=in_process)
    assert report.counts == {"ok": 2, "failed": 0, "up_to_date": 0}
    assert [g.name for g in report.partial] == ["g.h5"] and not report.ok
    doc = read_report(str(tmp_path / "out")).to_dict()
    assert {g["name"]: g["partial"] for g in doc["granules"]} == {"g.h5": True, "ok.h5": False}
    # a re-run finds the sidecar up to date and still reports what it lacks
    capsys.readouterr()
    assert main(["index", str(src), "-o", str(tmp_path / "out"), "--serial"]) == 1
    printed = capsys.readouterr().out
    assert "PARTIAL" in printed and "ancillary_data/bad" in printed
    assert main(["index", str(src / "ok.h5"), "-o", str(tmp_path / "out2"), "--serial"]) == 0
