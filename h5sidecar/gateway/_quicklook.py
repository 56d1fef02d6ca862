"""The landing page's quick look: a bounded window of a variable, decoded, drawn as a PNG.

:func:`preview` reads the window through zarr and decodes it as xarray does (``_FillValue`` and
``missing_value`` masked, ``scale_factor``/``add_offset`` applied, ``_Unsigned`` honoured), and
also masks values outside ``valid_range``/``valid_min``/``valid_max`` (xarray leaves those
alone, but a plot of them would stretch the colour scale over values the product calls invalid).
So the colours and the units on the legend describe physical values, not packed integers.
"""

from __future__ import annotations

import asyncio
import io
import math
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from h5sidecar.errors import H5SidecarError, InvalidReferenceError, UnsupportedFeatureError
from h5sidecar.read import cf_decoded
from h5sidecar.references import GranuleRefs

__all__ = ["PREVIEW_POINTS", "preview", "render_png", "value_range"]

#: Values read at most for a quick look (a window at the start of the variable).
PREVIEW_POINTS = 250_000
#: Decoded bytes of one chunk a quick look may inflate (it decodes whole chunks): beyond this a
#: small compressed chunk could expand to gigabytes in the gateway's memory.
PREVIEW_CHUNK_BYTES = 64 * 2**20


def _window(shape: tuple[int, ...]) -> tuple[slice | int, ...]:
    """A selection of at most :data:`PREVIEW_POINTS` values at the start of the array."""
    if not shape:
        return ()
    if len(shape) == 1:
        return (slice(0, min(shape[0], PREVIEW_POINTS)),)
    side = math.isqrt(PREVIEW_POINTS)
    lead: tuple[slice | int, ...] = tuple(0 for _ in shape[:-2])
    return (*lead, slice(0, min(shape[-2], side)), slice(0, min(shape[-1], side)))


def _bound(value: Any, index: int = 0) -> float | int | None:
    """Item ``index`` of a numeric attribute (a number or a list of them), or None."""
    items = value if isinstance(value, list | tuple) else [value]
    if len(items) <= index:
        return None
    item = items[index]
    return item if isinstance(item, int | float) and not isinstance(item, bool) else None


def _invalid(raw: np.ndarray, decoded: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """Where values fall outside ``valid_range`` (or ``valid_min``/``valid_max``), or None.

    CF: the valid range of packed data is given in packed units, of the packed type; integer
    bounds on integer data are therefore compared with the raw (unsigned when ``_Unsigned``)
    values, any other bounds with the decoded ones.
    """
    pair = attrs.get("valid_range")
    if isinstance(pair, list | tuple) and len(pair) == 2:
        lo, hi = _bound(pair, 0), _bound(pair, 1)
    else:
        lo, hi = _bound(attrs.get("valid_min")), _bound(attrs.get("valid_max"))
    if lo is None and hi is None:
        return None
    values = decoded
    if raw.dtype.kind in "iu" and all(isinstance(b, int) for b in (lo, hi) if b is not None):
        values = raw
        if raw.dtype.kind == "i" and str(attrs.get("_Unsigned", "")).lower() == "true":
            values = raw.view(raw.dtype.str.replace("i", "u"))
    out = np.zeros(values.shape, bool)
    with np.errstate(invalid="ignore"):
        if lo is not None:
            out |= values < lo
        if hi is not None:
            out |= values > hi
    return out


def _physical(refs: GranuleRefs, path: str, raw: np.ndarray) -> np.ndarray:
    """``raw`` values of array ``path`` decoded as xarray does, then masked by the valid range."""
    decoded = np.asarray(cf_decoded(refs, path, raw), dtype=np.float64)
    invalid = _invalid(raw, decoded, refs.arrays[path].meta.attrs)
    return decoded if invalid is None else np.where(invalid, np.nan, decoded)


async def preview(store: Any, refs: GranuleRefs, path: str) -> np.ndarray:
    """A bounded window of array ``path`` of ``refs``, read through zarr from ``store`` and
    decoded to physical values (float64, NaN where masked); see the module docstring.

    Raises
    ------
    UnsupportedFeatureError
        For data types that cannot be plotted (strings, structured types, ...).
    InvalidReferenceError
        When the chunks do not decode as the sidecar says they should.
    """
    import zarr.api.asynchronous as za

    arr = refs.arrays[path]
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
        raw = np.asarray(await z.getitem(_window(arr.meta.shape)))
        # off the event loop: decoding is CPU work (and the first one imports xarray)
        return await asyncio.to_thread(_physical, refs, path, raw)
    except H5SidecarError:
        raise
    except (ValueError, TypeError, RuntimeError, KeyError, IndexError, OverflowError,
            zlib.error) as exc:
        # zarr/numcodecs report an unknown codec or a chunk that does not decode to its shape
        # with builtin errors (and xarray's coder an attribute it cannot apply): that is the
        # sidecar's problem (422), not the gateway's (500)
        raise InvalidReferenceError(
            f"{arr.path}: its chunks do not decode with the codecs, chunk shape and attributes "
            f"the sidecar names ({type(exc).__name__}: {str(exc)[:200]}); the sidecar is "
            "corrupt or needs a codec that is not installed: re-index the granule"
        ) from exc


def value_range(values: np.ndarray, units: str = "") -> str:
    """The legend's range text: ``"0.5 .. 1.54e+04 m"``, or ``"no valid values"``."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return "no valid values"
    text = f"{float(finite.min()):.6g} .. {float(finite.max()):.6g}"
    return f"{text} {units}".rstrip()


def render_png(values: np.ndarray, title: str, units: str = "") -> bytes:
    """A small PNG of ``values``: a line for 0-d/1-d data, an image for 2-d windows.

    The legend (axis or colour bar label) gives the units and the range of the values shown;
    the same range text is stored in the PNG's ``Description`` text chunk for programs.
    """
    from matplotlib.figure import Figure  # the object API: no global state, thread-safe

    fig = Figure(figsize=(7, 3.2), dpi=90)
    ax = fig.add_subplot()
    shown = value_range(values, units)
    label = f"{units}\n({shown})" if units else f"({shown})"
    if values.ndim <= 1:
        y = np.atleast_1d(values)
        step = max(1, y.size // 4000)  # a line of 4000 points shows everything a PNG can
        ax.plot(np.arange(y.size)[::step], y[::step], lw=0.6)
        ax.set_xlabel("index")
        ax.set_ylabel(label, fontsize=8)
    else:
        im = ax.imshow(values, aspect="auto", interpolation="nearest")
        fig.colorbar(im, ax=ax).set_label(label, fontsize=8)
    ax.set_title(title, fontsize=9, wrap=True)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Description": shown})
    return buf.getvalue()
