"""A Parquet cube's append writes only what is new (its tail): the new members' record files
and each array's last partial one, the members and manifests files and ``.zmetadata``; the
rest is kept as it was.  A reader sees the old cube or the new one, and a process killed
mid-append leaves the old cube readable and a re-run completes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from h5sidecar.cli import main
from h5sidecar.references import read_refs, write_parquet
from h5sidecar.workflows import build_cube
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import _days, _index, _read_everywhere

ROOT = Path(__file__).resolve().parents[3]


def _stamps(cube: Path) -> dict[str, tuple[int, int]]:
    """Each file of the cube: (inode, mtime); a kept file keeps both (it is hard-linked)."""
    return {str(p.relative_to(cube)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in cube.rglob("*") if p.is_file()}


def _small_records(cube: Path) -> None:
    """The cube written again with 2 chunks a record file (its last one partial)."""
    write_parquet(read_refs(str(cube), lazy=False), cube, record_size=2)


def _cube_of(tmp_path: Path, days: int) -> tuple[list[Path], Path, Path]:
    files = _days(tmp_path / "nc", 0, days)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    _small_records(cube)
    return files, sidecars, cube


def test_tail_append_writes_only_the_new_records_and_reads_like_the_files(
    tmp_path: Path,
) -> None:
    old, sidecars, cube = _cube_of(tmp_path, 3)  # records of 2: refs.1.parq holds 1 of 2
    before = _stamps(cube)
    new = _days(tmp_path / "nc", 3, 4)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.action == "appended" and result.written == "tail", result.why_rewritten
    after = _stamps(cube)
    changed = {rel for rel, s in after.items() if before.get(rel) != s}
    # the last partial record of each array and the new ones, the coordinate (inline, whole),
    # the members and manifests files and .zmetadata; the first records and lat/lon kept
    assert changed == {".zmetadata", ".h5sidecar/members.parq", ".h5sidecar/manifests.parq",
                       "time/refs.0.parq", *(f"{a}/refs.{r}.parq" for a in ("tas", "pr")
                                             for r in (1, 2, 3))}
    assert {"tas/refs.0.parq", "pr/refs.0.parq", "lat/refs.0.parq"} <= set(after) - changed
    files = old + new
    _read_everywhere(str(cube), files)  # engine="h5sidecar" and plain zarr over reference://
    _assert_raw_matches_h5py(str(cube), files)
    # the same references as a build of every member (records of 2 chunks too)
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    _small_records(whole)
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)
    for rel in changed - {".zmetadata", ".h5sidecar/manifests.parq"}:
        assert (cube / rel).read_bytes() == (whole / rel).read_bytes(), rel


def test_an_append_that_cannot_be_a_tail_rewrites_and_says_why(tmp_path: Path, capsys) -> None:
    old = _days(tmp_path / "nc", 0, 2)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    # sidecars of the new granules in another folder than the members': rewritten
    new = _days(tmp_path / "nc2", 2, 1)
    other = _index(tmp_path / "nc2", tmp_path / "elsewhere")
    listed = sorted(str(p) for d in (sidecars, other) for p in d.glob("*.parq"))
    result = build_cube(listed, str(cube), mode="append")
    assert result.written == "rewritten"
    assert "not under the cube's sidecar folder" in result.why_rewritten
    _read_everywhere(str(cube), old + new)
    more = _days(tmp_path / "nc", 3, 1)
    _index(tmp_path / "nc", sidecars)
    capsys.readouterr()
    assert main(["cube", str(sidecars), "-o", str(cube), "--append"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "1 granule(s) added" in said and "tail: only the new members' files written" in said
    _read_everywhere(str(cube), old + new + more)


_KILLED = textwrap.dedent("""
    import os, signal, sys
    from h5sidecar.references import _atomic_local
    from h5sidecar.workflows import build_cube

    def killed(new, dest):  # every new file written, the swap not made
        os.kill(os.getpid(), signal.SIGKILL)

    _atomic_local._swap_in = killed
    build_cube(sys.argv[1], sys.argv[2], mode="append")
""")


def test_kill_9_mid_append_leaves_the_old_cube_and_a_rerun_completes_it(tmp_path: Path) -> None:
    old, sidecars, cube = _cube_of(tmp_path, 3)
    zmeta = (cube / ".zmetadata").read_bytes()
    new = _days(tmp_path / "nc", 3, 2)
    _index(tmp_path / "nc", sidecars)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run([sys.executable, "-c", _KILLED, str(sidecars), str(cube)], cwd=ROOT,
                           check=False,
                           env=env, capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    assert (cube / ".zmetadata").read_bytes() == zmeta
    _read_everywhere(str(cube), old)  # the old cube, whole
    _assert_raw_matches_h5py(str(cube), old)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.action == "appended" and result.written == "tail"
    assert len(result.added) == 2
    _read_everywhere(str(cube), old + new)
    _assert_raw_matches_h5py(str(cube), old + new)
    assert json.loads((cube / ".zmetadata").read_bytes())["metadata"]["tas/.zarray"]["shape"][0] == 5


@pytest.mark.parametrize("days", [2])
def test_tail_append_to_a_cube_with_one_member_per_record(tmp_path: Path, days: int) -> None:
    """Records exactly full (no partial one): only new record files, none rewritten."""
    old, sidecars, cube = _cube_of(tmp_path, days)
    before = _stamps(cube)
    new = _days(tmp_path / "nc", days, 1)
    _index(tmp_path / "nc", sidecars)
    assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
    after = _stamps(cube)
    assert {r for r in ("tas/refs.0.parq", "pr/refs.0.parq") if before[r] != after[r]} == set()
    assert "tas/refs.1.parq" in after
    _read_everywhere(str(cube), old + new)


def test_tail_refused_when_an_array_lists_its_own_urls(tmp_path: Path) -> None:
    """An array whose extras list its URLs (not "members") would miss the new members' URLs:
    such a cube is rewritten whole."""
    from h5sidecar.references import tail_refusal
    from h5sidecar.references._extras import pack, unpack

    _, _, cube = _cube_of(tmp_path, 2)
    assert tail_refusal(cube, ["tas", "pr"]) == ""
    zmeta = json.loads((cube / ".zmetadata").read_bytes())
    rest = {k: zmeta["h5sidecar"].pop(k) for k in ("members_file", "manifests")}
    block = unpack(zmeta["h5sidecar"])
    block["arrays"]["tas"]["urls"] = [0]
    zmeta["h5sidecar"] = {**pack(block), **rest}
    (cube / ".zmetadata").write_text(json.dumps(zmeta))
    assert tail_refusal(cube, ["tas", "pr"]).startswith("tas's chunk URLs are not the members'")
