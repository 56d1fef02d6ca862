"""``h5sidecar catalog ... --pgstac DSN``: a catalog folder loaded into pgstac.

The collections and items of a catalog folder (what :func:`~h5sidecar.catalog.build_catalog`
writes) are upserted with pypgstac's ``Loader``, items streamed in batches from the folder's item
database (or, in a folder without one, from the JSON tree's files).  The
loader reads the folder rather than hooking into the build, so a catalog written earlier (or by
another run) loads the same way.  Links are left out, and an item without a footprint is stored
with an empty geometry (see :mod:`._pgstac_api`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h5sidecar.catalog._item_db import DB_NAME, connect, iter_docs
from h5sidecar.catalog._result import NoFootprint
from h5sidecar.catalog.pgstac._pgstac_api import NO_FOOTPRINT, _unlinked, _unreachable
from h5sidecar.errors import NotIndexedError, require_extra

__all__ = ["BATCH", "PgstacLoad", "load_pgstac"]

#: Items sent to the database per batch: bounds the loader's memory whatever the catalog's size.
BATCH = 1000


@dataclass(frozen=True)
class PgstacLoad:
    """What :func:`load_pgstac` upserted: the collection ids, the number of items, and those of
    them without a footprint (stored with an empty geometry: searches by bbox or intersects
    cannot find them), named as the catalog build names them, with the reason."""

    collections: tuple[str, ...]
    items: int
    no_footprint: tuple[NoFootprint, ...] = ()


def _read(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return doc


def _collection_files(stacdir: Path) -> Iterator[Path]:
    root = stacdir / "catalog.json"
    if not root.is_file():
        raise NotIndexedError(f"no catalog.json in {stacdir}: write one with "
                              "`h5sidecar catalog DEST -o STACDIR`")  # fmt: skip
    for link in _read(root).get("links", []):
        if link.get("rel") == "child":
            yield (root.parent / link["href"]).resolve()


def _docs(stacdir: Path, coll_file: Path, cid: str) -> Iterator[dict[str, Any]]:
    """The collection's item documents: from the item database when the folder has one (a
    collection of more than 10,000 items has no JSON tree), else from the tree's files; read
    in batches or one file at a time, never all held."""
    db_path = stacdir / DB_NAME
    if db_path.is_file():
        db = connect(db_path, readonly=True)
        try:
            for text in iter_docs(db, cid):
                yield json.loads(text)
        finally:
            db.close()
        return
    for link in _read(coll_file).get("links", []):
        if link.get("rel") == "item":
            yield _read(coll_file.parent / link["href"])


def _items(docs: Iterable[dict[str, Any]], cid: str, counter: list[int],
           unlocated: list[NoFootprint]) -> Iterator[dict[str, Any]]:  # fmt: skip
    """The items to load; those without a geometry get the empty stand-in and are named in
    ``unlocated`` (pgstac's ``items.geometry`` is ``NOT NULL``, though a null geometry is
    valid STAC)."""
    for doc in docs:
        doc = _unlinked(doc)
        if doc.get("geometry") is None:
            props = doc.get("properties") or {}
            unlocated.append(NoFootprint(props.get("title") or doc["id"], props.get(
                "h5sidecar:no_footprint", "the item has no geometry")))  # fmt: skip
            doc["geometry"] = NO_FOOTPRINT
        doc["collection"] = cid
        counter[0] += 1
        yield doc


def load_pgstac(
    dsn: str,
    stacdir: str | Path,
    *,
    collections: Iterable[str] | None = None,
    batch: int = BATCH,
) -> PgstacLoad:
    """Upsert a catalog folder's collections and items into pgstac.

    Re-running is idempotent (upserts by collection and item id); items the folder no longer
    holds are not deleted from the database.  Items without a geometry (granules catalogued
    with no footprint) are stored with an empty one, which pgstac's ``NOT NULL`` accepts and no
    bbox or intersects search finds, and named in the result; searches answer ``null``.

    Parameters
    ----------
    dsn : str
        libpq connection string of a database with pgstac installed (``pypgstac migrate``).
    stacdir : str or Path
        Folder written by ``h5sidecar catalog DEST -o STACDIR``.
    collections : iterable of str, optional
        Only these collection ids (default: every collection of the folder).
    batch : int
        Items per database batch.

    Raises
    ------
    NotIndexedError
        No ``catalog.json`` in ``stacdir``, or a named collection is not in it.
    """
    require_extra("pgstac", "pypgstac", "psycopg", feature="loading pgstac (h5sidecar catalog --pgstac)")
    from pypgstac.db import PgstacDB
    from pypgstac.load import Loader, Methods

    wanted = None if collections is None else set(collections)
    files = {}
    for path in _collection_files(Path(stacdir)):
        doc = _read(path)
        if doc.get("type") == "Collection" and (wanted is None or doc["id"] in wanted):
            files[doc["id"]] = path
    unknown = (wanted or set()) - set(files)
    if unknown:
        raise NotIndexedError(f"no collection {sorted(unknown)} in {stacdir} (collections: "
                              f"{', '.join(files) or 'none'})")  # fmt: skip
    import psycopg

    counter, unlocated = [0], list[NoFootprint]()
    try:
        with PgstacDB(dsn=dsn) as db:
            loader = Loader(db)
            for cid, path in files.items():
                # the collection first: pgstac partitions its items by it
                loader.load_collections(iter([_unlinked(_read(path))]),
                                        insert_mode=Methods.upsert)  # fmt: skip
                items = _items(_docs(Path(stacdir), path, cid), cid, counter, unlocated)
                loader.load_items(items, insert_mode=Methods.upsert, chunksize=batch)
            # pgstac keeps each search's count for a day (context_stats_ttl): mark them stale,
            # or numberMatched would not count what was just loaded
            conn = db.connect()
            conn.execute("UPDATE pgstac.search_wheres SET statslastupdated = NULL")
            conn.commit()
    except psycopg.OperationalError as exc:
        raise _unreachable(dsn, exc) from exc
    return PgstacLoad(tuple(files), counter[0], tuple(unlocated))
