"""The scale benchmark (benchmarks/bench_scale.py): its synthetic DESTs are what index would
write, and a small run measures every operation."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from benchmarks import _scale_data as data
from h5sidecar.read import read_arrays

N = 60


def test_synthetic_dest_is_up_to_date_and_reads_like_h5py(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(data, "LINKS_PER_INODE", 25)  # four inodes (the last 1% on its own)
    src, dest = data.make_dest(tmp_path, N)
    run = subprocess.run(data.cli("index", str(src), "-o", str(dest), "--format", "json",
                                  "--serial", "--json"), cwd=data.ROOT, env=data.command_env(),
                         capture_output=True, text=True, check=True)
    statuses = [g["status"] for g in json.loads(run.stdout)["granules"]]
    assert len(statuses) == N and set(statuses) == {"up_to_date"}  # nothing re-indexed
    for i in (0, 26, N - 1):  # one granule of each inode
        got = read_arrays(str(dest / f"{data.name(i)}.json"), ["tas", "time", "lat"])
        with h5py.File(src / data.name(i)) as f:
            np.testing.assert_array_equal(got["tas"], f["tas"][...])
            np.testing.assert_array_equal(got["lat"], f["lat"][...])
        assert got["time"].tolist() == [i + 0.5]  # its own day (the source holds day 0)
        extra = json.loads((dest / f"{data.name(i)}.json").read_text())["h5sidecar"]["extra"]
        assert extra["coordinate_summary"]["time"]["min"] == i + 0.5  # the catalog dates by it
    # "index 1%" re-indexes the sources it replaced, and only those: the others share no inode
    # with them, so their change time did not move
    from benchmarks.bench_scale import _touch_one_percent

    assert _touch_one_percent(src, N) == len(data.touched(N)) == 1
    run = subprocess.run(data.cli("index", str(src), "-o", str(dest), "--format", "json",
                                  "--serial", "--json"), cwd=data.ROOT, env=data.command_env(),
                         capture_output=True, text=True, check=True)
    done = {g["name"]: g["status"] for g in json.loads(run.stdout)["granules"]}
    assert {k for k, v in done.items() if v != "up_to_date"} == {data.name(N - 1)}
    assert done[data.name(N - 1)] == "ok"


@pytest.mark.slow
def test_small_run_measures_every_operation(tmp_path: Path) -> None:
    from benchmarks import bench_scale

    # one size: each operation's measurement is what is tested here (the growth between sizes
    # is arithmetic on two of them, checked below on this run's figures)
    args = argparse.Namespace(sizes=[30], cap=120.0, ops=list(bench_scale.OPS),
                              data=tmp_path, update_readme=False, from_results=None)
    results = bench_scale.run(args)
    for n in ("30",):
        per = results["results"][n]
        for op in bench_scale.OPS:
            assert per[op]["status"] == "ok", (n, op, per[op])
            assert per[op]["rss_mb"] > 10
        serve = per["serve"]
        assert serve["granules_page"]["code"] == serve["lookup"]["code"] == 200
        assert serve["search"]["code"] == 200 and serve["search"]["items"] == 9
        assert per["index 1%"]["touched"] == 1
    table = bench_scale.report(results)
    assert table.count("\n| ") == 1 + len(bench_scale.OPS)  # a header and a row per operation
    # ten times the granules in ten times the time, in the same memory: growth 1.00, 0.00
    tenfold = copy.deepcopy(results["results"]["30"])
    for op in bench_scale.OPS:
        tenfold[op]["startup_s" if op == "serve" else "seconds"] *= 10
    grown = bench_scale.report({**results, "sizes": [30, 300],
                                "results": {"30": results["results"]["30"], "300": tenfold}})
    rows = [line for line in grown.splitlines() if line.startswith("| index no-op")]
    assert "growth 30->300 (time, RSS)" in grown and rows[0].endswith("| 1.00, 0.00 |"), grown
