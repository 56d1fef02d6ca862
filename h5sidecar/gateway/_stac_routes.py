"""The gateway's ``/stac/`` routes: a static STAC catalog and a STAC API item search.

Answered by a framework-free :class:`h5sidecar.catalog.StacApi` passed in by the caller; this
module only maps HTTP to it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from h5sidecar.errors import NotIndexedError
from h5sidecar.gateway._http import BadRequestError

__all__ = ["MAX_SEARCH_BODY", "StacHandlers"]

#: Largest STAC search body read (bytes).
MAX_SEARCH_BODY = 64 * 1024


class StacHandlers:
    """``/stac/``: the static catalog of ``h5sidecar catalog`` and a STAC API item search,
    answered by a framework-free :class:`h5sidecar.catalog.StacApi` (passed in by the caller:
    the gateway does not import the catalog package)."""

    def __init__(self, api: Any | None) -> None:
        self.api = api

    def _base(self, request: Request) -> str:
        if self.api is None:
            raise NotIndexedError("this gateway serves no STAC catalog: write one with "
                                  "`h5sidecar catalog DEST -o STACDIR` and start it with "
                                  "--stac STACDIR")  # fmt: skip
        return f"{str(request.base_url).rstrip('/')}/stac"

    async def landing(self, request: Request) -> Response:
        base = self._base(request)  # first: it refuses when no catalog is served
        return JSONResponse(self.api.landing(base))  # type: ignore[union-attr]

    async def conformance(self, request: Request) -> Response:
        self._base(request)
        return JSONResponse(self.api.conformance())  # type: ignore[union-attr]

    async def collections(self, request: Request) -> Response:
        base = self._base(request)
        return JSONResponse(self.api.list_collections(base))  # type: ignore[union-attr]

    async def collection(self, request: Request) -> Response:
        base, cid = self._base(request), request.path_params["cid"]
        return JSONResponse(self.api.collection(cid, base))  # type: ignore[union-attr]

    async def items(self, request: Request) -> Response:
        base, cid = self._base(request), request.path_params["cid"]
        page = self.api.search(dict(request.query_params), base, collection=cid)  # type: ignore[union-attr]
        return JSONResponse(page, media_type="application/geo+json")

    async def item(self, request: Request) -> Response:
        base, p = self._base(request), request.path_params
        return JSONResponse(self.api.item(p["cid"], p["iid"], base),  # type: ignore[union-attr]
                            media_type="application/geo+json")  # fmt: skip

    async def search(self, request: Request) -> Response:
        base = self._base(request)
        if request.method == "POST":
            body = await request.body()
            if len(body) > MAX_SEARCH_BODY:
                raise BadRequestError(f"search body over {MAX_SEARCH_BODY} bytes")
            try:
                params = json.loads(body or b"{}")
            except ValueError as exc:
                raise BadRequestError(f"search body is not JSON: {exc}") from exc
            if not isinstance(params, dict):
                raise BadRequestError("search body must be a JSON object")
        else:
            params = dict(request.query_params)
        page = self.api.search(params, base, method=request.method)  # type: ignore[union-attr]
        return JSONResponse(page, media_type="application/geo+json")

    async def file(self, request: Request) -> Response:
        self._base(request)
        data = self.api.static_file(request.path_params["path"])  # type: ignore[union-attr]
        return Response(data, media_type="application/json")
