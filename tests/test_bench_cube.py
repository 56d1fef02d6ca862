"""The datacube benchmark (benchmarks/bench_cube.py): its judge of values and one small run.

The benchmark's verdicts ("equal", "widened", "differ" against xarray + h5netcdf) are what its
table claims, so they are tested against hand-made wrong values; the run is a smoke test on
three granules against the benchmark S3 endpoint, with the mixed-packing table.
"""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from benchmarks import _common as c
from benchmarks import _cube_peers as peers
from h5sidecar.sample import write_daily_granule
from h5sidecar.sample._collection import PACKING, REPACKED


def test_compare_tells_equal_widened_and_differ(tmp_path: Path) -> None:
    path = write_daily_granule(tmp_path / "g.nc", date(2020, 1, 2))
    want, wide = peers.truth([path])
    assert want.dtype == np.float32 and wide.dtype == np.float64 and np.isnan(want).any()
    assert peers.compare(want.copy(), (want, wide))["verdict"] == "equal"
    widened = peers.compare(wide.copy(), (want, wide))
    assert widened["verdict"] == "widened" and 0 < widened["max_abs_error"] < 1e-4
    # the same int16 unpacked with another granule's packing: what the peers serve
    raw = np.round((want.astype("f8") - PACKING[1]) / PACKING[0])
    wrong = raw * REPACKED[0] + REPACKED[1]
    verdict = peers.compare(wrong, (want, wide))
    assert verdict["verdict"] == "differ" and verdict["max_abs_error"] > 1.0
    nan_moved = want.copy()
    nan_moved.flat[int(np.flatnonzero(~np.isnan(want))[0])] = np.nan
    assert peers.compare(nan_moved, (want, wide))["verdict"] == "differ"
    assert peers.compare(want[:, :2], (want, wide))["verdict"] == "differ"


@pytest.mark.timeout(300)
@pytest.mark.filterwarnings("ignore")  # the peers warn (kerchunk skips, numcodecs in Zarr v3)
def test_small_run_reports_every_tool_and_the_mixed_packing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import bench_cube

    monkeypatch.setattr(c, "S3_ROOT", tmp_path / "s3")
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                "AWS_DEFAULT_REGION"):  # the run sets them: restored after the test
        monkeypatch.setenv(key, "unset")
    args = argparse.Namespace(days=3, latency_ms=1, skip_kerchunk=False, skip_virtualizarr=False,
                              oracle_every=1, repeats=1, update_readme=False, from_results=None)
    results = bench_cube.run(args)
    rows = results["rows"]
    for tool in ("h5sidecar Parquet", "h5sidecar Icechunk", "kerchunk",
                 "VirtualiZarr + Icechunk"):
        assert rows[f"{tool}: open"]["variables"] == ["lat", "lon", "pr", "tas", "time"]
        for read in ("time step", "point series"):
            assert rows[f"{tool}: {read}"]["verdict"] in ("equal", "widened"), (tool, read)
    assert rows["h5sidecar Parquet: point series"]["verdict"] == "equal"
    assert rows["h5sidecar Parquet: open"]["requests"] <= 3
    assert "tas" not in rows["kerchunk: build (from HDF5)"]["variables"]  # kerchunk 0.2.9 bug
    mixed = results["mixed"]
    assert mixed["h5sidecar build_cube"]["outcome"].startswith("refused")
    assert mixed["h5sidecar build_cube(on_mismatch='split')"]["repacked"]["verdict"] == "equal"
    for peer in ("kerchunk MultiZarrToZarr of the sidecars", "VirtualiZarr + Icechunk"):
        assert mixed[peer]["repacked"]["verdict"] == "differ"
        assert mixed[peer]["repacked"]["max_abs_error"] > 1.0
    text = bench_cube.report(results)
    assert "VirtualiZarr + Icechunk: build (from HDF5)" in text and "Mixed packing" in text
    assert not (tmp_path / "s3" / "cube" / "_cubes" / "3").exists()  # cubes cleaned up
