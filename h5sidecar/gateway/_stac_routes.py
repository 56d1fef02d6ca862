"""The gateway's ``/stac/`` routes: a static STAC catalog and a STAC API item search.

Answered by a framework-free :class:`h5sidecar.catalog.StacApi` passed in by the caller; this
module only maps HTTP to it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
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

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The backend's answer; in a worker thread for one that waits on a database (pgstac),
        so that the event loop keeps serving."""
        fn = getattr(self.api, name)
        if getattr(self.api, "blocking", False):
            return await run_in_threadpool(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    def _base(self, request: Request) -> str:
        if self.api is None:
            raise NotIndexedError("this gateway serves no STAC catalog: write one with "
                                  "`h5sidecar catalog DEST -o STACDIR` and start it with "
                                  "--stac STACDIR")  # fmt: skip
        return f"{str(request.base_url).rstrip('/')}/stac"

    async def landing(self, request: Request) -> Response:
        base = self._base(request)  # first: it refuses when no catalog is served
        return JSONResponse(await self._call("landing", base))

    async def conformance(self, request: Request) -> Response:
        self._base(request)
        return JSONResponse(await self._call("conformance"))

    async def collections(self, request: Request) -> Response:
        base = self._base(request)
        return JSONResponse(await self._call("list_collections", base))

    async def collection(self, request: Request) -> Response:
        base, cid = self._base(request), request.path_params["cid"]
        return JSONResponse(await self._call("collection", cid, base))

    async def items(self, request: Request) -> Response:
        base, cid = self._base(request), request.path_params["cid"]
        page = await self._call("search", dict(request.query_params), base, collection=cid)
        return JSONResponse(page, media_type="application/geo+json")

    async def item(self, request: Request) -> Response:
        base, p = self._base(request), request.path_params
        return JSONResponse(await self._call("item", p["cid"], p["iid"], base),
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
        page = await self._call("search", params, base, method=request.method)
        return JSONResponse(page, media_type="application/geo+json")

    async def file(self, request: Request) -> Response:
        self._base(request)
        data = await self._call("static_file", request.path_params["path"])
        return Response(data, media_type="application/json")
