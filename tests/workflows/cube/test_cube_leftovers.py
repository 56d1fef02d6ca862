"""A build or append of a local cube holds its lock (``.NAME.lock`` beside it) and removes what
a writer of that cube killed mid-write left beside it, and nothing of any other cube's."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from h5sidecar.workflows import build_cube
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import _days, _index, _read_everywhere

ROOT = Path(__file__).resolve().parents[3]

_KILLED = textwrap.dedent("""
    import os, signal, sys
    from h5sidecar.references import _atomic_local
    from h5sidecar.workflows import build_cube

    def killed(new, dest):  # every new file written, the swap not made
        os.kill(os.getpid(), signal.SIGKILL)

    _atomic_local._swap_in = killed
    build_cube(sys.argv[1], sys.argv[2], mode=sys.argv[3])
""")


def _leftovers(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".old"))}


@pytest.mark.parametrize("mode", ["append", "build"])
def test_a_rerun_removes_what_a_killed_write_of_the_cube_left(tmp_path: Path, mode: str) -> None:
    old = _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    new = _days(tmp_path / "nc", 3, 2)
    _index(tmp_path / "nc", sidecars)
    other = tmp_path / ".other.parq.abc123.tmp"  # another cube's, maybe being written
    other.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run([sys.executable, "-c", _KILLED, str(sidecars), str(cube), mode],
                           cwd=ROOT, check=False, env=env, capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    left = {n for n in _leftovers(tmp_path) if n.startswith(".cube.parq.")}
    assert left, "the killed write left its new directory beside the cube"
    result = build_cube(str(sidecars), str(cube), mode=mode)
    assert len(result.cubes[0].granules) == 5
    assert _leftovers(tmp_path) == {other.name}
    _read_everywhere(str(cube), old + new)
    _assert_raw_matches_h5py(str(cube), old + new)


def test_leftovers_wait_for_a_live_writer_and_another_cube_keeps_its_own(tmp_path: Path) -> None:
    files = _days(tmp_path / "nc", 0, 2)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    mine = tmp_path / ".cube.parq.dead_1.tmp"
    part = tmp_path / ".cube-0.parq.dead_2.tmp"  # a split part's, its lock not held
    busy = tmp_path / ".cube-1.parq.live_3.tmp"  # cube-1.parq is being written as a cube
    aside = tmp_path / ".cube-2.parq.0badcafe.old"  # cube-2.parq is missing: its only copy
    for d in (mine, part, busy, aside):
        d.mkdir()
    held = [os.open(tmp_path / n, os.O_RDWR | os.O_CREAT) for n in (".cube.parq.lock",
                                                                     ".cube-1.parq.lock")]
    for fd in held:
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        run = threading.Thread(target=build_cube, args=(str(sidecars), str(cube)))
        run.start()
        run.join(1.0)
        assert run.is_alive() and mine.exists()  # waits for the writer holding the cube
    finally:
        os.close(held[0])
    run.join(60)
    os.close(held[1])
    assert _leftovers(tmp_path) == {busy.name, aside.name}
    _read_everywhere(str(cube), files)
