"""Decoded values: what xarray users see through a sidecar against xarray + h5netcdf on the file.

The raw check of ``verify`` (h5py against plain zarr) proves the bytes; this proves the CF
decoding plain xarray applies on top of them (fill values, packing, times).  The verdict of one
variable, shared with the test suite's reader matrix:

* ``equal``: same values (NaN where NaN, times to the nanosecond, strings as text, structured
  types field by field);
* ``widened``: values equal to what xarray gives from the file when it unpacks with float64
  ``scale_factor`` / ``add_offset``.  Zarr attributes are JSON, which has no float32, so plain
  xarray unpacks float32-packed data in float64: more precise, not the same bits;
* ``differ``: anything else.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Literal, Self

import numpy as np

__all__ = ["DecodedVerdict", "OpenedGroups", "decoded_verdict", "open_truth", "same_values"]

DecodedVerdict = Literal["equal", "widened", "differ"]


def open_truth(source: Any, group: str, *, frozen_sizes: bool = False) -> tuple[Any, Any] | None:
    """``(decoded, decoded with float64 packing attributes)`` of one group with h5netcdf.

    ``source`` is a path or an open binary file object.  ``None`` when xarray + h5netcdf cannot
    open the group (nothing to compare with).  ``frozen_sizes``: the group is opened through
    xarray's own ``H5NetCDFStore.open`` with the arguments ``open_dataset`` gives it, and its
    dimensions compute their sizes once
    (:func:`~h5sidecar._compat.h5netcdf.freeze_dimension_sizes`: the same values, for a
    fraction of the work on groups of many variables on an unlimited dimension).
    """
    import xarray as xr

    kw: dict[str, Any] = {"engine": "h5netcdf", "group": group or None, "phony_dims": "access"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if frozen_sizes:
                raw = _open_frozen(source, group)
            else:
                raw = xr.open_dataset(source, decode_cf=False, **kw)
            # decoded from the raw variables, as open_dataset decodes them: one h5netcdf open
            # per group, not two (an open computes every variable's shape, which for unlimited
            # dimensions h5netcdf derives from all variables attached to them)
            decoded = xr.decode_cf(raw)
    except Exception:  # noqa: BLE001 - h5netcdf's own refusals are not ours to judge
        return None
    wide = raw.copy()
    widened = False
    for v in wide.variables.values():
        for k in ("scale_factor", "add_offset"):
            if k in v.attrs and np.size(v.attrs[k]) == 1 and np.asarray(v.attrs[k]).dtype != "f8":
                v.attrs[k] = float(np.asarray(v.attrs[k]).reshape(-1)[0])
                widened = True
    if not widened:
        return decoded, decoded
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wide = xr.decode_cf(wide)
    except Exception:  # noqa: BLE001
        wide = decoded
    return decoded, wide


def _open_frozen(source: Any, group: str) -> Any:
    """The raw (not decoded) group as ``open_dataset(engine="h5netcdf", decode_cf=False)``
    opens it, with its dimension sizes frozen before xarray reads its variables' shapes."""
    import xarray as xr
    from xarray.backends import H5NetCDFStore

    from h5sidecar._compat.h5netcdf import freeze_dimension_sizes

    store = H5NetCDFStore.open(source, group=group or None, phony_dims="access")
    try:
        freeze_dimension_sizes(store.ds)
        return xr.open_dataset(store, decode_cf=False)
    except BaseException:
        store.close()
        raise


#: Why :class:`OpenedGroups` exists: opening is the main cost of verify's checks 4 and 5.
#: h5netcdf computes every variable's shape when a group is opened, and the size of an
#: unlimited dimension from every variable attached to it (ATL03: ~140 groups of ~20
#: variables), and an open on an object store reads the group's metadata again.


class OpenedGroups:
    """Groups of ``source`` (h5netcdf) and ``store`` (plain xarray, Zarr v2), opened on first use.

    Parameters
    ----------
    store : zarr store
        The sidecar as plain kerchunk consumers open it (consolidated Zarr v2).
    source : path or binary file object
        The HDF5 source.
    """

    def __init__(self, store: Any, source: Any) -> None:
        self._store, self._source = store, source
        self._truths: dict[str, Any] = {}
        self._plain: dict[str, Any] = {}
        self._all_tried = False

    def truth(self, group: str) -> tuple[Any, Any] | None:
        """:func:`~h5sidecar.workflows.checks._cfcheck.open_truth` of ``group``, once."""
        if group not in self._truths:
            self._truths[group] = open_truth(self._source, group, frozen_sizes=True)
        return self._truths[group]

    def plain(self, group: str) -> Any:
        """``group`` through plain xarray on the store, once (its refusal raised each time)."""
        import xarray as xr

        if not self._all_tried:
            self._all_tried = True
            self._open_all()
        if group not in self._plain:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._plain[group] = xr.open_dataset(
                        self._store, engine="zarr", group=group or None, consolidated=True,
                        zarr_format=2)  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - the checks report it per variable
                self._plain[group] = exc
        found = self._plain[group]
        if isinstance(found, Exception):
            raise found
        return found

    def _open_all(self) -> None:
        """Every group of the store in one pass (``xr.open_groups``): the consolidated metadata
        is parsed once, where an ``open_dataset`` per group parses all of it again each time
        (ATL03: 140 groups, 0.75 s against 14 s).  A store some group of which plain xarray
        refuses is opened group by group instead, so the refusal is reported where it is."""
        import xarray as xr

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found = xr.open_groups(self._store, engine="zarr", consolidated=True,
                                       zarr_format=2)  # fmt: skip
        except Exception:  # noqa: BLE001 - each group is opened (and refused) on its own
            return
        for path, ds in found.items():
            self._plain[path.strip("/")] = ds

    def close(self) -> None:
        """Close every dataset opened."""
        for pair in self._truths.values():
            for ds in pair or ():
                ds.close()
        for ds in self._plain.values():
            if not isinstance(ds, Exception):
                ds.close()
        self._truths.clear()
        self._plain.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_text(a: np.ndarray, resolve: Any = None) -> list[str]:
    out = []
    for x in a.ravel():
        if isinstance(x, bytes):
            out.append(x.decode("utf-8", "replace"))
        elif resolve is not None and not isinstance(x, str):
            out.append(str(resolve(x)))
        else:
            out.append(str(x))
    return out


def _leaves(dtype: np.dtype) -> list[tuple[tuple[Any, ...], np.dtype]]:
    """Access paths of the scalar leaves of a structured type, padding left out (nested
    members and sub-array elements in C order)."""
    out: list[tuple[tuple[Any, ...], np.dtype]] = []
    for name in dtype.names or ():
        sub = dtype.fields[name][0]  # type: ignore[index]
        base, shape = (sub.subdtype if sub.subdtype is not None else (sub, ()))
        for index in np.ndindex(*shape) if shape else [None]:
            key: tuple[Any, ...] = (name,) if index is None else (name, index)
            if base.names:
                out += [(key + k, d) for k, d in _leaves(base)]
            elif not (base.kind == "V" and name.startswith("_pad")):
                out.append((key, base))
    return out


def _leaf(a: np.ndarray, path: tuple[Any, ...]) -> np.ndarray:
    for step in path:
        a = a[step] if isinstance(step, str) else a[(Ellipsis, *step)]
    return a


def _structured_equal(a: np.ndarray, b: np.ndarray, resolve: Any) -> bool:
    """Field by field; a sidecar may flatten nested members and sub-arrays (one field per
    leaf, in the same order), which is the same values in another layout."""
    la, lb = _leaves(a.dtype), _leaves(b.dtype)
    if len(la) != len(lb):
        return False
    return all(
        same_values(_leaf(a, pa), _leaf(b, pb), resolve)
        for (pa, _), (pb, _) in zip(la, lb, strict=True)
    )


def same_values(got: Any, want: Any, resolve: Any = None) -> bool:
    """Exact equality (NaN equal to NaN; strings as text; structured types leaf by leaf).

    ``resolve`` turns an object reference of ``want`` (h5py) into the target's name, which is
    how sidecars hold references.
    """
    a, b = np.asarray(got), np.asarray(want)
    if a.shape != b.shape:
        return False
    if b.dtype.fields is not None or a.dtype.fields is not None:
        if a.dtype.fields is None or b.dtype.fields is None:
            return False
        return _structured_equal(a, b, resolve)
    if b.dtype.kind in "OUS" or a.dtype.kind in "OUST":
        return _as_text(a) == _as_text(b, resolve)
    if b.dtype.kind in "mM" or a.dtype.kind in "mM":
        return a.dtype.kind == b.dtype.kind and bool(np.array_equal(a, b, equal_nan=True))
    if a.dtype.kind != b.dtype.kind and {a.dtype.kind, b.dtype.kind} - {"i", "u"}:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=b.dtype.kind in "fc"))
    except TypeError:
        return bool(np.array_equal(a, b))


def decoded_verdict(
    got: Any, want: Any, wide: Any | None = None, resolve: Any = None
) -> DecodedVerdict:
    """Verdict for one variable (numpy-like values; ``wide`` from :func:`open_truth`)."""
    if same_values(got, want, resolve):
        return "equal"
    if wide is not None and wide is not want and same_values(got, wide, resolve):
        return "widened"
    return "differ"


def decoded_differences(
    store: Any,
    source: Any,
    groups: list[str],
    regions: dict[str, list[tuple[slice, ...]]],
    resolve: Any = None,
    opened: Any = None,
) -> dict[str, str]:
    """Variables whose CF-decoded values through ``store`` differ from xarray + h5netcdf.

    Parameters
    ----------
    store : zarr store
        The sidecar as plain kerchunk consumers open it (Zarr v2, consolidated).
    source : path or binary file object
        The HDF5 source, opened with h5netcdf.
    groups : list of str
        Group paths to check (``""`` for the root).
    regions : dict
        Array path -> regions (slices in array coordinates) to compare; arrays not listed are
        not compared.
    resolve : callable, optional
        h5py object reference -> target path (see :func:`same_values`).
    opened : OpenedGroups, optional
        Groups already opened on ``store`` and ``source``, shared with the dimension check
        (:class:`OpenedGroups`); by default opened here.

    Returns
    -------
    dict
        Array path -> what differs (``widened`` float32 packing is not a difference).
    """
    with contextlib.ExitStack() as stack:
        if opened is None:
            opened = stack.enter_context(OpenedGroups(store, source))
        return _decoded_differences(opened, groups, regions, resolve)


def _decoded_differences(
    opened: Any, groups: list[str], regions: dict[str, list[tuple[slice, ...]]], resolve: Any
) -> dict[str, str]:
    out: dict[str, str] = {}
    for group in groups:
        truth = opened.truth(group)
        if truth is None:
            continue
        want, wide = truth
        widened = wide is not want  # else one read of the source per region, not two
        prefix = f"{group}/" if group else ""
        names = [n for n in want.variables if f"{prefix}{n}" in regions]
        if not names:
            continue
        try:
            got = opened.plain(group)
        except Exception as exc:  # noqa: BLE001 - reported per variable, as verify does
            for n in names:
                out[f"{prefix}{n}"] = f"plain xarray cannot open group /{group}: {exc}"
            continue
        for n in names:
            path = f"{prefix}{n}"
            if n not in got.variables:
                out[path] = "plain xarray does not show this variable"
                continue
            problem = _compare_regions(got[n], want[n], wide[n] if widened else None,
                                       regions[path], resolve)  # fmt: skip
            if problem:
                out[path] = problem
    return out


def _compare_regions(
    got: Any, want: Any, wide: Any | None, regions: list[tuple[slice, ...]], resolve: Any
) -> str:
    """What differs in ``regions`` (positional: phony dimension names may differ), or "".
    ``wide`` is None when the group has no float32 packing to widen."""
    for region in regions:
        try:
            w = want.isel(dict(zip(want.dims, region, strict=False))).values
            wv = None if wide is None else wide.isel(dict(zip(wide.dims, region,
                                                                 strict=False))).values
        except Exception:  # noqa: BLE001 - h5netcdf cannot read it: nothing to compare with
            return ""
        try:
            g = got.isel(dict(zip(got.dims, region, strict=False))).values
        except Exception as exc:  # noqa: BLE001 - reported, as verify reports everything
            return f"plain xarray cannot decode {region}: {type(exc).__name__}: {exc}"
        if decoded_verdict(g, w, wv, resolve) == "differ":
            return (
                f"decoded values at {region} differ from xarray + h5netcdf on the source "
                f"(plain xarray gives {got.dtype}, h5netcdf {want.dtype})"
            )
    return ""
