"""Sidecars, their folders and the run report follow the umask, like any other tool's output
(a group shares and publishes them); the temporaries they are written through do not leak
their private 0600/0700 modes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from h5sidecar._modes import current_umask
from h5sidecar.workflows import index_many
from tests._granules import read_h5, write_small_granule


@pytest.fixture(params=[0o022, 0o002, 0o077], ids=["022", "002", "077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_current_umask_reads_without_changing(umask: int) -> None:
    assert current_umask() == umask
    assert current_umask() == umask


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_sidecars_and_report_follow_umask(tmp_path: Path, umask: int, fmt: str) -> None:
    src = tmp_path / "granules"
    src.mkdir()
    h5 = write_small_granule(src / "g.h5")
    dest = tmp_path / "sidecars"
    report = index_many(str(src), str(dest), format=fmt, executor="serial")
    assert report.ok, report
    sidecar = Path(report.granules[0].sidecar)
    assert sidecar.exists()
    files = [sidecar] if sidecar.is_file() else [p for p in sidecar.rglob("*") if p.is_file()]
    dirs = [p for p in sidecar.rglob("*") if p.is_dir()] + ([sidecar] if sidecar.is_dir() else [])
    assert files
    for f in [*files, dest / "_h5sidecar.sqlite"]:
        assert _mode(f) == 0o666 & ~umask, f
    for d in dirs:
        assert _mode(d) == 0o777 & ~umask, d
    # no temporary is left behind, and the sidecar still reads back
    assert not list(dest.rglob("*.tmp"))
    import xarray as xr

    group = "gt1l/heights"
    with xr.open_dataset(str(sidecar), engine="h5sidecar", group=group, decode_cf=False) as ds:
        name = next(iter(ds.data_vars))
        assert (ds[name].values == read_h5(h5, f"{group}/{name}")).all()
