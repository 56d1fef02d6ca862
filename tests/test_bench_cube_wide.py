"""The wide-cube benchmark (benchmarks/bench_cube_wide.py): one small run.

Its read process compares the cube's time steps with h5py's read of the granules, so a run
that reports a table has read the values right; a wrong value fails the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_cube_wide


def test_a_small_run_reads_the_granules_values(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    bench_cube_wide.main(["--granules", "6", "--variables", "3", "--repeats", "1",
                          "--work", str(tmp_path / "wide")])
    out = capsys.readouterr().out
    assert "6 granules x 3 variables (18 chunk references)" in out
    row = next(line for line in out.splitlines() if line.startswith("| . |"))
    assert row.count("|") == 7 and " MB |" in row
    assert (tmp_path / "wide" / "cube.parq" / ".zmetadata").is_file()
