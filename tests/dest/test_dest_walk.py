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


def test_a_local_folder_is_listed_in_name_order_as_fsspec_types_it(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """A local folder's entries are held in Arrow while sorted (a flat folder of a million
    sidecars held ~0.35 KB an entry as tuples): the same order and types as fsspec's listing,
    across several slices, also for a name that is not UTF-8 (sorted in Python)."""
    from h5sidecar.dest import _sidecar_listing

    monkeypatch.setattr(_sidecar_listing, "_SLICE", 3)
    names = ["b.h5.json", "a-b.json", "a.json", "é.h5.json", "Z.json", "z", "a.parq", "ä", "0"]
    for n in names:
        (tmp_path / n).write_text("{}")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "a.json", tmp_path / "link.json")
    fs = fsspec.filesystem("file")

    def want() -> list[tuple[str, str]]:
        entries = sorted(fs.ls(str(tmp_path), detail=True), key=lambda e: e["name"])
        return [(os.path.basename(e["name"]), e["type"]) for e in entries]

    assert list(_sidecar_listing._local_entries(str(tmp_path))) == want()
    # a name that is no UTF-8 (a surrogate escape in Python): the folder sorted in Python
    fd = os.open(os.fsencode(tmp_path) + b"/\xff.json", os.O_CREAT | os.O_WRONLY)
    os.close(fd)
    got = list(_sidecar_listing._local_entries(str(tmp_path)))
    assert [n for n, _ in got] == sorted(os.listdir(tmp_path))
    assert dict(got)["\udcff.json"] == "file" and dict(got)["sub"] == "directory"
