"""The landing page in a real browser: headless Chromium driven over the DevTools protocol.

The page loads (granules, variables, snippet), its quick-look PNG renders, and a Zarr chunk is
fetched by the page's own script from *another* gateway (another origin) that allows the page's
origin with CORS -- and is refused by a third gateway that does not.  Skipped, with a message,
only when Chromium is not installed (``scripts/ensure-test-tools.sh`` installs it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import h5py
import pytest

from tests.gateway._http import SMALL, Corpus, gateway, http_corpus

__all__ = ["http_corpus"]

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--disable-default-apps", "--disable-domain-reliability", "--no-first-run", "--no-pings",
    "--no-default-browser-check", "--disable-client-side-phishing-detection",
    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
]  # fmt: skip


class Page:
    """A minimal DevTools-protocol client for one page target."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        await self.ws.send_json({"id": msg_id, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive(timeout=30)).data)
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    async def navigate(self, url: str) -> None:
        self.events.clear()
        await self.send("Page.navigate", url=url)
        await self.until("document.readyState === 'complete'")

    async def eval(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                                 awaitPromise=True)  # fmt: skip
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def until(self, expression: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = await self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression}")
            await asyncio.sleep(0.05)


def start_chromium(profile: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start headless Chromium; return the process and its DevTools HTTP endpoint."""
    assert CHROMIUM is not None
    proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("chromium did not open its DevTools port")
        time.sleep(0.05)
    port = port_file.read_text().split()[0]
    return proc, f"http://127.0.0.1:{port}"


async def drive(devtools: str, scenario: Any) -> Any:
    async with aiohttp.ClientSession() as session:
        async with session.put(f"{devtools}/json/new?about:blank") as r:
            target = await r.json()
        async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = Page(ws)
            await page.send("Page.enable")
            await page.send("Runtime.enable")
            return await scenario(page)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/ensure-test-tools.sh installs it)")
    proc, devtools = start_chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield devtools
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def test_landing_page_plot_and_cross_origin_chunk(browser: str, http_corpus: Corpus) -> None:
    with h5py.File(http_corpus.local[SMALL]) as f:
        chunk_size = len(f["gt1l/heights/h_ph"].id.read_direct_chunk((0,))[1])
    dest, opts = http_corpus.dest, http_corpus.options
    with gateway(dest, opts) as (page_url, _), \
            gateway(dest, opts, cors_origins=(page_url,)) as (data_url, data_app), \
            gateway(dest, opts, cors_origins=("http://127.0.0.1:1",)) as (closed_url, _):  # fmt: skip
        query = {"granule": SMALL, "variable": "gt1l/heights/h_ph"}

        async def scenario(page: Page) -> dict[str, Any]:
            out: dict[str, Any] = {}
            await page.navigate(f"{page_url}/?{urlencode(query)}")
            out["title"] = await page.eval("document.title")
            out["granules"] = await page.eval(
                "[...document.querySelectorAll('#granules a')].map(a => a.textContent)")
            out["rows"] = await page.eval("document.querySelectorAll('tr').length")
            out["snippet"] = await page.eval("document.getElementById('snippet').textContent")
            await page.until("document.getElementById('plot').complete")
            out["plot"] = await page.eval(
                "[document.getElementById('plot').naturalWidth,"
                " document.getElementById('plot').dataset.loaded]")
            for name, base in (("cors", data_url), ("closed", closed_url)):
                await page.navigate(f"{page_url}/?{urlencode({**query, 'gateway': base})}")
                await page.eval("document.getElementById('fetch-chunk').click()")
                state = await page.until(
                    "['ok', 'error'].includes(document.getElementById('chunk-result')"
                    ".dataset.state) && document.getElementById('chunk-result').dataset.state")
                out[name] = (state, await page.eval(
                    "Object.assign({}, document.getElementById('chunk-result').dataset)"))
            return out

        seen = asyncio.run(drive(browser, scenario))

    assert seen["title"] == "h5sidecar gateway"
    assert SMALL in seen["granules"] and len(seen["granules"]) == 2
    assert seen["rows"] > 10
    assert f'xr.open_zarr("{page_url}/zarr/{SMALL}/", group="gt1l/heights")' in seen["snippet"]
    width, loaded = seen["plot"]
    assert width > 100 and loaded == "true"
    state, data = seen["cors"]
    assert state == "ok", data
    assert data["status"] == "200" and int(data["bytes"]) == chunk_size
    assert data["etag"].startswith('"')  # exposed to the page by Access-Control-Expose-Headers
    assert data_app.state.gateway.metrics.value(
        "h5sidecar_http_requests_total", route="zarr", method="GET", status="200") >= 1
    state, data = seen["closed"]
    assert state == "error" and data["status"] == "0"  # the browser refused the answer (CORS)
