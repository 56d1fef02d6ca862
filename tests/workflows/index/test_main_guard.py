"""``index_many`` in a script without ``if __name__ == "__main__":``: worker processes import the
script again, so the batch is refused before any worker starts, with one error naming the fix
(not a traceback per worker and every granule "the worker process died")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from h5sidecar.errors import UnguardedMainError
from h5sidecar.workflows import index_many
from tests.workflows.conftest import assert_matches_h5py, write_granule

ROOT = Path(__file__).parents[3]

UNGUARDED = """\
from h5sidecar.workflows import index_many

report = index_many({src!r}, {dest!r}, workers=2)
print("ok" if report.ok else "failed")
"""

GUARDED = """\
from h5sidecar.workflows import index_many


def main():
    report = index_many({src!r}, {dest!r}, workers=2)
    print("ok" if report.ok else "failed")


if __name__ == "__main__":
    main()
"""


def _run_script(text: str, tmp_path: Path, *, stdin: bool = False
                ) -> tuple[subprocess.CompletedProcess[str], Path]:
    src, dest = tmp_path / "src", tmp_path / "dest"
    write_granule(src / "a.h5", seed=1)
    write_granule(src / "b.h5", seed=2)
    script = tmp_path / "batch.py"
    script.write_text(text.format(src=str(src), dest=str(dest)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv, given = ([sys.executable, "-"], script.read_text()) if stdin else (
        [sys.executable, str(script)], None)
    done = subprocess.run(argv, capture_output=True, text=True, input=given,
                          timeout=240, env=env, cwd=tmp_path, check=False)
    return done, dest


def test_an_unguarded_script_is_refused_with_the_fix(tmp_path: Path) -> None:
    done, dest = _run_script(UNGUARDED, tmp_path)
    assert done.returncode == 1
    err = done.stderr
    assert err.count("Traceback") == 1 and "UnguardedMainError: " in err, err  # the parent only
    assert "batch.py (line 3)" in err and 'if __name__ == "__main__":' in err, err
    assert "worker process died" not in err + done.stdout and "bootstrapping" not in err, err
    assert not dest.exists()  # refused before anything was written


def test_an_unguarded_serial_batch_is_refused_too(tmp_path: Path) -> None:
    """``"serial"`` with its default time limit runs in a worker process, which imports the
    script again: before, every granule failed as "the worker process died"."""
    done, dest = _run_script(UNGUARDED.replace("workers=2", 'executor="serial"'), tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("Traceback") == 1 and "UnguardedMainError: " in done.stderr
    assert "max_granule_seconds=0" in done.stderr  # the way to index in this process
    assert "worker process died" not in done.stderr + done.stdout
    assert not dest.exists()


def test_a_script_from_stdin_is_refused_or_indexes_in_this_process(tmp_path: Path) -> None:
    """``python -`` (a heredoc): no worker can import ``<stdin>``, guarded or not."""
    done, dest = _run_script(GUARDED, tmp_path, stdin=True)
    assert done.returncode == 1
    assert done.stderr.count("Traceback") == 1 and "standard input (<stdin>)" in done.stderr
    assert "worker process died" not in done.stderr + done.stdout and not dest.exists()
    in_process = GUARDED.replace(
        "workers=2", 'executor="serial", settings=IndexSettings(max_granule_seconds=0)'
    ).replace("from h5sidecar.workflows", "from h5sidecar.settings import IndexSettings\nfrom h5sidecar.workflows")
    done, dest = _run_script(in_process, tmp_path, stdin=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    for name in ("a.h5", "b.h5"):
        assert_matches_h5py(str(dest / f"{name}.parq"), tmp_path / "src" / name)


def test_a_guarded_script_indexes(tmp_path: Path) -> None:
    done, dest = _run_script(GUARDED, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    for name in ("a.h5", "b.h5"):
        assert_matches_h5py(str(dest / f"{name}.parq"), tmp_path / "src" / name)


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_index_many_under_pytest_or_c_is_not_refused(tmp_path: Path, executor: str) -> None:
    """No false alarm where workers import no script: here pytest's guarded entry point."""
    granule = write_granule(tmp_path / "src" / "g.h5")
    report = index_many(str(tmp_path / "src"), str(tmp_path / "dest"), executor=executor,
                        workers=1)
    assert report.ok
    assert_matches_h5py(report.granules[0].sidecar, granule)
    assert issubclass(UnguardedMainError, RuntimeError)
