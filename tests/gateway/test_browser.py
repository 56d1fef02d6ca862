"""The landing page in a real browser: headless Chromium driven over the DevTools protocol.

The page loads (granules, variables, snippet), its quick-look PNG renders, and a Zarr chunk is
fetched by the page's own script from *another* gateway (another origin) that allows the page's
origin with CORS -- and is refused by a third gateway that does not.  The whole page, as a
newcomer sees it, is captured in a screenshot and its DOM checked: groups in the snippet,
dimension names, dimensions without a variable, long granule names kept whole.  Skipped, with a message,
only when Chromium is not installed (``scripts/ensure-test-tools.sh`` installs it).
"""

from __future__ import annotations

import asyncio
import base64
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
import numpy as np
import pytest
import xarray as xr
from PIL import Image

from tests.gateway._http import SMALL, Corpus, gateway, http_corpus
from tests.gateway._landing_granule import LONG_NAME, landing_gateway

__all__ = ["http_corpus", "landing_gateway"]

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


#: The heading's characters and where its lines break (the character before each break).
_HEADING_BREAKS = """(() => {
  const h = document.getElementById('granule');
  const walker = document.createTreeWalker(h, NodeFilter.SHOW_TEXT);
  const chars = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const r = document.createRange();
      r.setStart(node, i);
      r.setEnd(node, i + 1);
      chars.push([node.data[i], r.getBoundingClientRect().top]);
    }
  }
  const breaks = [];
  for (let i = 1; i < chars.length; i++) {
    if (chars[i][1] > chars[i - 1][1] + 1) { breaks.push(chars[i - 1][0]); }
  }
  return {text: chars.map(c => c[0]).join(''), breaks,
          overflows: h.scrollWidth > h.clientWidth};
})()"""

#: The granule's entry in the list: one line, cut with an ellipsis, whole in its title.
_LISTED_NAME = """(() => {
  const li = document.querySelector('#granules li');
  const style = getComputedStyle(li);
  return {title: li.querySelector('a').title, whiteSpace: style.whiteSpace,
          textOverflow: style.textOverflow, cut: li.scrollWidth > li.clientWidth,
          lines: Math.round(li.getBoundingClientRect().height / parseFloat(style.lineHeight))};
})()"""


def test_landing_page_as_a_newcomer_sees_it(browser: str, landing_gateway: Any,
                                            tmp_path: Path) -> None:  # fmt: skip
    url, path, _ = landing_gateway
    query = {"granule": LONG_NAME, "variable": "HT"}

    async def scenario(page: Page) -> dict[str, Any]:
        out: dict[str, Any] = {}
        # a laptop-sized window: the long name cannot fit on one line of the heading
        await page.send("Emulation.setDeviceMetricsOverride", width=1000, height=1100,
                        deviceScaleFactor=1, mobile=False)  # fmt: skip
        await page.navigate(f"{url}/?{urlencode(query)}")
        await page.until("document.getElementById('plot').complete")
        out["plot"] = await page.eval("document.getElementById('plot').dataset.loaded")
        out["snippet"] = await page.eval("document.getElementById('snippet').textContent")
        out["dims"] = await page.eval(
            "Object.fromEntries([...document.querySelectorAll('td.dims')].map(td =>"
            " [td.parentElement.querySelector('a').textContent, td.textContent]))")
        out["dimensions"] = await page.eval(
            "[...document.querySelectorAll('#dimensions li')].map(li => li.textContent)")
        out["headings"] = await page.eval(
            "[...document.querySelectorAll('h3')].map(h => h.textContent)")
        out["heading"] = await page.eval(_HEADING_BREAKS)
        out["listed"] = await page.eval(_LISTED_NAME)
        shot = await page.send("Page.captureScreenshot", format="png")
        out["screenshot"] = base64.b64decode(shot["data"])
        return out

    seen = asyncio.run(drive(browser, scenario))

    shot = tmp_path / "landing.png"
    shot.write_bytes(seen["screenshot"])
    with Image.open(shot) as im:
        assert im.size == (1000, 1100)
        pixels = np.asarray(im.convert("RGB"))
    assert shot.stat().st_size > 20_000
    # not blank: the header's colour, text, tables and the plot's colour map
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 100
    assert seen["plot"] == "true"
    # the long name wraps between its parts in the heading, stays one line in the list
    heading = seen["heading"]
    assert heading["text"] == LONG_NAME and not heading["overflows"]
    assert heading["breaks"] and set(heading["breaks"]) <= set("_-."), heading
    listed = seen["listed"]
    assert listed["title"] == LONG_NAME and listed["lines"] == 1 and listed["cut"], listed
    assert (listed["whiteSpace"], listed["textOverflow"]) == ("nowrap", "ellipsis")
    assert 'xr.open_datatree("' in seen["snippet"] and "xr.open_zarr(" in seen["snippet"]
    with xr.open_dataset(path, engine="h5netcdf") as top, \
            xr.open_dataset(path, engine="h5netcdf", group="Grid") as grid:  # fmt: skip
        want = {n: f"({', '.join(v.dims)})" for ds in (top, grid) for n, v in ds.variables.items()}
        lengths = {f"{p}{d}": n for p, ds in (("", top), ("Grid/", grid))
                   for d, n in ds.sizes.items() if d not in ds.variables}  # fmt: skip
    assert seen["dims"] == want
    assert seen["dimensions"] == [f"{d}: length {n}" for d, n in lengths.items()]
    assert "Skipped variables" not in seen["headings"]
