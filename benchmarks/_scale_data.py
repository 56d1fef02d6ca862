"""Synthetic but valid DESTs of N granules for ``bench_scale.py``, made in seconds, not hours.

One real CF netCDF-4 daily granule (:func:`h5sidecar.sample.write_daily_granule`) is written
once and copied into a few *inodes* (ext4 allows ~65,000 names per inode), then hard-linked
under N names ``SRC/granule_NNNNNNN.nc``.  Every name of one inode has the same identity (size,
mtime, inode, change time) but its URL, so after the last link is made (a link changes the
inode's change time) one real ``h5sidecar index`` run over one name per inode gives a template
sidecar and template record rows per inode.  Each of the N granules then gets:

- its JSON sidecar: the template's text with the name substituted and the inline ``time``
  chunk replaced by the granule's own day (so the granules follow each other in time and a
  ``cube`` can concatenate them; indexed with ``H5SIDECAR_INLINE_THRESHOLD`` so the coordinates
  are inline);
- its rows in DEST's record: every row of every table of the template record that names the
  template granule, copied with the names substituted (whatever the schema is: new tables and
  columns are copied as they are; an ``INTEGER PRIMARY KEY`` is left to SQLite).

So the sidecars' source identities match the listing (a no-op ``index`` re-run finds nothing to
do) and every command sees a DEST an ``index`` run could have written.  The values read through
a sidecar are those of the template granule but for ``time``: this data is for measuring the
bookkeeping, not for checking values (the tests do that).
"""

from __future__ import annotations

import base64
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

#: Names of one inode (ext4's limit is 65,000 links).
LINKS_PER_INODE = 50_000
#: Coordinates up to this many bytes are inlined in the sidecars (``time`` above all).
INLINE_THRESHOLD = 100
#: Environment every command of the benchmark runs with (as the template was indexed).
ENV = {"H5SIDECAR_INLINE_THRESHOLD": str(INLINE_THRESHOLD)}
RECORD = "_h5sidecar.sqlite"
#: The repository: commands run from here import this checkout's h5sidecar.
ROOT = Path(__file__).resolve().parents[1]
_WIDTH = 7


def name(i: int) -> str:
    """The file name of granule ``i``."""
    return f"granule_{i:0{_WIDTH}d}.nc"


def cli(*args: str) -> list[str]:
    """``argv`` of the public CLI, ``python -m h5sidecar.cli ARGS``."""
    return [sys.executable, "-m", "h5sidecar.cli", *args]


def command_env() -> dict[str, str]:
    """The environment of every measured command."""
    return {**os.environ, **ENV}


def groups(n: int) -> list[range]:
    """The names that share one inode, in order: runs of :data:`LINKS_PER_INODE`, and the last
    1% of the names (:func:`touched`) on inodes of their own.  Replacing a hard link changes
    its inode's change time, which every other name of that inode reports too (and the
    indexer compares): the names a run replaces must not share an inode with the others."""
    last = n - len(touched(n))
    out = [range(a, min(a + LINKS_PER_INODE, last)) for a in range(0, last, LINKS_PER_INODE)]
    return out + [range(a, min(a + LINKS_PER_INODE, n)) for a in range(last, n, LINKS_PER_INODE)]


def touched(n: int) -> range:
    """The names ``index 1%`` replaces: the last 1% (at least one)."""
    return range(n - max(1, n // 100), n)


def make_dest(root: Path, n: int) -> tuple[Path, Path]:
    """``root/src`` with ``n`` granules and ``root/dest`` indexed from it (made once per ``n``).

    Returns ``(src, dest)``.
    """
    src, dest = root / "src", root / "dest"
    if (root / "done").exists():
        return src, dest
    if root.exists():
        shutil.rmtree(root)
    tmpl_src, tmpl_dest = root / "tmpl_src", root / "tmpl_dest"
    for d in (src, dest, tmpl_src):
        d.mkdir(parents=True)
    inodes = _link_sources(root, src, tmpl_src, n)
    subprocess.run(cli("index", str(tmpl_src), "-o", str(tmpl_dest), "--format", "json",
                       "--serial"), cwd=ROOT, env=command_env(), check=True, capture_output=True)
    templates = [(tmpl_dest / f"{name(g.start)}.json").read_text() for g in groups(n)]
    assert len(templates) == inodes
    subs = {str(tmpl_src): str(src), str(tmpl_dest): str(dest)}
    _write_sidecars(dest, templates, subs, n)
    _write_record(tmpl_dest / RECORD, dest / RECORD, subs, n)
    (root / "done").touch()
    return src, dest


def _link_sources(root: Path, src: Path, tmpl_src: Path, n: int) -> int:
    """Hard links of one real granule (one copy per :data:`LINKS_PER_INODE` names), then one
    more name per copy in ``tmpl_src`` (its template); returns the number of copies."""
    from h5sidecar.sample._collection import write_daily_granule

    first = write_daily_granule(root / "granule.nc", date(2020, 1, 1))
    for k, group in enumerate(groups(n)):
        copy = root / f"inode_{k}.nc"
        shutil.copyfile(first, copy)
        for i in group:
            os.link(copy, src / name(i))
        os.link(copy, tmpl_src / name(group.start))
    return len(groups(n))


def _time_chunk(day: float) -> str:
    return "base64:" + base64.b64encode(np.float64(day).tobytes()).decode()


def _write_sidecars(dest: Path, templates: list[str], subs: Mapping[str, str], n: int) -> None:
    """One JSON sidecar per granule: its template's text, names and ``time`` substituted."""
    template_time = _time_chunk(0.5)  # noon of 2020-01-01 in days since 2020-01-01
    for k, text in enumerate(templates):
        if template_time not in text:
            raise RuntimeError("the template sidecar holds no inline time chunk")
        for old, new in subs.items():
            text = text.replace(old, new)
        templates[k] = text
    # the time summary the indexer recorded (what the catalog dates an item by) says day i too
    template_summary = '"time":{"finite":1,"min":0.5,"max":0.5}'
    for group, template in zip(groups(n), templates, strict=True):
        for i in group:
            text = template.replace(name(group.start), name(i))
            text = text.replace(template_summary,
                                f'"time":{{"finite":1,"min":{i + 0.5},"max":{i + 0.5}}}')
            (dest / f"{name(i)}.json").write_text(text.replace(template_time, _time_chunk(i + 0.5)))


def _write_record(template: Path, out: Path, subs: Mapping[str, str], n: int) -> None:
    """DEST's record: the template record with its rows of the template granules copied for
    every granule (names substituted), its other rows with the folders substituted."""
    shutil.copyfile(template, out)
    db = sqlite3.connect(out)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        tmpl_names = [name(g.start) for g in groups(n)]
        for table in tables:
            _copy_rows(db, table, subs, tmpl_names, n)
        _restamp(db)
        db.commit()
    finally:
        db.close()


def _restamp(db: sqlite3.Connection) -> None:
    """Each row's sidecar ``stamp`` (when the record has one) made that of its own sidecar:
    copied from the template's, it would name another file's size and time, and every granule
    would be re-checked as if its sidecar had been rewritten."""
    from h5sidecar.dest._locations import sidecar_stamp

    cols = {c[1] for c in db.execute("PRAGMA table_info(granules)")}
    if "stamp" not in cols:
        return
    sidecars = [r[0] for r in db.execute("SELECT sidecar FROM granules")]
    db.executemany("UPDATE granules SET stamp = ? WHERE sidecar = ?",
                   ((sidecar_stamp(sc.removeprefix("file://")), sc) for sc in sidecars))


def _copy_rows(db: sqlite3.Connection, table: str, subs: Mapping[str, str],
               tmpl_names: list[str], n: int) -> None:
    info = list(db.execute(f"PRAGMA table_info({table})"))
    cols = [c[1] for c in info]
    # an INTEGER PRIMARY KEY (a rowid alias) is numbered by SQLite in the copies
    auto = {c[1] for c in info if c[5] and c[2].upper() == "INTEGER"}
    rows = list(db.execute(f"SELECT {', '.join(cols)} FROM {table}"))
    db.execute(f"DELETE FROM {table}")

    def sub(value: Any, old: str | None = None, new: str | None = None) -> Any:
        if not isinstance(value, str):
            return value
        for a, b in subs.items():
            value = value.replace(a, b)
        return value if old is None or new is None else value.replace(old, new)

    keep = [c for c in cols if c not in auto]

    def insert(names: list[str]) -> str:
        return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"

    for row in rows:
        values = dict(zip(cols, row, strict=True))
        owner = next((t for t in tmpl_names if any(isinstance(v, str) and t in v
                                                    for v in row)), None)
        if owner is None:
            db.execute(insert(cols), [sub(values[c]) for c in cols])
            continue
        k = tmpl_names.index(owner)
        db.executemany(insert(keep), ([sub(values[c], owner, name(i)) for c in keep]
                                for i in groups(n)[k]))
