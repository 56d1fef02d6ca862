"""The catalog's and the cube's listing of DEST: streamed, and the identities it records stable."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import fsspec

from h5sidecar.dest import _sidecar_listing
from h5sidecar.dest._sidecar_listing import iter_sidecars, list_indexed


def _flat_dest(root: Path, n: int) -> Path:
    dest = root / "dest"
    dest.mkdir()
    (root / "one.json").write_text("{}")
    for i in range(n):
        os.link(root / "one.json", dest / f"g{i:06d}.json")
    return dest


def test_a_flat_folder_is_listed_without_holding_its_entries(tmp_path: Path) -> None:
    """A flat DEST of 1,000,000 sidecars held ~700 bytes an entry (fsspec's listing dictionary
    of every entry, with its ``stat``) for the whole walk; its names alone are ~130 bytes."""
    n = 20_000
    dest = _flat_dest(tmp_path, n)
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_sidecars(str(dest)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == n
    assert peak / n < 300, f"{peak / n:.0f} bytes an entry at the listing's peak"


def test_identities_are_those_of_fsspecs_listing(tmp_path: Path) -> None:
    """The catalog's item database is keyed by these identities: a walk that stats entries
    itself must give what fsspec's listing gave, or every sidecar is read again once."""
    dest = tmp_path / "dest"
    (dest / "sub").mkdir(parents=True)
    (dest / "a.json").write_text("{}")
    (dest / "sub" / "d.json").write_text('{"x": 1}')
    (dest / "b.parq").mkdir()
    (dest / "b.parq" / ".zmetadata").write_text("{}")
    os.symlink(dest / "a.json", dest / "c.json")
    fs = fsspec.filesystem("file")
    expected = {}
    for folder in (dest, dest / "sub"):
        for entry in fs.ls(str(folder), detail=True):
            path = entry["name"].rstrip("/")
            if path.endswith((".json", ".parq")):
                expected[path] = _sidecar_listing._identity(fs, path, entry)
    found = {g.sidecar: ident for g, ident in iter_sidecars(str(dest))}
    assert found == expected and len(found) == 4
    assert [g.name for g in list_indexed(str(dest), sizes=False)] == ["a", "b", "c", "sub/d"]
