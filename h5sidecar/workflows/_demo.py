"""The end-to-end demo: sample granules -> index -> open one with xarray -> compare with h5py.

Runs offline on embedded defaults (``make demo``).  Granules already present in the output folder
are kept, so a second run shows resumption: every granule is reported up to date.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import xarray as xr

from h5sidecar.dest import DEFAULT_PATTERNS, RunReport
from h5sidecar.workflows.index._index import index_many

__all__ = ["DemoSummary", "ValueComparison", "run_demo", "write_samples"]

#: Photons per granule in the demo: a few MB per granule, written in about a second.
DEMO_PHOTONS = 20_000
DEMO_GROUP = "gt1l/heights"
DEMO_VARIABLES = ("h_ph", "lat_ph", "lon_ph", "delta_time")


@dataclass(frozen=True, slots=True)
class ValueComparison:
    """First values of one variable read through the sidecar and with h5py."""

    variable: str
    sidecar_values: str
    h5py_values: str
    equal: bool


@dataclass(frozen=True, slots=True)
class DemoSummary:
    """What the demo did (printed by ``h5sidecar demo``).

    Attributes
    ----------
    granule_dir, sidecar_dir : Path
    report : RunReport
    opened : str
        Sidecar opened with xarray.
    group, engine : str
        Group opened and the xarray engine used.
    dataset_summary : str
        Dimensions and variable count of the opened dataset.
    comparisons : tuple of ValueComparison
        Whole variables compared with h5py (first values shown).
    example_sidecar : str
    """

    granule_dir: Path
    sidecar_dir: Path
    report: RunReport
    opened: str
    group: str
    engine: str
    dataset_summary: str
    comparisons: tuple[ValueComparison, ...]
    example_sidecar: str

    @property
    def ok(self) -> bool:
        """True when indexing succeeded and every compared variable equals h5py's values."""
        return self.report.ok and all(c.equal for c in self.comparisons)


def write_samples(
    outdir: str | Path,
    *,
    granules: int = 2,
    photons: int | None = None,
    seed: int = 0,
    netcdf: bool = False,
) -> list[Path]:
    """Write sample ATL03-like granules (and optionally a netCDF-4 file) into ``outdir``.

    Parameters
    ----------
    outdir : str or Path
    granules : int
    photons : int, optional
        Photons per granule, over its six beams (the generator's default when None).
    seed : int
    netcdf : bool
        Also write ``sample_netcdf4.nc``.
    """
    from h5sidecar.sample import write_netcdf_like, write_sample_granules

    kw: dict[str, Any] = {} if photons is None else {"photons": photons}
    paths = write_sample_granules(outdir, granules=granules, seed=seed, **kw)
    if netcdf:
        paths.append(write_netcdf_like(Path(outdir) / "sample_netcdf4.nc", seed=seed))
    return paths


def run_demo(
    outdir: str | Path = "demo-output",
    *,
    granules: int = 2,
    photons: int = DEMO_PHOTONS,
    workers: int = 2,
) -> DemoSummary:
    """Run the demo into ``outdir`` (``granules/``, ``sidecars/``) and summarise it.

    Parameters
    ----------
    outdir : str or Path
        Output folder (created).
    granules, photons : int
        Sample size: granules, and photons per granule over its six beams.
    workers : int
        Worker processes used for indexing.
    """
    out = Path(outdir).resolve()
    gdir, sdir = out / "granules", out / "sidecars"
    if not any(gdir.glob("ATL03_*.h5")):
        write_samples(gdir, granules=granules, photons=photons)
    report = index_many(
        str(gdir), str(sdir), format="parquet", workers=workers, patterns=DEFAULT_PATTERNS
    )
    first = next((g for g in report.granules if g.status != "failed"), None)
    if first is None:
        return DemoSummary(gdir, sdir, report, "", DEMO_GROUP, "", "nothing indexed", (), "")
    # opened raw once (values compared with h5py's stored values), CF-decoded for the summary
    engine, raw = _open(first.sidecar)
    ds = xr.decode_cf(raw)
    summary = ", ".join(f"{k}={v}" for k, v in ds.sizes.items()) + f"; {len(ds.data_vars)} vars"
    with h5py.File(first.url, "r") as f:
        comparisons = tuple(
            _compare(name, raw[name].values, f[f"{DEMO_GROUP}/{name}"][...])
            for name in DEMO_VARIABLES
        )
    raw.close()
    return DemoSummary(
        granule_dir=gdir,
        sidecar_dir=sdir,
        report=report,
        opened=first.sidecar,
        group=DEMO_GROUP,
        engine=engine,
        dataset_summary=summary,
        comparisons=comparisons,
        example_sidecar=first.sidecar,
    )


def _open(sidecar: str) -> tuple[str, xr.Dataset]:
    """Open the demo group through ``sidecar`` without CF decoding: h5sidecar's engine when it
    is installed, else plain fsspec reference:// + zarr."""
    if importlib.util.find_spec("h5sidecar.read.xarray.backend") is not None:
        ds = xr.open_dataset(sidecar, engine="h5sidecar", group=DEMO_GROUP, decode_cf=False)
        return "h5sidecar", ds
    ds = xr.open_dataset(
        "reference://",
        engine="zarr",
        group=DEMO_GROUP,
        decode_cf=False,
        backend_kwargs={
            "storage_options": {"fo": sidecar, "remote_protocol": "file"},
            "consolidated": True,
            "zarr_format": 2,
        },
    )
    return "zarr (fsspec reference://)", ds


def _compare(name: str, through_sidecar: np.ndarray, with_h5py: np.ndarray) -> ValueComparison:
    return ValueComparison(
        variable=f"{DEMO_GROUP}/{name}",
        sidecar_values=_head(through_sidecar),
        h5py_values=_head(with_h5py),
        equal=bool(np.array_equal(through_sidecar, with_h5py, equal_nan=True)),
    )


def _head(values: np.ndarray, n: int = 3) -> str:
    return ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in values[:n].tolist())
