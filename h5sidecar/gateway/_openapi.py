"""The OpenAPI 3.1 description of the gateway, served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]

_ERROR = {"$ref": "#/components/responses/Error"}
_KEY_ERRORS = {
    code: _ERROR for code in ("400", "401", "403", "404", "409", "413", "414", "416", "422",
                              "502", "503")
}
_ERROR_CONTENT = {"application/json": {"schema": {
    "type": "object",
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
    "required": ["error", "message"],
}}}
_HTML = {"text/html": {"schema": {"type": "string"}}}
_BYTES = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
          "application/json": {"schema": {"type": "object"}}}  # fmt: skip


def _param(name: str, where: str, description: str, *, required: bool = True,
           schema: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"name": name, "in": where, "required": required, "description": description,
            "schema": schema or {"type": "string"}}  # fmt: skip


_HEALTH = {"type": "object", "properties": {
    "status": {"type": "string", "enum": ["ok", "warming", "degraded"]},
    "reason": {"type": "string", "description": "Why it cannot serve (degraded only)."},
    "retry_after": {"type": "integer", "description": "Seconds before loading DEST's record "
                    "is tried again (degraded by a failed load only)."},
    "message": {"type": "string", "description": "What it loads (warming only)."},
    "since": {"type": "string", "format": "date-time",
              "description": "When loading DEST's record began (warming only)."},
    "seconds": {"type": "number", "description": "Seconds since then (warming only)."},
    "parts": {"type": ["integer", "null"], "description": "Parts of the record to load "
              "(warming over an empty record cache only; null until listed)."},
    "parts_done": {"type": "integer", "description": "Parts loaded so far (idem)."},
    "rows": {"type": "integer", "description": "Granules' rows loaded so far (idem)."},
    "last_error": {"type": "string", "description": "Why the previous load failed "
                   "(warming again after a failure only)."},
    "version": {"type": "string"}}, "required": ["status", "version"]}  # fmt: skip
_GRANULE = _param("granule", "path", "Granule name under DEST, or cube name (as listed by "
                  "/api/granules).")
_KEY = _param("key", "path", "Zarr key relative to the granule ('.zmetadata', "
              "'gt1l/heights/h_ph/.zarray', 'gt1l/heights/h_ph/0'); may contain '/'.")  # fmt: skip
_HEADERS = [
    _param("Range", "header", "A single byte range (bytes=a-b, bytes=a-, bytes=-n).",
           required=False),
    _param("If-None-Match", "header", "ETag from an earlier response (answers 304).",
           required=False),
]  # fmt: skip


def _key_route(summary: str, extra: list[dict[str, Any]]) -> dict[str, Any]:
    op = {
        "summary": summary,
        "parameters": [*extra, _GRANULE, _KEY, *_HEADERS],
        "responses": {
            "200": {"description": "The whole value.", "content": _BYTES},
            "206": {"description": "The requested byte range.", "content": _BYTES},
            "304": {"description": "Not modified (ETag matches)."},
            **_KEY_ERRORS,
        },
    }
    return {"get": op, "head": {**op, "summary": summary + " (headers only)"}}


def openapi_document(version: str) -> dict[str, Any]:
    """The OpenAPI document of this gateway version."""
    k = _param("k", "path", "Chunks per shard along the first dimension (1..1024).",
               schema={"type": "integer", "minimum": 1, "maximum": 1024})  # fmt: skip
    shard = _param("shard", "query", "Serve K chunks per shard (same as /zarr3-shard/K/...).",
                   required=False, schema={"type": "integer", "minimum": 1, "maximum": 1024})
    spec = _param("spec", "path", "Virtual chunks of uncompressed arrays: 'auto', a target size "
                  "('65536', '64k', '1m') or a chunk shape ('1x0'; 0 keeps an axis whole).",
                  schema={"type": "string",
                          "pattern": "^(auto|[0-9]{1,10}[km]?|[0-9]{1,10}(x[0-9]{1,10}){0,31})$"})
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "h5sidecar gateway",
            "version": version,
            "description": "Read-only Zarr v2/v3 views of HDF5 granules indexed by h5sidecar. "
            "Chunk keys answer with the original compressed chunk bytes.",
        },
        "paths": {
            "/": {"get": {
                "summary": "Landing page: granules, variables, snippets, quick look.",
                "parameters": [
                    _param("granule", "query", "Granule to show.", required=False),
                    _param("variable", "query", "Variable to plot.", required=False),
                    _param("q", "query", "Search: list the granules whose name holds this "
                           "(100 a page).", required=False),
                    _param("cursor", "query", "Next page of the search (from its link).",
                           required=False),
                ],
                "responses": {"200": {"description": "HTML page.", "content": _HTML},
                              "401": _ERROR,
                              "503": {"description": "Not ready yet (DEST's record loading, or "
                                      "its load failed): a page that reloads itself after "
                                      "Retry-After when the client accepts text/html, else "
                                      "the JSON error.",
                                      "content": {**_ERROR_CONTENT, **_HTML}}},
            }},
            "/healthz": {"get": {
                "summary": "Liveness (no token needed): 200 while the gateway runs, 'warming' "
                           "included (it loads DEST's record as it starts; its other routes "
                           "answer 503 with Retry-After meanwhile); 503 'degraded' while DEST "
                           "or its record cannot be read (gone, corrupt), with the reason.",
                "responses": {
                    "200": {"description": "Serving ('ok'), or loading DEST's record "
                                           "('warming').",
                            "content": {"application/json": {"schema": _HEALTH}}},
                    "503": {"description": "Degraded: cannot serve now.",
                            "content": {"application/json": {"schema": _HEALTH}}},
                }}},
            "/readyz": {"get": {
                "summary": "Readiness (no token needed): 200 only when the gateway serves "
                           "('ok'); 503 with Retry-After while it loads DEST's record "
                           "('warming') or cannot read it ('degraded'). Same body as /healthz.",
                "responses": {
                    "200": {"description": "Serving ('ok').",
                            "content": {"application/json": {"schema": _HEALTH}}},
                    "503": {"description": "Not serving: 'warming' or 'degraded'.",
                            "content": {"application/json": {"schema": _HEALTH}}},
                }}},
            "/metrics": {"get": {"summary": "Prometheus metrics.",
                                 "responses": {"200": {"description": "Text exposition."},
                                               "401": _ERROR}}},
            "/openapi.json": {"get": {"summary": "This document.",
                                      "responses": {"200": {"description": "OpenAPI 3.1."},
                                                    "401": _ERROR}}},
            "/api/granules": {"get": {
                "summary": "Names of the granules served, a page at a time in code-point order "
                           "of their names, and of the cubes served (all, on every page).",
                "description": "Follow `next` (also sent as `Link: <...>; rel=\"next\"`) until "
                               "it is null: every granule is listed exactly once, granules "
                               "indexed meanwhile after the cursor included.",
                "parameters": [
                    _param("limit", "query", "Names per page, 1 to 10000 (default 1000).",
                           required=False,
                           schema={"type": "integer", "minimum": 1, "maximum": 10000}),
                    _param("cursor", "query", "Opaque: the `cursor` of the previous page's "
                           "`next` link.", required=False),
                    _param("prefix", "query", "Only names starting with this (indexed).",
                           required=False),
                    _param("q", "query", "Only names holding this (a scan: slower on large "
                           "DESTs).", required=False),
                ],
                "responses": {"200": {"description": "A page.", "content": {"application/json": {
                    "schema": {"type": "object", "properties": {
                        "granules": {"type": "array", "items": {"type": "string"}},
                        "cubes": {"type": "array", "items": {"type": "string"}},
                        "count": {"type": "integer", "description": "Granules served."},
                        "next": {"type": ["string", "null"],
                                 "description": "URL of the next page; null on the last."},
                    }, "required": ["granules", "cubes", "count", "next"]}}}},
                    "400": _ERROR, "401": _ERROR, "503": _ERROR}}},
            "/api/granules/{granule}": {"get": {
                "summary": "Groups, variables (with dimension names), skipped variables and "
                           "dimensions without a variable of one granule or cube (kind, "
                           "members).",
                "parameters": [_GRANULE],
                "responses": {"200": {"description": "JSON summary."}, **_KEY_ERRORS},
            }},
            "/quicklook.png": {"get": {
                "summary": "PNG quick look of a window at the start of a variable, in "
                           "physical values (CF fill, packing and valid range applied); the "
                           "range shown is also in the PNG's Description text.",
                "parameters": [_param("granule", "query", "Granule name."),
                               _param("variable", "query", "Variable path.")],
                "responses": {"200": {"description": "PNG image.",
                                      "content": {"image/png": {}}}, **_KEY_ERRORS},
            }},
            "/zarr/{granule}/{key}": _key_route("Zarr v2 key.", []),
            "/zarr3/{granule}/{key}": _key_route("Zarr v3 key.", [shard]),
            "/zarr3-shard/{k}/{granule}/{key}": _key_route("Zarr v3 key, K chunks per shard.",
                                                           [k]),
            "/zarr-rechunk/{spec}/{granule}/{key}": _key_route(
                "Zarr v2 key, uncompressed arrays re-chunked.", [spec]),
            "/zarr3-rechunk/{spec}/{granule}/{key}": _key_route(
                "Zarr v3 key, uncompressed arrays re-chunked.", [spec]),
        },
        "components": {
            "responses": {"Error": {
                "description": "An error: what happened and what to do.",
                "content": _ERROR_CONTENT,
            }},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }  # fmt: skip
