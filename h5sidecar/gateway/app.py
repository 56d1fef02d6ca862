"""The HTTP gateway as an ASGI app (Starlette) and its server (uvicorn): ``h5sidecar serve``.

This module, its route handlers (:mod:`h5sidecar.gateway._stac_routes`) and its middleware
(:mod:`h5sidecar.gateway._middleware`) are the only ones that import the web framework.
Everything it serves comes from :class:`~h5sidecar.gateway.core.Gateway`; this module maps
requests to it and answers with HTTP: status codes from one table
(:data:`~h5sidecar.gateway._http_rules.STATUS`), ``Range`` (206 / 416), ``HEAD``, ``ETag`` /
``If-None-Match`` (304), ``Cache-Control``, gzip for metadata only, CORS, an optional bearer
token, and 405 for every method but GET/HEAD/OPTIONS.

Build the app with :func:`create_app` (no module-level app or settings exist); run it with
:func:`serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from h5sidecar._version import __version__
from h5sidecar.errors import ErrorKind, H5SidecarError, NotIndexedError, require_extra
from h5sidecar.gateway._http_rules import (
    Admission,
    BadRequestError,
    SaturatedError,
    WarmingError,
    accepts_html,
    decode_cursor,
    encode_cursor,
)
from h5sidecar.gateway._landing import describe, render_page, render_waiting
from h5sidecar.gateway._middleware import METHODS, Guard, Metrics, as_response, error_response
from h5sidecar.gateway._openapi import openapi_document
from h5sidecar.gateway._quicklook import preview, render_png
from h5sidecar.gateway._reply import key_reply
from h5sidecar.gateway._stac_routes import StacHandlers
from h5sidecar.gateway._warming import RETRY_AFTER
from h5sidecar.gateway.core import Gateway, View
from h5sidecar.read import RechunkSpec
from h5sidecar.settings import GatewaySettings, ReadSettings, RecordSettings

__all__ = ["create_app", "serve"]

log = logging.getLogger("h5sidecar.gateway")

STATIC = Path(__file__).with_name("static")
#: Names per page of ``/api/granules`` (default, most) and of the landing page's search.
PAGE_LIMIT, MAX_PAGE_LIMIT, LANDING_LIMIT = 1000, 10_000, 100
#: The landing page's Content-Security-Policy: no inline script or style.
CSP = ("default-src 'self'; img-src 'self' data:; connect-src 'self' http: https:; "
       "style-src 'self'; script-src 'self'; frame-ancestors 'none'")  # fmt: skip


# -- handlers --------------------------------------------------------------------------------------
class _Handlers:
    def __init__(self, gateway: Gateway, settings: GatewaySettings) -> None:
        self.gw = gateway
        self.settings = settings
        self.private = settings.token is not None
        # quick looks decode data and draw with matplotlib: a few at a time
        self.plots = Admission(2, 8, wait_timeout=20.0)

    def _cache_control(self, seconds: int) -> str:
        return f"{'private' if self.private else 'public'}, max-age={seconds}"

    async def zarr_v2(self, request: Request) -> Response:
        return await self._key(request, View(2), request.path_params["path"])

    async def zarr_v3(self, request: Request) -> Response:
        raw = request.query_params.get("shard")
        if raw is not None and not (raw.isascii() and raw.isdigit()):
            raise BadRequestError(f"shard must be a positive integer, got {raw!r}")
        return await self._key(request, View(3, int(raw or 0)), request.path_params["path"])

    async def zarr_v3_shard(self, request: Request) -> Response:
        raw = request.path_params["k"]
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
            raise BadRequestError(f"chunks per shard must be a positive integer, got {raw!r}")
        return await self._key(request, View(3, int(raw)), request.path_params["path"])

    async def zarr_rechunk(self, request: Request) -> Response:
        # /zarr-rechunk/{spec}/... (v2) and /zarr3-rechunk/{spec}/... (v3)
        v3 = request.url.path.startswith("/zarr3-")
        try:
            spec = RechunkSpec.parse(request.path_params["spec"], self.settings.rechunk_bytes)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
        view = View(3 if v3 else 2, rechunk=spec)
        return await self._key(request, view, request.path_params["path"])

    async def _key(self, request: Request, view: View, path: str) -> Response:
        res = await self.gw.resolve(path, view)
        h = request.headers
        reply = await key_reply(self.gw, res, head=request.method == "HEAD",
                                range_header=h.get("range"), if_none_match=h.get("if-none-match"),
                                accept_encoding=h.get("accept-encoding", ""),
                                private=self.private)  # fmt: skip
        return as_response(reply)

    async def _page(self, request: Request, default: int) -> tuple[list[str], str | None]:
        """A page of granule names for the query's ``cursor``, ``limit``, ``prefix`` and ``q``
        (substring), and the URL of the next page (None after the last)."""
        params = request.query_params
        raw = params.get("limit") or str(default)
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_PAGE_LIMIT:
            raise BadRequestError(f"limit must be an integer in [1, {MAX_PAGE_LIMIT}], got {raw!r}")
        limit = int(raw)
        after = decode_cursor(params["cursor"]) if params.get("cursor") else ""
        names = await self.gw.page(after, limit, prefix=params.get("prefix", ""),
                                   contains=params.get("q", ""))  # fmt: skip
        if len(names) < limit:
            return names, None
        return names, str(request.url.include_query_params(cursor=encode_cursor(names[-1])))

    async def landing(self, request: Request) -> Response:
        try:
            return await self._landing(request)
        except WarmingError as exc:  # DEST's record is loading, or its load failed
            if not accepts_html(request.headers.get("accept", "")):
                raise
            # a browser gets a page that says so and reloads itself, not a JSON error
            return HTMLResponse(render_waiting(str(exc), exc.retry_after), 503,
                                headers={"Retry-After": str(exc.retry_after),
                                         "Content-Security-Policy": CSP,
                                         "Cache-Control": "no-store"})  # fmt: skip

    async def _landing(self, request: Request) -> Response:
        (granules, more), cubes = await self._page(request, LANDING_LIMIT), await self.gw.cubes()
        first = cubes[0] if cubes else (granules[0] if granules else None)
        name = request.query_params.get("granule") or first
        variable = request.query_params.get("variable")
        summary, error = None, ""
        if name is not None:
            try:
                entry = await self.gw.entry(await self.gw.known(name))
                # a lazily opened sidecar loads every manifest here: off the event loop
                summary = await asyncio.to_thread(describe, entry.refs)
            except H5SidecarError as exc:
                error, name = f"{name}: {exc}", None
        snap = await self.gw.snapshot()
        page = render_page(base=str(request.base_url).rstrip("/"), granules=granules,
                           granule=name, summary=summary, variable=variable,
                           token=self.private, error=error, cubes=cubes,
                           count=self.gw.count(snap),
                           query=request.query_params.get("q", ""),
                           more=more and "/?" + more.partition("?")[2])  # fmt: skip
        return HTMLResponse(page, headers={"Content-Security-Policy": CSP,
                                           "Cache-Control": "no-cache"})  # fmt: skip

    async def granules(self, request: Request) -> Response:
        names, more = await self._page(request, PAGE_LIMIT)
        snap = await self.gw.snapshot()
        body = {"granules": names, "cubes": list(snap.cubes), "count": self.gw.count(snap),
                "next": more}
        return JSONResponse(body, headers={"Link": f'<{more}>; rel="next"'} if more else None)

    async def granule(self, request: Request) -> Response:
        name = await self.gw.known(request.path_params["granule"])
        entry = await self.gw.entry(name)
        return JSONResponse({"granule": name, **await asyncio.to_thread(describe, entry.refs)})

    async def quicklook(self, request: Request) -> Response:
        name = request.query_params.get("granule") or ""
        var = request.query_params.get("variable") or ""
        entry = await self.gw.entry(await self.gw.known(name))
        arr = entry.refs.arrays.get(var)
        if arr is None:
            raise NotIndexedError(f"granule {name!r} has no variable {var!r} (see /api/granules)")
        self.gw.check_sources(arr.urls)  # the plot reads through the store's fetcher
        async with self.plots.slot(), self.gw.upstream(name):
            values = await preview(entry.store(2), entry.refs, var)
        title = f"{var} (first {values.size:,} values) of {name}"
        png = await asyncio.to_thread(render_png, values, title, str(arr.meta.attrs.get("units", "")))
        return Response(png, media_type="image/png",
                        headers={"Cache-Control": self._cache_control(300)})  # fmt: skip

    async def healthz(self, request: Request) -> Response:
        # liveness: "warming" is 200 (a liveness probe must not restart the gateway while it
        # loads DEST's record: the load would start over); "degraded" is 503
        return await self._health(ready=False)

    async def readyz(self, request: Request) -> Response:
        # readiness: load balancers and readiness probes read only the status, so "warming"
        # is 503 here (its requests would get 503 + Retry-After)
        return await self._health(ready=True)

    async def _health(self, *, ready: bool) -> Response:
        body = await self.gw.health()
        up = body["status"] == "ok" or (body["status"] == "warming" and not ready)
        headers = {"Cache-Control": "no-store"}
        if not up:
            headers["Retry-After"] = str(body.get("retry_after", RETRY_AFTER))
        return JSONResponse({**body, "version": __version__}, 200 if up else 503, headers=headers)

    async def metrics(self, request: Request) -> Response:
        self.gw.cache_stats()  # refresh the cache gauges
        return PlainTextResponse(self.gw.metrics.render(),
                                 media_type="text/plain; version=0.0.4")  # fmt: skip

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(__version__))


# -- app ----------------------------------------------------------------------------------------
def create_app(
    settings: GatewaySettings,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    read_settings: ReadSettings | None = None,
    refresh_seconds: float = 30.0,
    stac_api: Any | None = None,
    cubes: Mapping[str, str] | Sequence[str] | None = None,
    record_settings: RecordSettings | None = None,
) -> Starlette:
    """Build the gateway's ASGI app for the sidecars under ``dest``.

    Parameters
    ----------
    settings : GatewaySettings
        Token, CORS origins, extra allowed source prefixes, caches and limits.
    dest : str
        Local folder or ``s3://`` prefix written by ``h5sidecar index SOURCE -o DEST``.
    storage_options : mapping, optional
        fsspec/s3fs options for DEST and the sources (e.g. ``endpoint_url``).
    read_settings : ReadSettings, optional
        Fetch settings (see "Read path: tuning" in the README).
    refresh_seconds : float
        How often DEST is re-listed for new granules.
    stac_api : h5sidecar.catalog.StacApi, optional
        The catalog written by ``h5sidecar catalog`` (``StacApi(STACDIR)``, or
        ``PgStacApi(DSN)`` for one loaded into pgstac): served under ``/stac/`` with a STAC API
        item search at ``/stac/search`` (GET and POST).
    cubes : mapping or sequence, optional
        Datacubes written by ``h5sidecar cube``, served beside the granules in every view
        (``/zarr/NAME/``, ...): name -> URL of the cube, or ``"[NAME=]PATH"`` strings (named
        after the file without ``.parq``/``.json`` by default).  Their member granules must
        be allowed sources (they are when the cube was built from DEST's granules).
    record_settings : RecordSettings, optional
        The record cache of an object-store DEST (default: ``from_env(RecordSettings)``).

    Returns
    -------
    starlette.applications.Starlette
        The app; ``app.state.gateway`` is its :class:`~h5sidecar.gateway.core.Gateway`.
    """
    gateway = Gateway(settings, dest, storage_options=storage_options,
                      read_settings=read_settings, refresh_seconds=refresh_seconds,
                      cubes=cubes, record_settings=record_settings)  # fmt: skip
    h = _Handlers(gateway, settings)
    key_methods = ["GET", "HEAD"]
    routes = [
        Route("/", h.landing, methods=key_methods),
        Route("/healthz", h.healthz, methods=key_methods),
        Route("/readyz", h.readyz, methods=key_methods),
        Route("/metrics", h.metrics, methods=key_methods),
        Route("/openapi.json", h.openapi, methods=key_methods),
        Route("/api/granules", h.granules, methods=key_methods),
        Route("/api/granules/{granule:path}", h.granule, methods=key_methods),
        Route("/quicklook.png", h.quicklook, methods=key_methods),
        Route("/zarr/{path:path}", h.zarr_v2, methods=key_methods),
        Route("/zarr3/{path:path}", h.zarr_v3, methods=key_methods),
        Route("/zarr3-shard/{k}/{path:path}", h.zarr_v3_shard, methods=key_methods),
        Route("/zarr-rechunk/{spec}/{path:path}", h.zarr_rechunk, methods=key_methods),
        Route("/zarr3-rechunk/{spec}/{path:path}", h.zarr_rechunk, methods=key_methods),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    stac = StacHandlers(stac_api)
    routes += [
        Route("/stac", stac.landing, methods=key_methods),
        Route("/stac/", stac.landing, methods=key_methods),
        Route("/stac/conformance", stac.conformance, methods=key_methods),
        Route("/stac/search", stac.search, methods=[*key_methods, "POST"]),
        Route("/stac/collections", stac.collections, methods=key_methods),
        Route("/stac/collections/{cid}", stac.collection, methods=key_methods),
        Route("/stac/collections/{cid}/items", stac.items, methods=key_methods),
        Route("/stac/collections/{cid}/items/{iid}", stac.item, methods=key_methods),
        Route("/stac/{path:path}", stac.file, methods=key_methods),
    ]
    middleware = [Middleware(Metrics, gateway=gateway)]
    if settings.cors_origins:
        middleware.append(Middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=[*METHODS, "POST"],
            allow_headers=["Range", "Authorization", "If-None-Match", "Accept-Encoding"],
            expose_headers=["Content-Range", "Content-Length", "Content-Encoding", "ETag",
                            "Accept-Ranges"],
            max_age=600,
        ))  # fmt: skip
    middleware.append(Middleware(Guard, settings=settings))

    async def on_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, SaturatedError):
            gateway.metrics.inc("h5sidecar_rejected_total")
        if isinstance(exc, H5SidecarError):
            return error_response(exc)
        if isinstance(exc, HTTPException):
            return JSONResponse({"error": ErrorKind.HTTP, "message": str(exc.detail)},
                                exc.status_code, headers=exc.headers)  # fmt: skip
        log.exception("unexpected error serving %s", request.url.path)
        return JSONResponse({"error": ErrorKind.INTERNAL, "message": "internal error (logged by "
                             "the gateway); please report it"}, 500)  # fmt: skip

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        gateway.start()  # load DEST's record in a thread while the server starts listening
        yield

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={H5SidecarError: on_error, HTTPException: on_error,
                                        Exception: on_error})  # fmt: skip
    app.state.gateway = gateway
    return app


def serve(
    settings: GatewaySettings,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    read_settings: ReadSettings | None = None,
    log_level: str = "info",
    stac_api: Any | None = None,
    cubes: Mapping[str, str] | Sequence[str] | None = None,
    record_settings: RecordSettings | None = None,
) -> None:
    """Run the gateway with uvicorn on ``settings.host:settings.port`` until interrupted
    (the parameters are :func:`create_app`'s)."""
    require_extra("gateway", "uvicorn", feature="h5sidecar serve")
    import uvicorn

    app = create_app(settings, dest, storage_options=storage_options,
                     read_settings=read_settings, stac_api=stac_api, cubes=cubes,
                     record_settings=record_settings)  # fmt: skip
    # timeout_graceful_shutdown: on SIGTERM/SIGINT in-flight requests get shutdown_seconds,
    # then they are cancelled -- a request stuck on a stalled source cannot keep it alive.
    # limit_concurrency: connections beyond max_connections are answered 503 at once.
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=log_level,
                            proxy_headers=False, server_header=False,
                            access_log=log_level == "debug",
                            timeout_graceful_shutdown=math.ceil(settings.shutdown_seconds),
                            limit_concurrency=settings.max_connections)  # fmt: skip
    server = uvicorn.Server(config)
    _warm_up()
    try:
        # asyncio.run has no loop_factory before Python 3.12; its Runner has (uvicorn's choice)
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(_serve_then_drop_queued(server))
    finally:
        app.state.gateway.close()  # its private record cache, if it made one
        close = getattr(stac_api, "close", None)  # a database backend's connections (pgstac)
        if close is not None:
            close()


def _warm_up() -> None:
    """Pay before serving what the first request would: pyarrow imports pandas on its first
    conversion (every sidecar parsed makes one), 0.15-0.8 s that the first
    ``/api/granules/NAME`` or chunk request took on top of its few milliseconds (the 160 ms
    "lookup" of the scale benchmark).  Before the server listens, so that ``/healthz``
    answering means requests no longer pay it."""
    import pyarrow as pa

    pa.array([], type=pa.string())


async def _serve_then_drop_queued(server: Any) -> None:
    """Run ``server``; once it stops, cancel the thread-pool work that cut requests queued.

    Without this the interpreter would finish every queued job (sidecar loads, reads,
    decodes) of requests already answered or cut before exiting: minutes after an overload.
    """
    from concurrent.futures import ThreadPoolExecutor

    from h5sidecar.read import drop_queued_decodes
    from h5sidecar.sources import drop_queued_reads

    pool = ThreadPoolExecutor(thread_name_prefix="h5sidecar-gateway")
    asyncio.get_running_loop().set_default_executor(pool)
    try:
        await server.serve()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        drop_queued_reads()
        drop_queued_decodes()  # the decode pool is process-wide and made on first use
