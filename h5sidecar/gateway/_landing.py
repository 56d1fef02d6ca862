"""The gateway's landing page: granules, groups, variables, xarray snippets and a quick look.

Everything here is framework-free: :func:`describe` summarises a granule from its references,
:func:`render_page` builds the HTML (every value from a sidecar is escaped: sidecars are
untrusted), :func:`preview` reads a bounded window of a variable through zarr and
:func:`render_png` draws it with matplotlib.  Behaviour lives in ``static/landing.js``
(no inline script, so the page runs under a strict Content-Security-Policy).
"""

from __future__ import annotations

import html
import io
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import numpy as np

from h5sidecar.errors import H5SidecarError, InvalidReferenceError, UnsupportedFeatureError
from h5sidecar.read import cube_summary, is_cube
from h5sidecar.references import MISSING, ArrayRefs, GranuleRefs, chunk_key

__all__ = ["PREVIEW_POINTS", "describe", "preview", "render_page", "render_png"]

#: Values read at most for a quick look (a window at the start of the variable).
PREVIEW_POINTS = 250_000
#: Decoded bytes of one chunk a quick look may inflate (it decodes whole chunks): beyond this a
#: small compressed chunk could expand to gigabytes in the gateway's memory.
PREVIEW_CHUNK_BYTES = 64 * 2**20
#: Granule names listed on the page at most.
MAX_LISTED = 2000


def _itemsize(arr: ArrayRefs) -> int:
    try:
        return int(arr.meta.numpy_dtype.itemsize)
    except TypeError:
        return 0


def _dtype_label(arr: ArrayRefs) -> str:
    return "structured" if isinstance(arr.meta.dtype, list) else str(arr.meta.dtype)


def first_chunk(arr: ArrayRefs) -> str | None:
    """Key (relative to the array) of the first chunk that is stored, if any."""
    codes = arr.manifest.codes
    if codes.ndim == 0:
        return "0" if int(codes) != MISSING else None
    present = np.argwhere(codes != MISSING)
    if not len(present):
        return None
    return chunk_key(tuple(int(i) for i in present[0]))


def describe(refs: GranuleRefs) -> dict[str, Any]:
    """A JSON-ready summary of a granule or cube: kind (``"granule"`` or ``"cube"``, with the
    cube's member count and concat dimension), source, groups, variables, skipped variables."""
    groups: dict[str, dict[str, Any]] = {
        g: {"path": g, "attrs": dict(a), "variables": []} for g, a in sorted(refs.groups.items())
    }
    for path, arr in refs.arrays.items():
        m, man = arr.meta, arr.manifest
        groups[path.rpartition("/")[0]]["variables"].append({
            "path": path,
            "name": path.rpartition("/")[2],
            "status": arr.status,
            "shape": list(m.shape),
            "dtype": _dtype_label(arr),
            "chunks": list(m.chunks),
            "dimensions": list(m.dimension_names),
            "n_chunks": man.n_chunks,
            "n_stored": man.n_stored,
            "n_inline": man.n_inline,
            "n_missing": man.n_missing,
            "stored_bytes": man.stored_bytes + man.inline_bytes,
            "decoded_bytes": math.prod(m.shape) * _itemsize(arr),
            "codecs": [str(f["id"]) for f in m.filters]
            + ([str(m.compressor["id"])] if m.compressor else []),
            "units": str(m.attrs.get("units", "")),
            "long_name": str(m.attrs.get("long_name", "")),
            "first_chunk": first_chunk(arr),
        })  # fmt: skip
    out: dict[str, Any] = {"kind": "cube" if is_cube(refs) else "granule"}
    if is_cube(refs):
        out["cube"] = cube_summary(refs)
    return {
        **out,
        "source": refs.source.to_dict(),
        "groups": list(groups.values()),
        "skipped": [s.to_dict() for s in refs.skipped],
        "n_variables": len(refs.arrays),
    }


# -- HTML -------------------------------------------------------------------------------------
def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"


def _snippets(base: str, granule: str, group: str, token: bool) -> str:
    url = f"{base}/zarr/{quote(granule)}/"
    opts = ', storage_options={"headers": {"Authorization": "Bearer <TOKEN>"}}' if token else ""
    zopts = ', storage_options={"headers": {"Authorization": "Bearer <TOKEN>"}}' if token else ""
    group_arg = f', group="{group}"' if group else ""
    v3 = f"{base}/zarr3-shard/16/{quote(granule)}/"
    return (
        "import xarray as xr\n"
        f'ds = xr.open_zarr("{url}"{group_arg}{opts})\n\n'
        "import zarr  # Zarr v3 view, 16 chunks per shard (few requests for whole variables)\n"
        f'root = zarr.open_group("{v3}", mode="r"{zopts})\n'
    )


def _variables_table(granule: str, group: Mapping[str, Any], selected: str) -> str:
    rows = []
    for v in group["variables"]:
        q = urlencode({"granule": granule, "variable": v["path"]})
        mark = ' class="selected"' if v["path"] == selected else ""
        rows.append(
            f"<tr{mark}><td><a href=\"/?{_e(q)}#quicklook\">{_e(v['name'])}</a></td>"
            f"<td>{_e(tuple(v['shape']))}</td><td>{_e(v['dtype'])}</td>"
            f"<td>{_e(tuple(v['chunks']))}</td><td class=n>{v['n_stored'] + v['n_inline']}"
            f"/{v['n_chunks']}</td><td class=n>{_e(_size(v['stored_bytes']))}</td>"
            f"<td class=n>{_e(_size(v['decoded_bytes']))}</td>"
            f"<td>{_e(','.join(v['codecs']) or '-')}</td><td>{_e(v['units'])}</td></tr>"
        )
    head = ("<tr><th>variable</th><th>shape</th><th>dtype</th><th>chunks</th><th>chunks "
            "stored</th><th>stored</th><th>decoded</th><th>codecs</th><th>units</th></tr>")  # fmt: skip
    return f"<table>{head}{''.join(rows)}</table>"


def render_page(
    *,
    base: str,
    granules: Sequence[str],
    granule: str | None,
    summary: Mapping[str, Any] | None,
    variable: str | None,
    token: bool,
    error: str = "",
    cubes: Sequence[str] = (),
    count: int | None = None,
    query: str = "",
    more: str | None = None,
) -> str:
    """The landing page (HTML).  ``summary`` is :func:`describe` of ``granule`` (a granule or
    cube name); ``cubes`` are listed above the granules.

    ``granules`` is one page of names (of ``count`` served), those holding ``query`` when a
    search was made; ``more`` is the relative URL of the next page.  A search box asks the
    gateway for others: the page never lists every granule.
    """
    def listed(names: Sequence[str]) -> str:
        return "".join(
            f'<li{" class=selected" if g == granule else ""}><a href="/?{_e(urlencode({"granule": g}))}">'
            f"{_e(g)}</a></li>"
            for g in names[:MAX_LISTED]
        )

    total = "" if count is None else f" ({count})"
    search = ('<form id=search method=get action="/"><input type=search name=q '
              f'value="{_e(query)}" placeholder="name contains..." aria-label="search granules">'
              "<button type=submit>search</button></form>")  # fmt: skip
    found = f"<p>No granule name holds <code>{_e(query)}</code>.</p>" if query and not granules else ""
    nxt = f'<p><a id=next-page href="{_e(more)}">next page</a></p>' if more else ""
    nav = (f"<h2>Granules{total}</h2>{search}{found}<ul id=granules>{listed(granules)}</ul>"
           f"{nxt}")  # fmt: skip
    if cubes:
        nav = f"<h2>Cubes ({len(cubes)})</h2><ul id=cubes>{listed(cubes)}</ul>{nav}"
    body = [f"<nav>{nav}</nav>"]
    main: list[str] = []
    if error:
        main.append(f'<p class="error">{_e(error)}</p>')
    if granule and summary is not None:
        var = next((v for g in summary["groups"] for v in g["variables"] if v["path"] == variable),
                   None)  # fmt: skip
        group = variable.rpartition("/")[0] if var and variable else ""
        src = summary["source"]
        if summary.get("kind") == "cube":
            cube = summary["cube"]
            what = (f"cube of {cube['members']} granules along "
                    f"<code>{_e(cube['concat_dim'] or '?')}</code> (first: "
                    f"<code>{_e(src['url'])}</code>)")  # fmt: skip
        else:
            what = f"source <code>{_e(src['url'])}</code>, {_e(_size(src['size']))}"
        main.append(f"<h2 id=granule data-granule=\"{_e(granule)}\">{_e(granule)}</h2>"
                    f"<p>{what}; {summary['n_variables']} variables</p>")  # fmt: skip
        main.append("<h3>Open it</h3><pre id=snippet>"
                    f"{_e(_snippets(base, granule, group, token))}</pre>"
                    "<button type=button id=copy-snippet>copy</button>")  # fmt: skip
        if var is not None:
            q = urlencode({"granule": granule, "variable": var["path"]})
            chunk = var["first_chunk"] or ""
            main.append(
                f"<section id=quicklook><h3>Quick look: {_e(var['path'])}</h3>"
                f'<img id=plot alt="quick look of {_e(var["path"])}" src="/quicklook.png?{_e(q)}">'
                f'<p><button type=button id=fetch-chunk data-granule="{_e(granule)}" '
                f'data-variable="{_e(var["path"])}" data-chunk="{_e(chunk)}">fetch chunk '
                f"{_e(chunk or '(none stored)')} as Zarr</button> <output id=chunk-result>"
                "</output></p></section>"
            )
        for g in summary["groups"]:
            if not g["variables"]:
                continue
            main.append(f"<details open><summary>/{_e(g['path'])} ({len(g['variables'])} "
                        f"variables)</summary>{_variables_table(granule, g, variable or '')}"
                        "</details>")  # fmt: skip
        if summary["skipped"]:
            rows = "".join(f"<li><code>{_e(s['path'])}</code>: {_e(s['reason'])}</li>"
                           for s in summary["skipped"])  # fmt: skip
            main.append(f"<h3>Skipped variables</h3><ul>{rows}</ul>")
    elif not granules and not cubes:
        main.append("<p>No sidecars under DEST yet: run <code>h5sidecar index SOURCE -o DEST"
                    "</code>.</p>")  # fmt: skip
    else:
        main.append("<p>Pick a granule.</p>")
    body.append(f"<main>{''.join(main)}</main>")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content=\"width=device-width, initial-scale=1\">"
        "<title>h5sidecar gateway</title><link rel=stylesheet href=\"/static/landing.css\">"
        "<script defer src=\"/static/landing.js\"></script></head><body>"
        "<header><h1>h5sidecar gateway</h1><p>Every indexed granule as a Zarr store: "
        "<code>/zarr/{granule}/</code> (v2), <code>/zarr3/{granule}/</code> (v3), "
        "<code>/zarr3-shard/{K}/{granule}/</code> (v3, K chunks per shard). "
        "<a href=\"/openapi.json\">API</a> · <a href=\"/metrics\">metrics</a></p></header>"
        f"{''.join(body)}</body></html>"
    )


# -- quick look -----------------------------------------------------------------------------------
def _window(shape: tuple[int, ...]) -> tuple[slice | int, ...]:
    """A selection of at most :data:`PREVIEW_POINTS` values at the start of the array."""
    if not shape:
        return ()
    if len(shape) == 1:
        return (slice(0, min(shape[0], PREVIEW_POINTS)),)
    side = math.isqrt(PREVIEW_POINTS)
    lead: tuple[slice | int, ...] = tuple(0 for _ in shape[:-2])
    return (*lead, slice(0, min(shape[-2], side)), slice(0, min(shape[-1], side)))


async def preview(store: Any, arr: ArrayRefs) -> np.ndarray:
    """A bounded window of ``arr`` read through zarr from ``store`` (fill values as NaN).

    Raises
    ------
    UnsupportedFeatureError
        For data types that cannot be plotted (strings, structured types, ...).
    """
    import zarr.api.asynchronous as za

    dt = arr.meta.numpy_dtype
    if dt.kind not in "biuf":
        raise UnsupportedFeatureError(
            f"{arr.path} has data type {dt}, which has no quick look: read it with xarray"
        )
    chunk_bytes = math.prod(arr.meta.chunks) * dt.itemsize
    if chunk_bytes > PREVIEW_CHUNK_BYTES:
        raise UnsupportedFeatureError(
            f"{arr.path} has chunks of {chunk_bytes} bytes decoded, more than the quick look's "
            f"{PREVIEW_CHUNK_BYTES}: read a window of it with xarray or zarr instead"
        )
    try:
        z = await za.open_array(store=store, path=arr.path, mode="r", zarr_format=2)
        raw = await z.getitem(_window(arr.meta.shape))
    except H5SidecarError:
        raise
    except (ValueError, TypeError, RuntimeError, KeyError, IndexError, OverflowError,
            zlib.error) as exc:
        # zarr/numcodecs report an unknown codec or a chunk that does not decode to its shape
        # with builtin errors: that is the sidecar's problem (422), not the gateway's (500)
        raise InvalidReferenceError(
            f"{arr.path}: its chunks do not decode with the codecs and chunk shape the sidecar "
            f"names ({type(exc).__name__}: {str(exc)[:200]}); the sidecar is corrupt or needs "
            "a codec that is not installed: re-index the granule"
        ) from exc
    values = np.asarray(raw, dtype=np.float64)
    fill = arr.meta.attrs.get("_FillValue")
    if isinstance(fill, int | float) and not isinstance(fill, bool):
        values = np.where(values == fill, np.nan, values)
    return values


def render_png(values: np.ndarray, title: str, units: str = "") -> bytes:
    """A small PNG of ``values``: a line for 0-d/1-d data, an image for 2-d windows."""
    from matplotlib.figure import Figure  # the object API: no global state, thread-safe

    fig = Figure(figsize=(7, 3.2), dpi=90)
    ax = fig.add_subplot()
    if values.ndim <= 1:
        y = np.atleast_1d(values)
        step = max(1, y.size // 4000)  # a line of 4000 points shows everything a PNG can
        ax.plot(np.arange(y.size)[::step], y[::step], lw=0.6)
        ax.set_xlabel("index")
        ax.set_ylabel(units)
    else:
        im = ax.imshow(values, aspect="auto", interpolation="nearest")
        fig.colorbar(im, ax=ax, label=units)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
