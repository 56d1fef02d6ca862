"""The gateway's ASGI middleware: per-route metrics, and the guard (read-only methods, safe
paths, the bearer token) that answers before any route runs.

Both are plain ASGI callables: :class:`Metrics` wraps ``send`` to see each response's status
and body bytes, :class:`Guard` answers a refused request itself before any route runs.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.responses import JSONResponse, Response

from h5sidecar.errors import ErrorKind, H5SidecarError
from h5sidecar.gateway._http_rules import BadRequestError, check_request_path
from h5sidecar.gateway._reply import Reply, error_reply
from h5sidecar.gateway.core import Gateway
from h5sidecar.settings import GatewaySettings

__all__ = ["METHODS", "ASGIApp", "Guard", "Metrics", "Scope", "as_response", "error_response"]

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]  # fmt: skip

METHODS = ("GET", "HEAD", "OPTIONS")
#: The only route accepting POST: STAC API item search (a query in the body; nothing is written).
POST_PATHS = ("/stac/search",)
#: Route families used as the ``route`` label of metrics (bounded cardinality).
ROUTES = ("zarr", "zarr3", "zarr3-shard", "zarr-rechunk", "zarr3-rechunk", "api",
          "quicklook.png", "static", "healthz", "readyz", "metrics", "openapi.json", "stac")  # fmt: skip
#: Paths answered without the token: probes (Kubernetes, load balancers) send none.
OPEN_PATHS = ("/healthz", "/readyz")


def _route_label(path: str) -> str:
    head = path.lstrip("/").split("/", 1)[0]
    return head if head in ROUTES else ("landing" if head == "" else "other")


def as_response(reply: Reply) -> Response:
    """The Starlette response of a framework-free :class:`~h5sidecar.gateway._reply.Reply`."""
    if reply.payload is not None:
        return JSONResponse(reply.payload, reply.status, headers=reply.headers)
    return Response(reply.body, reply.status, headers=reply.headers)


def error_response(exc: H5SidecarError) -> Response:
    """The JSON error response of ``exc`` (status from the one table of ``_http_rules``)."""
    return as_response(error_reply(exc))


# -- middleware --------------------------------------------------------------------------------
class Metrics:
    """Outermost: counts requests, bytes and latency per route family."""

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app, self.metrics = app, gateway.metrics

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        state = {"status": 500, "bytes": 0}

        async def counting_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                # browsers must not sniff chunk bytes or JSON into something executable
                message["headers"] = [*message.get("headers", []),
                                      (b"x-content-type-options", b"nosniff")]
            elif message["type"] == "http.response.body":
                state["bytes"] += len(message.get("body", b""))
            await send(message)

        route = _route_label(scope["path"])
        self.metrics.inc("h5sidecar_http_requests_in_flight", 1)
        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.inc("h5sidecar_http_requests_in_flight", -1)
            self.metrics.inc("h5sidecar_http_requests_total", route=route,
                             method=scope["method"], status=str(state["status"]))  # fmt: skip
            self.metrics.inc("h5sidecar_http_response_bytes_total", state["bytes"], route=route)
            self.metrics.observe("h5sidecar_http_request_duration_seconds",
                                 time.perf_counter() - t0, route=route)  # fmt: skip


def _merge_slashes(scope: Scope) -> Scope:
    """``/zarr/G//g/.zmetadata`` -> ``/zarr/G/g/.zmetadata``: what a client makes of a store URL
    written with a trailing ``/`` (as the README and the STAC zarr asset write it)."""
    scope = dict(scope)
    scope["path"] = re.sub("/{2,}", "/", scope["path"])
    if scope.get("raw_path"):
        scope["raw_path"] = re.sub(b"/{2,}", b"/", scope["raw_path"])
    return scope


class Guard:
    """Inside CORS: read-only methods, safe paths, and the bearer token."""

    def __init__(self, app: ASGIApp, settings: GatewaySettings) -> None:
        self.app, self.settings = app, settings
        self._token = settings.token.encode() if settings.token else None

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = self._refuse(scope)
        if response is None and "//" in scope["path"]:
            scope = _merge_slashes(scope)
        await (response or self.app)(scope, receive, send)

    def _refuse(self, scope: Scope) -> Response | None:
        method = scope["method"]
        allow = {"Allow": ", ".join(METHODS)}
        if method not in METHODS and not (method == "POST" and scope["path"] in POST_PATHS):
            return JSONResponse({"error": ErrorKind.METHOD_NOT_ALLOWED,
                                 "message": f"{method} is not allowed: the gateway is read-only "
                                 "(GET, HEAD, OPTIONS)"}, 405, headers=allow)  # fmt: skip
        if method == "OPTIONS":  # not a CORS preflight (CORSMiddleware answers those)
            return Response(status_code=204, headers=allow)
        raw = scope.get("raw_path") or scope["path"].encode()
        try:
            check_request_path(raw.decode("latin-1"), scope["path"],
                               max_length=self.settings.max_key_length)  # fmt: skip
        except BadRequestError as exc:
            return error_response(exc)
        if self._token is not None and scope["path"] not in OPEN_PATHS:
            headers = dict(scope.get("headers") or [])
            scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._token):
                return JSONResponse({"error": ErrorKind.UNAUTHORIZED,
                                     "message": "this gateway needs 'Authorization: Bearer "
                                     "<token>' (the --token it was started with)"}, 401,
                                    headers={"WWW-Authenticate": 'Bearer realm="h5sidecar"'})  # fmt: skip
        return None
