"""The gateway's ``/stac/`` routes: a static STAC catalog and a STAC API item search.

Answered by a framework-free :class:`h5sidecar.catalog.StacApi` passed in by the caller; this
module only maps HTTP to it.  Every call into it runs in a worker thread: a search reads the
catalog's database, and the event loop must keep answering chunk requests meanwhile.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from h5sidecar.errors import NotIndexedError
from h5sidecar.gateway._http_rules import BadRequestError

__all__ = ["MAX_SEARCH_BODY", "StacHandlers"]

#: Largest STAC search body read (bytes).
MAX_SEARCH_BODY = 64 * 1024
_JSON = "application/json"
_GEOJSON = "application/geo+json"


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

    async def _answer(self, media_type: str, call: str, *args: Any, **kwargs: Any) -> Response:
        """The API's answer, computed and serialised in a worker thread (a large page's JSON
        would hold the loop too)."""

        def answer() -> Response:
            return JSONResponse(getattr(self.api, call)(*args, **kwargs), media_type=media_type)

        return await run_in_threadpool(answer)

    async def landing(self, request: Request) -> Response:
        base = self._base(request)  # first: it refuses when no catalog is served
        return await self._answer(_JSON, "landing", base)

    async def conformance(self, request: Request) -> Response:
        self._base(request)
        return await self._answer(_JSON, "conformance")

    async def collections(self, request: Request) -> Response:
        base = self._base(request)
        return await self._answer(_JSON, "list_collections", base)

    async def collection(self, request: Request) -> Response:
        base, cid = self._base(request), request.path_params["cid"]
        return await self._answer(_JSON, "collection", cid, base)

    async def items(self, request: Request) -> Response:
        base, cid = self._base(request), request.path_params["cid"]
        return await self._answer(_GEOJSON, "search", dict(request.query_params), base,
                                  collection=cid)  # fmt: skip

    async def item(self, request: Request) -> Response:
        base, p = self._base(request), request.path_params
        return await self._answer(_GEOJSON, "item", p["cid"], p["iid"], base)

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
        return await self._answer(_GEOJSON, "search", params, base, method=request.method)

    async def file(self, request: Request) -> Response:
        self._base(request)
        data = await run_in_threadpool(self.api.static_file,  # type: ignore[union-attr]
                                       request.path_params["path"])  # fmt: skip
        return Response(data, media_type="application/json")
