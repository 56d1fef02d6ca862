"""Parquet layouts in the workflows: ``index --layout``, re-indexing when the layout changes,
``verify``/``inspect`` on compact sidecars, and cubes built from them."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.cli import main
from h5sidecar.read import read_arrays
from h5sidecar.references import read_layout
from h5sidecar.sample import write_daily_collection
from h5sidecar.settings import IndexSettings, from_env
from h5sidecar.workflows import build_cube, index_many, inspect_refs, verify_refs
from tests.workflows.conftest import DATASETS, write_granule


def _files(sidecar: str) -> set[str]:
    root = Path(sidecar)
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _assert_reads_like_h5py(sidecar: str, src: Path) -> None:
    got = read_arrays(sidecar, list(DATASETS))
    with h5py.File(src, "r") as f:
        for name in DATASETS:
            np.testing.assert_array_equal(got[name], f[name][()], err_msg=name)


def test_layout_switch_reindexes_and_replaces_the_sidecar(tmp_path: Path) -> None:
    src = write_granule(tmp_path / "in" / "a.h5")
    dest = str(tmp_path / "out")
    first = index_many(str(src), dest, layout="compact", executor="serial")
    g = first.granules[0]
    assert g.status == "ok" and first.options["layout"] == "compact"
    assert _files(g.sidecar) == {".zmetadata", ".h5sidecar/manifests.parq"}
    _assert_reads_like_h5py(g.sidecar, src)
    again = index_many(str(src), dest, layout="compact", executor="serial")
    assert again.granules[0].status == "up_to_date"
    switched = index_many(str(src), dest, executor="serial")  # the default: kerchunk
    assert switched.granules[0].status == "ok"
    assert read_layout(g.sidecar) == "kerchunk"
    assert any(f.endswith("refs.0.parq") for f in _files(g.sidecar))
    assert not list((tmp_path / "out").glob(".*.tmp"))  # swapped in, nothing left behind
    _assert_reads_like_h5py(g.sidecar, src)
    assert index_many(str(src), dest, executor="serial").granules[0].status == "up_to_date"
    back = index_many(str(src), dest, settings=IndexSettings(layout="compact"),
                      executor="serial")  # fmt: skip
    assert back.granules[0].status == "ok" and read_layout(g.sidecar) == "compact"


def test_json_ignores_the_layout(tmp_path: Path) -> None:
    src = write_granule(tmp_path / "in" / "a.h5")
    dest = str(tmp_path / "out")
    assert index_many(str(src), dest, format="json", executor="serial").ok
    again = index_many(str(src), dest, format="json", layout="compact", executor="serial")
    assert again.granules[0].status == "up_to_date" and "layout" not in again.options


def test_layout_from_env_and_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert from_env(IndexSettings, env={"H5SIDECAR_LAYOUT": "compact"}).layout == "compact"
    with pytest.raises(ValueError, match="H5SIDECAR_LAYOUT"):
        from_env(IndexSettings, env={"H5SIDECAR_LAYOUT": "flat"})
    src = write_granule(tmp_path / "in" / "a.h5")
    assert main(["index", str(src), "-o", str(tmp_path / "cli"), "--serial",
                 "--layout", "compact"]) == 0  # fmt: skip
    assert read_layout(str(tmp_path / "cli" / "a.h5.parq")) == "compact"
    monkeypatch.setenv("H5SIDECAR_LAYOUT", "compact")
    assert main(["index", str(src), "-o", str(tmp_path / "env"), "--serial"]) == 0
    assert read_layout(str(tmp_path / "env" / "a.h5.parq")) == "compact"
    # the flag wins over the environment, and the change re-indexes
    assert main(["index", str(src), "-o", str(tmp_path / "env"), "--serial",
                 "--layout", "kerchunk"]) == 0  # fmt: skip
    assert read_layout(str(tmp_path / "env" / "a.h5.parq")) == "kerchunk"


def test_verify_and_inspect_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_granule(tmp_path / "in" / "a.h5")
    report = index_many(str(src), str(tmp_path / "out"), layout="compact", checksums=True,
                        executor="serial")  # fmt: skip
    sidecar = report.granules[0].sidecar
    assert len(_files(sidecar)) == 3  # + the checksums file
    result = verify_refs(sidecar, sample=0)
    assert result.ok and result.reader == "h5sidecar"
    assert sum(v.checksums_checked for v in result.variables) > 0
    checked = {v.path: v for v in result.variables}
    assert checked["gt1l/heights/h_ph"].status == "ok"
    assert checked["gt1l/heights/h_ph"].chunks_checked == 4
    assert inspect_refs(sidecar).layout == "compact"
    assert main(["inspect", sidecar]) == 0
    assert "compact layout" in capsys.readouterr().out
    plain = index_many(str(src), str(tmp_path / "plain"), executor="serial").granules[0]
    assert verify_refs(plain.sidecar).reader == "fsspec"


def test_cube_from_compact_sidecars(tmp_path: Path) -> None:
    files = write_daily_collection(tmp_path / "nc", days=3)
    dest = tmp_path / "sidecars"
    assert index_many(str(tmp_path / "nc"), str(dest), layout="compact", executor="serial").ok
    assert all(read_layout(str(p)) == "compact" for p in dest.glob("*.parq"))
    cube = build_cube(str(dest), str(tmp_path / "cube.parq")).path
    raw = read_arrays(cube, ["tas", "time"])
    want_tas, want_time = [], []
    for f in files:
        with h5py.File(f) as h:
            want_tas.append(h["tas"][...])
            want_time.append(h["time"][...])
    order = np.argsort(np.concatenate(want_time))
    np.testing.assert_array_equal(raw["time"], np.concatenate(want_time)[order])
    np.testing.assert_array_equal(raw["tas"], np.concatenate(want_tas)[order])
