"""`make demo` installs only what the main job needs; `make test` installs the test tools."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry_run(target: str, venv: Path) -> str:
    out = subprocess.run(
        ["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout


def test_demo_installs_the_package_alone(tmp_path: Path) -> None:
    steps = _dry_run("demo", tmp_path / "venv")
    installs = [line for line in steps.splitlines() if "pip install" in line and "-e" in line]
    assert installs, steps
    assert all(line.rstrip().endswith("-e .") for line in installs), installs
    assert "[test]" not in steps and "ensure-test-tools" not in steps
    assert "h5sidecar demo" in steps


def test_test_installs_the_test_extra(tmp_path: Path) -> None:
    steps = _dry_run("test", tmp_path / "venv")
    assert 'pip install -q -e ".[test]"' in steps
    assert "pytest" in steps


def test_docs_builds_the_site_with_warnings_as_errors(tmp_path: Path) -> None:
    steps = _dry_run("docs", tmp_path / "venv")
    assert 'pip install -q -e ".[docs]"' in steps
    assert "mkdocs build --strict" in steps


def test_setup_all_installs_the_test_and_docs_extras_in_one_run(tmp_path: Path) -> None:
    steps = _dry_run("setup-all", tmp_path / "venv")
    installs = [line for line in steps.splitlines() if "pip install" in line and "-e" in line]
    assert installs == ['.venv/bin/python -m pip install -q -e ".[test,docs]"'.replace(
        ".venv", str(tmp_path / "venv"))], steps
    # then `make test` and `make docs` install nothing more
    stamps = [line for line in steps.splitlines() if line.startswith("touch")]
    assert stamps and all(f"{tmp_path / 'venv'}/.installed{s}" in stamps[0]
                          for s in ("", "-base", "-docs")), stamps


def test_ci_builds_the_docs_after_the_tests() -> None:
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands.index("make test") < commands.index("make docs")
