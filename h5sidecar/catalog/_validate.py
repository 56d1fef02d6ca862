"""Offline validation of STAC documents against the JSON schemas shipped in ``schemas/``.

Every ``$ref`` resolves inside the shipped set; a reference to any other URL fails with a message
naming it, and nothing is ever fetched from the network.  Extensions are validated against their
schema when it is shipped (the File and xarray Assets extensions are), and refused otherwise.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

# defined in the error tree (an H5SidecarError and a ValueError); re-exported here
from h5sidecar.errors import STACValidationError

__all__ = [
    "STACValidationError", "ShapeValidator", "document_shape", "shipped_schemas",
    "validate_document", "validate_tree",
]

_STAC = "https://schemas.stacspec.org/v1.1.0"
#: Canonical URL -> file under ``schemas/`` (URLs, not ``$id``: one upstream ``$id`` is mistyped).
_SCHEMA_FILES = {
    f"{_STAC}/item-spec/json-schema/item.json": "stac-spec/v1.1.0/item.json",
    f"{_STAC}/catalog-spec/json-schema/catalog.json": "stac-spec/v1.1.0/catalog.json",
    f"{_STAC}/collection-spec/json-schema/collection.json": "stac-spec/v1.1.0/collection.json",
    **{
        f"{_STAC}/item-spec/json-schema/{n}.json": f"stac-spec/v1.1.0/{n}.json"
        for n in ("bands", "basics", "common", "data-values", "datetime", "instrument",
                  "licensing", "provider")
    },
    "https://geojson.org/schema/Feature.json": "geojson/Feature.json",
    "https://geojson.org/schema/Geometry.json": "geojson/Geometry.json",
    "https://stac-extensions.github.io/file/v2.1.0/schema.json": "file/v2.1.0/schema.json",
    "https://stac-extensions.github.io/xarray-assets/v1.0.0/schema.json":
        "xarray-assets/v1.0.0/schema.json",
}
_CORE = {
    "Feature": f"{_STAC}/item-spec/json-schema/item.json",
    "Catalog": f"{_STAC}/catalog-spec/json-schema/catalog.json",
    "Collection": f"{_STAC}/collection-spec/json-schema/collection.json",
}


@functools.cache
def shipped_schemas() -> dict[str, dict[str, Any]]:
    """Canonical schema URL -> schema document, read from the package data."""
    root = resources.files("h5sidecar.catalog") / "schemas"
    return {url: json.loads((root / rel).read_text("utf-8")) for url, rel in _SCHEMA_FILES.items()}


@functools.cache
def _registry() -> Any:
    from referencing import Registry, Resource
    from referencing.exceptions import NoSuchResource

    def refuse(uri: str) -> Resource[Any]:
        # never fetch: a schema outside the shipped set is a packaging bug or an unknown extension
        raise NoSuchResource(uri)

    pairs = [(url, Resource.from_contents(doc)) for url, doc in shipped_schemas().items()]
    return Registry(retrieve=refuse).with_resources(pairs)  # type: ignore[call-arg]


def _schema_urls(doc: Mapping[str, Any]) -> list[str]:
    kind = doc.get("type")
    if kind not in _CORE:
        raise STACValidationError(
            f"not a STAC Item, Catalog or Collection (type {kind!r})", [])
    urls = [_CORE[str(kind)]]
    for ext in doc.get("stac_extensions", []) or []:
        if ext not in _SCHEMA_FILES:
            raise STACValidationError(
                f"extension schema {ext} is not shipped with h5sidecar, so it cannot be "
                "validated offline: remove the extension or add its schema to "
                "h5sidecar/catalog/schemas", [])
        urls.append(ext)
    return urls


def validate_document(doc: Mapping[str, Any], *, where: str = "") -> None:
    """Validate one STAC document (core schema + declared extensions), offline.

    Raises
    ------
    STACValidationError
        With the best-matching violation in the message and all of them in ``errors``.
    """
    import jsonschema
    from referencing.exceptions import Unresolvable

    schemas = shipped_schemas()
    for url in _schema_urls(doc):
        cls = jsonschema.validators.validator_for(schemas[url])
        validator = cls(schemas[url], registry=_registry())
        try:
            errors = list(validator.iter_errors(dict(doc)))
        except Unresolvable as exc:
            raise STACValidationError(
                f"schema {url} refers to {exc}, which is not shipped: add it to "
                "h5sidecar/catalog/schemas", []) from exc
        if errors:
            best = jsonschema.exceptions.best_match(errors)
            label = where or str(doc.get("id", "?"))
            raise STACValidationError(
                f"{label} does not validate against {url}: {best.message} "
                f"(at {'/'.join(str(p) for p in best.absolute_path) or 'the top level'})",
                errors)


def _walk(path: Path, seen: set[Path]) -> Iterator[Path]:
    path = path.resolve()
    if path in seen:
        return
    seen.add(path)
    yield path
    doc = json.loads(path.read_text("utf-8"))
    for link in doc.get("links", []):
        href = link.get("href", "")
        if link.get("rel") in ("child", "item") and "://" not in href:
            yield from _walk(path.parent / href, seen)


def validate_tree(root: str | Path) -> int:
    """Validate a catalog file and every child and item it links to (relative links).

    Returns
    -------
    int
        Number of documents validated.
    """
    n = 0
    for path in _walk(Path(root), set()):
        validate_document(json.loads(path.read_text("utf-8")), where=str(path))
        n += 1
    return n


def _shape(value: Any, path: str, out: set[str]) -> None:
    if isinstance(value, Mapping):
        for key, v in value.items():
            _shape(v, f"{path}/{key}", out)
        out.add(f"{path}:object")
    elif isinstance(value, list):
        for v in value:
            _shape(v, f"{path}[]", out)
        out.add(f"{path}:array")
    else:
        out.add(f"{path}:{type(value).__name__}")


def document_shape(doc: Mapping[str, Any]) -> frozenset[str]:
    """The structure of a document: every key path with the JSON types found there (list
    elements merged), values left out.  Two items of one shape differ only by values."""
    out: set[str] = set()
    _shape(doc, "", out)
    return frozenset(out)


class ShapeValidator:
    """Validates the first document of each shape (:func:`document_shape`) and skips the others.

    What the schemas check beyond structure (value ranges, formats, patterns) is therefore
    checked on one document per shape; items of one catalog run are built by one function, so
    their values vary only within what that function writes.
    """

    def __init__(self) -> None:
        self._seen: set[frozenset[str]] = set()
        self.validated = 0

    def validate(self, doc: Mapping[str, Any], *, where: str = "") -> bool:
        """Validate ``doc`` when its shape is new; returns whether it was validated."""
        shape = document_shape(doc)
        if shape in self._seen:
            return False
        validate_document(doc, where=where)
        self._seen.add(shape)
        self.validated += 1
        return True
