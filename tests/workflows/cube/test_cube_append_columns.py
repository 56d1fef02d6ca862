"""An append reads its cube's members and DEST's listing as Arrow columns: the sidecars are
matched to the members, and their stamps compared, without a :class:`SourceInfo` (or any
object) per member; only the granules it places become objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from h5sidecar.references import SourceInfo, read_refs
from h5sidecar.workflows import build_cube
from h5sidecar.workflows.cube import _cube_append
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import _days, _index

#: Members of the cube appended to: far more than the objects an append may make.
MEMBERS = 240
#: SourceInfo objects an append of one granule may make before it writes, whatever the
#: cube's size (the new granule's as its sidecar is read, and the few members looked up).
BOUND = 24


def _count_sourceinfo(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count every SourceInfo made from now on (a wrapper on the class's own constructor)."""
    made: list[int] = []
    init = SourceInfo.__init__

    def counted(self: SourceInfo, *args: object, **kwargs: object) -> None:
        made.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(SourceInfo, "__init__", counted)
    return made


@pytest.mark.slow
def test_append_makes_no_sourceinfo_per_member(tmp_path: Path, monkeypatch) -> None:
    old = _days(tmp_path / "nc", 0, MEMBERS)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    new = _days(tmp_path / "nc", MEMBERS, 1)
    _index(tmp_path / "nc", sidecars)

    made = _count_sourceinfo(monkeypatch)
    # the read phase ends where the tail's write begins (the members file's digest, written
    # as before, hashes every member's identity)
    before_write: list[int] = []
    tail = _cube_append.append_tail

    def counted_tail(*args, **kwargs):
        before_write.append(len(made))
        return tail(*args, **kwargs)

    monkeypatch.setattr(_cube_append, "append_tail", counted_tail)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.action == "appended" and result.added == tuple(str(f) for f in new)
    assert result.unchanged == MEMBERS and result.sidecars_read == 1
    assert result.written == "tail" and len(before_write) == 1
    # the new granule's identity is counted: the count sees what an append makes
    assert 0 < before_write[0] <= BOUND, before_write
    made.clear()
    again = build_cube(str(sidecars), str(cube), mode="append")  # nothing new
    assert again.action == "up_to_date" and again.unchanged == MEMBERS + 1
    assert len(made) <= BOUND, len(made)
    monkeypatch.undo()

    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)
    _assert_raw_matches_h5py(str(cube), old + new)
