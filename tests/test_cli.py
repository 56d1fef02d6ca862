"""The command line: main([...]) in-process and the installed entry point in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from h5sidecar import __version__
from h5sidecar.cli import main, storage_options
from tests.conftest import S3_CREDENTIALS
from tests.workflows.conftest import assert_matches_h5py, write_bad_granules, write_granule

COMMANDS = ("index", "inspect", "verify", "sample", "demo")


def _entry_point() -> str:
    exe = shutil.which("h5sidecar", path=str(Path(sys.executable).parent))
    assert exe is not None, "the h5sidecar entry point is not installed (pip install -e .)"
    return exe


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"h5sidecar {__version__}"
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and all(c in out for c in COMMANDS) and "exit codes" in out
    for command in COMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        assert f"usage: h5sidecar {command}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["index", "x"])  # -o is required
    assert exc.value.code == 2


def test_storage_option_parsing() -> None:
    pairs = [("anon", True), ("client_kwargs.region_name", "us-west-2"), ("endpoint_url", "u")]
    assert storage_options(pairs) == {
        "anon": True, "client_kwargs": {"region_name": "us-west-2"}, "endpoint_url": "u"}
    assert storage_options([]) is None
    with pytest.raises(SystemExit):
        main(["inspect", "x", "--storage-option", "novalue"])


def test_a_command_leaves_logging_as_it_found_it(tmp_path: Path) -> None:
    """``main`` run in-process logs through its console only while the command runs: a handler
    left on the root logger would carry every later record of the process (other libraries'
    threads too) to a console made for one command."""
    import logging

    root, ours = logging.getLogger(), logging.getLogger("h5sidecar")
    before = root.handlers[:], root.level, ours.level
    write_granule(tmp_path / "in" / "G.h5", seed=0)
    assert main(["-vv", "index", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--serial"]) == 0
    assert main(["-v", "inspect", str(tmp_path / "nope.parq")]) == 2  # the failing path too
    assert (root.handlers, root.level, ours.level) == before


def test_index_inspect_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in"
    for i in range(2):
        write_granule(src / f"G{i}.h5", seed=i)
    dest = tmp_path / "out"
    assert main(["index", str(src), "-o", str(dest), "--workers", "2", "--checksums"]) == 0
    out = capsys.readouterr().out
    assert "2 indexed" in out and "0 failed" in out and "h5sidecar report" in out
    assert_matches_h5py(str(dest / "G0.h5.parq"), src / "G0.h5")
    # second run: everything up to date, machine-readable report
    assert main(["index", str(src), "-o", str(dest), "--json", "--serial"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"ok": 0, "failed": 0, "up_to_date": 2}

    assert main(["inspect", str(dest / "G0.h5.parq")]) == 0
    out = capsys.readouterr().out
    assert "gt1l/heights/h_ph" in out and str(src / "G0.h5") in out
    assert main(["inspect", str(dest / "G0.h5.parq"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["url"] == str(src / "G0.h5") and doc["counts"]["virtual"] >= 5

    assert main(["verify", str(dest / "G1.h5.parq"), "--sample", "all"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["verify", str(dest / "G1.h5.parq"), "--json", "--sample", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    # a different source behind the sidecar: verify exits 1
    write_granule(src / "G1.h5", seed=9)
    assert main(["verify", str(dest / "G1.h5.parq")]) == 1
    assert "DIFFERENCES FOUND" in capsys.readouterr().out


def test_exit_codes_for_failures_and_bad_input(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in"
    good = write_granule(src / "good.h5")
    write_bad_granules(src, good)
    assert main(["index", str(src), "-o", str(tmp_path / "out"), "--serial"]) == 1
    out = capsys.readouterr().out
    assert "1 indexed" in out and "3 failed" in out and "what to do" in out
    assert main(["index", str(tmp_path / "missing"), "-o", str(tmp_path / "o2")]) == 2
    assert "neither a file" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "nope.json")]) == 2
    (tmp_path / "afile").write_text("x")
    assert main(["index", str(good), "-o", str(tmp_path / "afile")]) == 2
    assert "not a folder" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert main(["inspect", str(tmp_path / "bad.json")]) == 2


def test_sample_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sample", str(tmp_path), "--granules", "1", "--photons", "2000",
                 "--netcdf"]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 2 and files[0].startswith("ATL03_") and files[1].endswith(".nc")
    out = capsys.readouterr().out
    assert all(name in out for name in files)


def test_s3_with_aws_environment_and_storage_options(
    tmp_path: Path, s3, s3_bucket: str, s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_granule(tmp_path / "a.h5", n=1500)  # small: moto copies objects per GET
    s3.put(str(src), f"{s3_bucket}/in/a.h5")
    # the entry point with only the standard AWS variables (endpoint included) in its env
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(S3_CREDENTIALS, AWS_ENDPOINT_URL=s3_endpoint)
    res = subprocess.run([_entry_point(), "index", f"s3://{s3_bucket}/in", "-o",
                          f"s3://{s3_bucket}/out", "--format", "json"],
                         capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert s3.exists(f"{s3_bucket}/out/a.h5.json")
    # in-process, endpoint and keys as --storage-option
    opts = ["--storage-option", f"endpoint_url={s3_endpoint}",
            "--storage-option", f"key={S3_CREDENTIALS['AWS_ACCESS_KEY_ID']}",
            "--storage-option", f"secret={S3_CREDENTIALS['AWS_SECRET_ACCESS_KEY']}"]
    ref = f"s3://{s3_bucket}/out/a.h5.json"
    assert main(["inspect", ref, "--json", *opts]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"]["url"] == f"s3://{s3_bucket}/in/a.h5"
    assert doc["source"]["etag"] == s3.info(f"{s3_bucket}/in/a.h5")["ETag"].strip('"')
    assert main(["verify", ref, "--sample", "all", *opts]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["index", f"s3://{s3_bucket}/in", "-o", f"s3://{s3_bucket}/out", "--format",
                 "json", "--serial", "--json", *opts]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["up_to_date"] == 1


@pytest.mark.slow
def test_demo_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outdir = tmp_path / "demo"
    assert main(["demo", str(outdir)]) == 0
    out = capsys.readouterr().out
    assert "values through the sidecar vs h5py" in out and "NO" not in out
    assert len(list((outdir / "sidecars").glob("*.parq"))) == 2
    assert (outdir / "sidecars" / "_h5sidecar.sqlite").is_file()
    assert "indexed 2 granule(s):" in out
    assert main(["demo", str(outdir)]) == 0  # again: nothing to index
    out = capsys.readouterr().out
    assert "indexed nothing, 2 up to date:" in out and "NO" not in out


def test_entry_point_subprocess(tmp_path: Path) -> None:
    exe = _entry_point()
    res = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and __version__ in res.stdout
    src = write_granule(tmp_path / "in" / "a.h5")
    res = subprocess.run([exe, "-v", "index", str(src), "-o", str(tmp_path / "out"),
                          "--format", "json", "-v"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "indexed " in res.stderr  # -v (twice): the worker logs each granule on stderr
    assert_matches_h5py(str(tmp_path / "out" / "a.h5.json"), src)
    res = subprocess.run([exe, "verify", str(tmp_path / "out" / "a.h5.json")],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
