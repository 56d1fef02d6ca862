"""DEST's one walk: ``prune`` and ``h5sidecar catalog`` find the same sidecars in a DEST."""

from __future__ import annotations

import os
from pathlib import Path

import fsspec

from h5sidecar.dest._dest_walk import walk_dest
from h5sidecar.dest._sidecar_listing import iter_sidecars


def _dest(root: Path, deep: int) -> tuple[Path, set[str], set[str]]:
    """A DEST with sidecars at several depths (one ``deep`` folders down), the record, hidden
    folders, a staging temporary and a Parquet sidecar's own files; returns it, its sidecars
    and its temporaries."""
    dest = root / "dest"
    sidecars = set()
    for rel in ("a.h5.json", "sub/b.h5.json", "sub/c.nc.parq", "x/y/d.h5.json"):
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".parq"):
            path.mkdir()
            (path / ".zmetadata").write_text("{}")
            (path / "inner.json").write_text("{}")  # a record file: never a sidecar
        else:
            path.write_text("{}")
        sidecars.add(str(path))
    folder = dest.joinpath(*(f"l{i}" for i in range(deep)))
    folder.mkdir(parents=True)
    (folder / "deep.h5.json").write_text("{}")
    (dest / "_report.json").write_text('{"granules": []}')
    (dest / ".hidden").mkdir()
    (dest / ".hidden" / "e.h5.json").write_text("{}")
    (dest / "_h5sidecar_record").mkdir()
    (dest / "_h5sidecar_record" / "p.json").write_text("{}")
    (dest / "sub" / ".b.h5.json.1234.tmp").write_text("")
    (dest / "plain.parq").write_text("")  # a file named .parq: not a sidecar
    os.symlink(dest / "a.h5.json", dest / "link.h5.json")
    sidecars.add(str(dest / "link.h5.json"))
    return dest, sidecars | {str(folder / "deep.h5.json")}, {str(dest / "sub" / ".b.h5.json.1234.tmp")}


def test_prune_and_catalog_find_the_same_sidecars(tmp_path: Path) -> None:
    dest, sidecars, temporaries = _dest(tmp_path, deep=3)
    fs = fsspec.filesystem("file")
    found = list(walk_dest(fs, str(dest), False))
    assert {p for p, mtime in found if mtime is None} == sidecars
    assert {p for p, mtime in found if mtime is not None} == temporaries
    assert all(mtime() is not None for p, mtime in found if mtime is not None)
    listed = [g.sidecar for g, _ in iter_sidecars(str(dest), identity=False)]
    assert set(listed) == sidecars
    assert listed == sorted(listed, key=lambda p: Path(p).relative_to(dest).parts)  # name order


def test_only_the_catalog_stops_eight_folders_down(tmp_path: Path) -> None:
    """The catalog lists no deeper than eight folders below DEST; prune, which removes what is
    left over, looks everywhere."""
    dest, sidecars, _ = _dest(tmp_path, deep=9)
    deep = next(p for p in sidecars if p.endswith("deep.h5.json"))
    found = {p for p, mtime in walk_dest(fsspec.filesystem("file"), str(dest), False) if mtime is None}
    assert found == sidecars
    assert {g.sidecar for g, _ in iter_sidecars(str(dest), identity=False)} == sidecars - {deep}
