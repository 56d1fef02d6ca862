// h5sidecar gateway landing page: copy the snippet, fetch a Zarr chunk (CORS-aware).
"use strict";

// Base URL of the gateway the page talks to: this server, or ?gateway=http(s)://... (a page
// served by one gateway can read chunks from another one that allows its origin via CORS).
function gatewayBase() {
  const param = new URLSearchParams(window.location.search).get("gateway");
  if (param) {
    try {
      const url = new URL(param);
      if (url.protocol === "http:" || url.protocol === "https:") {
        return url.origin + url.pathname.replace(/\/+$/, "");
      }
    } catch (e) { /* not a URL: fall back to this server */ }
  }
  return window.location.origin;
}

function keyPath(path) {
  return path.split("/").map(encodeURIComponent).join("/");
}

async function fetchChunk(button, out) {
  const { granule, variable, chunk } = button.dataset;
  if (!chunk) { out.textContent = "no stored chunk"; return; }
  const url = `${gatewayBase()}/zarr/${keyPath(granule)}/${keyPath(variable)}/${chunk}`;
  out.dataset.state = "loading";
  out.textContent = "fetching " + url;
  try {
    const response = await fetch(url, { mode: "cors" });
    const body = new Uint8Array(await response.arrayBuffer());
    out.dataset.status = String(response.status);
    out.dataset.bytes = String(body.length);
    out.dataset.etag = response.headers.get("ETag") || "";
    out.dataset.state = response.ok ? "ok" : "error";
    out.textContent = `${response.status}: ${body.length} bytes (ETag ${out.dataset.etag}) ` +
      `from ${url}`;
  } catch (err) {
    out.dataset.state = "error";
    out.dataset.status = "0";
    out.textContent = `failed: ${err} (is ${new URL(url).origin} allowing this origin? ` +
      "start it with --cors)";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const copy = document.getElementById("copy-snippet");
  if (copy) {
    copy.addEventListener("click", () => {
      const text = document.getElementById("snippet").textContent;
      if (navigator.clipboard) { navigator.clipboard.writeText(text); }
    });
  }
  const button = document.getElementById("fetch-chunk");
  const out = document.getElementById("chunk-result");
  if (button && out) {
    button.addEventListener("click", () => fetchChunk(button, out));
  }
  const plot = document.getElementById("plot");
  if (plot) {
    const mark = () => { plot.dataset.loaded = String(plot.naturalWidth > 0); };
    if (plot.complete) { mark(); } else {
      plot.addEventListener("load", mark);
      plot.addEventListener("error", () => { plot.dataset.loaded = "false"; });
    }
  }
});
