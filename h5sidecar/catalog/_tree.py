"""The static JSON tree of a catalog, written piecewise (no document holds every item).

What ``pystac``'s self-contained save writes, without loading the tree: items at
``<collection>/<id>/<id>.json`` with relative ``root``/``collection``/``parent`` links, the
collection's document with one ``item`` link per item (when the tree holds its items), and the
root ``catalog.json`` whose other children are kept.  A document is rewritten only when its text
changes, so a run that changed nothing writes nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["item_path", "remove_item", "write_collection", "write_item", "write_root"]

JSON = "application/json"
GEOJSON = "application/geo+json"
#: Key order of pystac's item documents.
_ITEM_KEYS = ("type", "stac_version", "stac_extensions", "id", "geometry", "bbox", "properties",
              "links", "assets", "collection")  # fmt: skip


def _dump(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2)


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` unless the file already holds it (atomically: temp file + rename)."""
    try:
        if path.read_text("utf-8") == text:
            return False
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, "utf-8")
    tmp.replace(path)
    return True


def item_path(root_dir: Path, cid: str, item_id: str) -> Path:
    """Where an item's document lies in the tree."""
    return root_dir / cid / item_id / f"{item_id}.json"


def item_document(doc: Mapping[str, Any], cid: str, root_title: str,
                  collection_title: str) -> dict[str, Any]:  # fmt: skip
    """The item as written in the tree: its links and collection added, in pystac's order."""
    coll_link = {"rel": "collection", "href": "../collection.json", "type": JSON,
                 "title": collection_title}  # fmt: skip
    full = dict(doc)
    full["links"] = [
        {"rel": "root", "href": "../../catalog.json", "type": JSON, "title": root_title},
        coll_link,
        {**coll_link, "rel": "parent"},
    ]
    full["collection"] = cid
    ordered = {k: full[k] for k in _ITEM_KEYS if k in full}
    ordered.update((k, v) for k, v in full.items() if k not in ordered)
    return ordered


def write_item(root_dir: Path, cid: str, doc: Mapping[str, Any], root_title: str,
               collection_title: str) -> Path:  # fmt: skip
    """Write one item's document (when it changed); returns its path."""
    path = item_path(root_dir, cid, str(doc["id"]))
    write_if_changed(path, _dump(item_document(doc, cid, root_title, collection_title)))
    return path


def remove_item(root_dir: Path, cid: str, item_id: str) -> None:
    """Remove an item's document and its folder."""
    folder = item_path(root_dir, cid, item_id).parent
    if folder.is_dir() and folder.resolve().is_relative_to(root_dir.resolve()):
        shutil.rmtree(folder)


def write_collection(root_dir: Path, doc: Mapping[str, Any], item_ids: Iterable[str],
                     root_title: str, extra_links: Iterable[Mapping[str, Any]] = ()) -> Path:
    """Write the collection's document with ``root``, one ``item`` link per id, the extra
    links and ``parent``; returns its path."""
    links: list[Mapping[str, Any]] = [
        {"rel": "root", "href": "../catalog.json", "type": JSON, "title": root_title}]
    links += [{"rel": "item", "href": f"./{i}/{i}.json", "type": GEOJSON} for i in item_ids]
    links += list(extra_links)
    links.append({"rel": "parent", "href": "../catalog.json", "type": JSON, "title": root_title})
    full = {k: v for k, v in doc.items() if k != "links"}
    ordered: dict[str, Any] = {}
    for k, v in full.items():
        ordered[k] = v
        if k == "description":  # pystac writes links right after the description
            ordered["links"] = links
    ordered.setdefault("links", links)
    path = root_dir / str(doc["id"]) / "collection.json"
    write_if_changed(path, _dump(ordered))
    return path


def write_root(root_dir: Path, cid: str, collection_title: str, default: Mapping[str, Any]) -> Path:
    """Write (or update) ``catalog.json``: this collection's child link added or replaced, the
    other children kept in their order.  ``default`` is the root when none exists yet."""
    path = root_dir / "catalog.json"
    try:
        root = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        root = dict(default)
    title = root.get("title", default.get("title", ""))
    href = f"./{cid}/collection.json"
    child = {"rel": "child", "href": href, "type": JSON, "title": collection_title}
    links = [lk for lk in root.get("links", []) if lk.get("rel") not in ("root", "self")]
    hrefs = [lk.get("href") for lk in links]
    if href in hrefs:
        links[hrefs.index(href)] = child
    else:
        links.append(child)
    root["links"] = [{"rel": "root", "href": "./catalog.json", "type": JSON, "title": title},
                     *links]  # fmt: skip
    write_if_changed(path, _dump(root))
    return path
