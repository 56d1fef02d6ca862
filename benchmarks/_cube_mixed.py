"""The datacube benchmark's correctness table: a granule packed differently.

``write_daily_collection(days=6, mixed_packing=True)`` writes six daily granules with ``tas``
packed as ``(scale_factor, add_offset) = (0.01, 273.15)`` and a seventh with ``(0.02, 250.0)``.
Each tool combines the seven along ``time`` and the repacked granule's ``tas`` is compared with
xarray + h5netcdf on its file:

- h5sidecar ``build_cube``: refuses by default (``IncompatibleGranulesError``); with
  ``on_mismatch="split"`` the repacked granule becomes its own cube, read here;
- kerchunk ``SingleHdf5ToZarr`` + ``MultiZarrToZarr`` from the HDF5 files, and
  ``MultiZarrToZarr`` over the sidecars' kerchunk references (what it makes of ``tas`` when it
  has it); both read with plain xarray;
- VirtualiZarr ``open_virtual_mfdataset`` (``HDFParser``) + ``.vz.to_icechunk``, read with
  icechunk + xarray.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _common as c
from benchmarks import _cube_peers as peers

BUCKET = "cube"
FOLDER = "mixed"
DAYS = 6


def _granules() -> list[Path]:
    from h5sidecar.sample import write_daily_collection

    folder = c.S3_ROOT / BUCKET / FOLDER
    if not folder.exists():
        write_daily_collection(folder.with_suffix(".tmp"), days=DAYS, mixed_packing=True)
        folder.with_suffix(".tmp").rename(folder)
    return sorted(folder.glob("*.nc"))  # the repacked granule is the last day


def _errors(tas: Any, truth: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """Verdicts of the repacked (last) granule and of the others."""
    got = np.asarray(tas)
    return {"repacked": peers.compare(got[-1:], tuple(a[-1:] for a in truth)),
            "others": peers.compare(got[:-1], tuple(a[:-1] for a in truth))}


def run_mixed(url: str, work: Path) -> dict[str, Any]:
    """Every tool on the mixed-packing sample; one result per tool."""
    import xarray as xr

    from h5sidecar.errors import IncompatibleGranulesError
    from h5sidecar.references import read_refs, to_kerchunk
    from h5sidecar.workflows import build_cube, index_many

    paths = _granules()
    truth = peers.truth(paths)
    source = f"s3://{BUCKET}/{FOLDER}/"
    urls = [source + p.name for p in paths]
    sidecars = work / "mixed-sidecars"
    if not index_many(source, str(sidecars), executor="serial").ok:
        raise SystemExit("indexing the mixed-packing sample failed")
    out: dict[str, Any] = {}
    try:
        build_cube(str(sidecars), str(work / "mixed.parq"))
        out["h5sidecar build_cube"] = {"outcome": "built one cube (not expected)"}
    except IncompatibleGranulesError as e:
        out["h5sidecar build_cube"] = {"outcome": f"refused: {type(e).__name__}",
                                       "message": str(e).splitlines()[0]}
    split = build_cube(str(sidecars), str(work / "mixed.parq"), on_mismatch="split")
    tas = []
    for part in split.cubes:
        with xr.open_dataset(part.path, engine="h5sidecar") as ds:
            tas.append(ds["tas"].values)
    out["h5sidecar build_cube(on_mismatch='split')"] = {
        "outcome": f"split into {len(split.cubes)} cubes "
                   f"({', '.join(str(len(p.granules)) for p in split.cubes)} granules)",
    } | _errors(np.concatenate(tas), truth)
    refs = peers.kerchunk_from_hdf5(urls)
    out["kerchunk SingleHdf5ToZarr + MultiZarrToZarr"] = (
        _errors(peers.open_kerchunk(refs)["tas"].values, truth) if "tas/.zarray" in refs["refs"]
        else {"outcome": "tas left out (SingleHdf5ToZarr warns and drops it)"})
    refs = peers.combine_kerchunk([to_kerchunk(read_refs(str(p)))
                                   for p in sorted(sidecars.glob("*.parq"))])
    out["kerchunk MultiZarrToZarr of the sidecars"] = {
        "outcome": "one cube, first granule's packing"} | _errors(
        peers.open_kerchunk(refs)["tas"].values, truth)
    prefix = f"_cubes/{FOLDER}/virtualizarr.icechunk"
    shutil.rmtree(c.S3_ROOT / BUCKET / prefix, ignore_errors=True)
    try:
        peers.vz_build(urls, url, BUCKET, prefix, source)
        ds = peers.open_icechunk_peer(url, BUCKET, prefix, source)
        out["VirtualiZarr + Icechunk"] = {"outcome": "one cube, first granule's packing"} | (
            _errors(ds["tas"].values, truth))
    finally:
        shutil.rmtree(c.S3_ROOT / BUCKET / "_cubes" / FOLDER, ignore_errors=True)
    return out


def report_mixed(mixed: dict[str, Any]) -> str:
    """The correctness table (Markdown)."""
    def err(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        if r["verdict"] == "differ":
            return f"{r['max_abs_error']:.3g}"
        return r["verdict"] + (f" ({r['max_abs_error']:.2g})" if r["max_abs_error"] else "")

    rows = [[tool, r["outcome"], err(r.get("repacked")), err(r.get("others"))]
            for tool, r in mixed.items()]
    return (f"Mixed packing ({DAYS} granules + 1 packed differently), `tas` vs h5netcdf:\n\n"
            + c.markdown_table(["tool", "outcome", "max abs error, repacked granule (K)",
                                "other granules"], rows))
