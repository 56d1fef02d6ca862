"""The gateway's landing page: granules, groups, variables, dimensions and xarray snippets.

Everything here is framework-free: :func:`describe` summarises a granule from its references and
:func:`render_page` builds the HTML (every value from a sidecar is escaped: sidecars are
untrusted); the quick-look plot is :mod:`~h5sidecar.gateway._quicklook`'s.  Behaviour lives in
``static/landing.js`` (no inline script, so the page runs under a strict
Content-Security-Policy).
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

import numpy as np

from h5sidecar.read import cube_summary, is_cube
from h5sidecar.references import MISSING, ArrayRefs, GranuleRefs, chunk_key

__all__ = ["describe", "render_page", "render_waiting"]

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


def _dimension_length(refs: GranuleRefs, path: str) -> int | None:
    """Length of the netCDF dimension of dimension-only dataset ``path``, taken from a variable
    of its group (or a subgroup: netCDF dimensions are visible below their group) that uses it;
    None when no variable does."""
    group, _, name = path.rpartition("/")
    prefix = f"{group}/" if group else ""
    for apath, arr in refs.arrays.items():
        dims = arr.meta.dimension_names
        if apath.startswith(prefix) and name in dims:
            return int(arr.meta.shape[dims.index(name)])
    return None


def describe(refs: GranuleRefs) -> dict[str, Any]:
    """A JSON-ready summary of a granule or cube: kind (``"granule"`` or ``"cube"``, with the
    cube's member count and concat dimension), source, groups, variables, skipped variables
    and ``dimensions``: the netCDF dimensions without a variable (skipped as datasets, but
    holding no data) with their lengths."""
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
        "dimensions": [
            {"path": s.path, "length": _dimension_length(refs, s.path)}
            for s in refs.skipped
            if s.dimension_only
        ],
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


def _py(text: str) -> str:
    """``text`` as a Python string literal (names from a sidecar may hold quotes)."""
    return json.dumps(text, ensure_ascii=False)


#: Groups named in the snippet's comment at most (ATL03 has hundreds).
SNIPPET_GROUPS = 6


def _snippets(base: str, granule: str, groups: Sequence[str], group: str, token: bool) -> str:
    """Python that opens ``granule`` through this gateway: the whole tree when it has groups,
    and ``group`` (one of ``groups``, those holding variables) as a Dataset."""
    url = f"{base}/zarr/{quote(granule)}/"
    opts = ', storage_options={"headers": {"Authorization": "Bearer <TOKEN>"}}' if token else ""
    v3 = f"{base}/zarr3-shard/16/{quote(granule)}/"
    lines = ["import xarray as xr"]
    if any(groups):
        # variables below the root: xr.open_zarr(url) alone returns an empty Dataset
        lines.append(f'tree = xr.open_datatree("{url}", engine="zarr"{opts})  # every group')
        named = ", ".join(_py(g) if g else '"" (root)' for g in groups[:SNIPPET_GROUPS])
        more = f" and {len(groups) - SNIPPET_GROUPS} more" if len(groups) > SNIPPET_GROUPS else ""
        lines.append(f"# groups with variables: {named}{more}")
    group_arg = f", group={_py(group)}" if group else ""
    lines.append(f'ds = xr.open_zarr("{url}"{group_arg}{opts})')
    return (
        "\n".join(lines) + "\n\n"
        "import zarr  # Zarr v3 view, 16 chunks per shard (few requests for whole variables)\n"
        f'root = zarr.open_group("{v3}", mode="r"{opts})\n'
    )


def _dims(v: Mapping[str, Any]) -> str:
    """``(y, x)``: the dimension names as netCDF readers (h5netcdf) give them."""
    return f"({', '.join(v['dimensions'])})" if v["dimensions"] else "()"


def _breakable(name: str) -> str:
    """``name`` escaped, with line-break opportunities after its separators only (a long
    granule name wraps between its parts, never inside one)."""
    return re.sub(r"([_./-])", r"\1<wbr>", _e(name))


def _variables_table(granule: str, group: Mapping[str, Any], selected: str) -> str:
    rows = []
    for v in group["variables"]:
        q = urlencode({"granule": granule, "variable": v["path"]})
        mark = ' class="selected"' if v["path"] == selected else ""
        rows.append(
            f"<tr{mark}><td><a href=\"/?{_e(q)}#quicklook\">{_e(v['name'])}</a></td>"
            f"<td class=dims>{_e(_dims(v))}</td>"
            f"<td>{_e(tuple(v['shape']))}</td><td>{_e(v['dtype'])}</td>"
            f"<td>{_e(tuple(v['chunks']))}</td><td class=n>{v['n_stored'] + v['n_inline']}"
            f"/{v['n_chunks']}</td><td class=n>{_e(_size(v['stored_bytes']))}</td>"
            f"<td class=n>{_e(_size(v['decoded_bytes']))}</td>"
            f"<td>{_e(','.join(v['codecs']) or '-')}</td><td>{_e(v['units'])}</td></tr>"
        )
    head = ("<tr><th>variable</th><th>dimensions</th><th>shape</th><th>dtype</th><th>chunks</th><th>chunks "
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
            f'<li{" class=selected" if g == granule else ""}><a href="/?{_e(urlencode({"granule": g}))}"'
            f' title="{_e(g)}">{_e(g)}</a></li>'
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
        holding = [g for g in summary["groups"] if g["variables"]]
        groups = [g["path"] for g in holding]
        # the selected variable's group, else the one holding the most data (ATL03's photon
        # heights rather than its root's two small dimension scales)
        group = variable.rpartition("/")[0] if var and variable else max(
            holding, key=lambda g: sum(v["decoded_bytes"] for v in g["variables"]),
            default={"path": ""})["path"]  # fmt: skip
        src = summary["source"]
        if summary.get("kind") == "cube":
            cube = summary["cube"]
            what = (f"cube of {cube['members']} granules along "
                    f"<code>{_e(cube['concat_dim'] or '?')}</code> (first: "
                    f"<code>{_e(src['url'])}</code>)")  # fmt: skip
        else:
            what = f"source <code>{_breakable(src['url'])}</code>, {_e(_size(src['size']))}"
        main.append(f"<h2 id=granule data-granule=\"{_e(granule)}\">{_breakable(granule)}</h2>"
                    f"<p>{what}; {summary['n_variables']} variables</p>")  # fmt: skip
        main.append("<h3>Open it</h3><pre id=snippet>"
                    f"{_e(_snippets(base, granule, groups, group, token))}</pre>"
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
        dims = summary.get("dimensions", [])
        if dims:
            items = "".join(
                f"<li><code>{_e(d['path'])}</code>: "
                f"{'length ' + str(d['length']) if d['length'] is not None else 'length unknown'}"
                "</li>" for d in dims)  # fmt: skip
            main.append("<h3>Dimensions without a variable</h3><p>netCDF dimensions that have "
                        "no coordinate values (nothing is missing): they name the axes of "
                        f"the variables above.</p><ul id=dimensions>{items}</ul>")  # fmt: skip
        only_dims = {d["path"] for d in dims}
        skipped = [s for s in summary["skipped"] if s["path"] not in only_dims]
        if skipped:
            rows = "".join(f"<li><code>{_e(s['path'])}</code>: {_e(s['reason'])}</li>"
                           for s in skipped)  # fmt: skip
            main.append(f"<h3>Skipped variables</h3><ul id=skipped>{rows}</ul>")
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
        f"<script defer src=\"/static/landing.js\"></script></head><body>{_HEADER}"
        f"{''.join(body)}</body></html>"
    )


_HEADER = (
    "<header><h1>h5sidecar gateway</h1><p>Every indexed granule as a Zarr store: "
    "<code>/zarr/{granule}/</code> (v2), <code>/zarr3/{granule}/</code> (v3), "
    "<code>/zarr3-shard/{K}/{granule}/</code> (v3, K chunks per shard). "
    "<a href=\"/openapi.json\">API</a> · <a href=\"/metrics\">metrics</a> · "
    "<a href=\"/readyz\">ready?</a></p></header>"
)


def render_waiting(message: str, refresh: int) -> str:
    """The page a browser gets instead of the landing page while the gateway cannot serve it
    (DEST's record is loading, or its load failed and is tried again): ``message`` (it names
    DEST: escaped), and the page reloads itself after ``refresh`` seconds (a meta refresh: the
    Content-Security-Policy allows no inline script)."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta http-equiv=\"refresh\" content=\"{int(refresh)}\">"
        "<meta name=viewport content=\"width=device-width, initial-scale=1\">"
        "<title>h5sidecar gateway: not ready yet</title>"
        f"<link rel=stylesheet href=\"/static/landing.css\"></head><body class=waiting>{_HEADER}"
        f"<main><h2>Not ready yet</h2><p class=error id=waiting>{_e(message)}</p>"
        f"<p>This page reloads itself every {int(refresh)} s.</p></main></body></html>"
    )
