"""A second ATL03-like granule, built unlike ``h5sidecar.sample.write_atl03_like`` on purpose.

A figure measured on one generator may only hold for that generator's layout.  This one keeps
the product's names (six beams, ``heights/h_ph`` ...) so every benchmark workload applies, and
changes what differs between real granules:

* **file layout**: ``libver="latest"`` (version 2 object headers, fixed/extensible-array chunk
  indexes, fractal-heap groups) with *paged aggregation* (metadata gathered into its own pages)
  and link/attribute creation order tracked, where the sample has libver earliest and metadata
  interleaved with data;
* **attributes**: 10-12 per variable (units, long_name, standard_name, source, contentType,
  description, coordinates, valid_min, valid_max, _FillValue, comment, ...), so every variable
  keeps its attributes in *dense storage* (a fractal heap and a name index per object);
* **layouts and chunks**: photon variables chunked at 2,000 rows or stored contiguous and
  uncompressed; segment-rate variables chunked at 2,000 rows, 50,000 rows or contiguous; fixed
  (not unlimited) dimensions; gzip levels 1-9; small arrays compact;
* **groups**: ``signal_find_output/<surface>/`` and ``geophys_corr/<kind>/`` nested a level deeper,
  engineering parameters three levels deep, dimension scales attached to every rate variable;
* **strings**: variable-length string scalars and arrays beside fixed-length ones.

About 1,000 variables; the photon count is set from ``size_mb``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
SURFACES = ("land", "ocean", "sea_ice", "land_ice", "inland_water")
#: stored bytes per photon and fixed bytes of this layout (measured at 15 and 77 MB), used to
#: size a granule
BYTES_PER_PHOTON, FIXED_BYTES = 45.4, 4.4e6
PHOTON_CHUNK = 2_000
PAGE_SIZE = 1 << 20
#: (name, dtype, units, chunking) of the photon-rate variables; chunking: rows, or None for
#: contiguous and uncompressed
HEIGHTS = [("delta_time", "f8", "seconds since 2018-01-01", PHOTON_CHUNK),
           ("h_ph", "f4", "meters", PHOTON_CHUNK), ("lat_ph", "f8", "degrees_north", PHOTON_CHUNK),
           ("lon_ph", "f8", "degrees_east", PHOTON_CHUNK),
           ("dist_ph_along", "f4", "meters", None), ("dist_ph_across", "f4", "meters", None),
           ("pce_mframe_cnt", "u4", "counts", PHOTON_CHUNK), ("ph_id_channel", "u1", "1", None),
           ("ph_id_count", "u1", "1", PHOTON_CHUNK), ("ph_id_pulse", "u1", "1", PHOTON_CHUNK),
           ("quality_ph", "i1", "1", 10_000), ("weight_ph", "u1", "1", None),
           ("ph_h_err", "f4", "meters", 10_000)]
GEOLOCATION = ["segment_id", "segment_ph_cnt", "ph_index_beg", "reference_photon_index",
               "reference_photon_lat", "reference_photon_lon", "segment_dist_x",
               "segment_length", "altitude_sc", "bounce_time_offset", "full_sat_fract",
               "near_sat_fract", "neutat_delay_derivative", "neutat_delay_total", "neutat_ht",
               "pitch", "roll", "yaw", "podppd_flag", "range_bias_corr", "ref_azimuth",
               "ref_elev", "sigma_across", "sigma_along", "sigma_h", "sigma_lat", "sigma_lon",
               "solar_azimuth", "solar_elevation", "tx_pulse_energy", "tx_pulse_skew_est",
               "tx_pulse_width_lower", "tx_pulse_width_upper", "ph_index_end", "knn",
               "dem_h", "dac", "tide_earth"]
GEOPHYS = {"tides": ["tide_earth", "tide_load", "tide_ocean", "tide_oc_pole", "tide_pole",
                     "tide_equilibrium"],
           "atmosphere": ["dac", "neutat_delay", "wind_speed", "surface_pressure"],
           "terrain": ["dem_h", "dem_flag", "geoid", "geoid_free2mean"]}
BCKGRD = ["bckgrd_counts", "bckgrd_counts_reduced", "bckgrd_hist_top", "bckgrd_int_height",
          "bckgrd_int_height_reduced", "bckgrd_rate", "tlm_height_band1", "tlm_height_band2",
          "tlm_top_band1", "tlm_top_band2"]
SIGNAL_FIND = ["bckgrd_mean", "bckgrd_sigma", "t_pc_delta", "z_pc_delta", "bckgrd_rate_est",
               "signal_strength", "confidence_level"]
ENGINEERING = {"receiver": ["rx_bckgrd_sensitivity", "rx_return_sensitivity", "rx_gain",
                            "rx_threshold"],
               "transmit": ["tx_pulse_energy", "tx_pulse_width", "tx_pulse_distribution",
                            "tx_pulse_thresh_lower", "tx_pulse_thresh_upper"],
               "timing": ["ddg_delay", "ddg_width", "range_window_start", "range_window_width"]}
#: a table's variables: name -> (values, units, rows per chunk or None for contiguous)
Columns = dict[str, tuple[np.ndarray, str, "int | None"]]


def _attrs(ds: h5py.Dataset, units: str, content: str, coords: str | None,
           fill: Any, vmin: Any, vmax: Any) -> None:
    """The 10-12 CF/ATL03 attributes of a variable (dense attribute storage past 8)."""
    name = ds.name.rsplit("/", 1)[-1]
    a = ds.attrs
    a["units"] = units
    a["long_name"] = name.replace("_", " ").title()
    a["standard_name"] = name
    a["source"] = "ATL03 ATBD section 7.3, simulated (alternative layout)"
    a["contentType"] = content
    a["description"] = f"{name.replace('_', ' ').capitalize()}: see the ATBD for its derivation."
    a["comment"] = "Values are simulated; structure follows release 006 with variations."
    a["origin"] = np.bytes_(b"alt-generator")
    if coords:
        a["coordinates"] = coords
    if fill is not None:
        a["_FillValue"] = fill
    a["valid_min"] = vmin
    a["valid_max"] = vmax


def _fill(dtype: np.dtype[Any]) -> Any:
    return dtype.type(np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max)


def _values(dtype: str, n: int, rng: np.random.Generator, shape: tuple[int, ...] = ()
            ) -> np.ndarray:
    """Smooth values with some noise (compress like instrument data, not like noise)."""
    dt = np.dtype(dtype)
    x = np.linspace(0, rng.uniform(3, 30), n)
    v = rng.uniform(-50, 50) + 40 * np.sin(x + rng.uniform(0, 6)) + rng.normal(0, 0.05, n)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        v = np.clip(np.round(v - v.min()), info.min, info.max)
    out = v.astype(dt)
    return np.repeat(out[:, None], shape[0], axis=1) if shape else out


def _rate_var(g: h5py.Group, name: str, data: np.ndarray, units: str, content: str,
              coords: str | None, rows: int | None, level: int) -> h5py.Dataset:
    """A rate variable, chunked at ``rows`` with gzip ``level`` (shuffle on integers), or
    contiguous and uncompressed when ``rows`` is None; fixed dimensions."""
    fill = _fill(data.dtype)
    if rows is None or data.shape[0] <= 1:
        ds = g.create_dataset(name, data=data, fillvalue=fill)
    else:
        ds = g.create_dataset(name, data=data, chunks=(min(rows, data.shape[0]), *data.shape[1:]),
                              compression="gzip", compression_opts=level,
                              shuffle=data.dtype.kind in "iu", fillvalue=fill)
    vmin, vmax = (data.min(), data.max()) if data.size else (fill, fill)
    _attrs(ds, units, content, coords, fill, vmin, vmax)
    return ds


def _table(g: h5py.Group, cols: Columns, content: str,
           coords: str | None, rng: np.random.Generator) -> None:
    """Write a table of same-length variables; ``delta_time`` becomes their dimension scale."""
    made = {name: _rate_var(g, name, data, units, content, coords, rows, int(rng.integers(1, 10)))
            for name, (data, units, rows) in cols.items()}
    scale = made["delta_time"]
    scale.make_scale("delta_time")
    for name, ds in made.items():
        if name != "delta_time":
            ds.dims[0].attach_scale(scale)


def _small(g: h5py.Group, name: str, value: Any, units: str = "1") -> h5py.Dataset:
    """A small parameter: compact layout (data inside the object header)."""
    arr = np.ascontiguousarray(value)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(arr.shape) if arr.ndim else h5py.h5s.create(h5py.h5s.SCALAR)
    dsid = h5py.h5d.create(g.id, name.encode(), h5py.h5t.py_create(arr.dtype), space, dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, arr)
    ds = h5py.Dataset(dsid)
    _attrs(ds, units, "auxiliaryInformation", None, None, arr.min(), arr.max())
    return ds


def _beam(f: h5py.File, beam: str, photons: int, rng: np.random.Generator, t0: float) -> None:
    g = f.create_group(beam, track_order=True)
    g.attrs.update({"atlas_beam_type": "strong" if beam.endswith("l") else "weak",
                    "groundtrack_id": beam, "atlas_spot_number": str(BEAMS.index(beam) + 1),
                    "sc_orientation": "Forward", "Description": "One ground track."})
    n = photons
    t = t0 + np.sort(rng.uniform(0, n / 40_000, n))
    cols: Columns = {}
    for name, dtype, units, rows in HEIGHTS:
        cols[name] = (t if name == "delta_time" else _values(dtype, n, rng), units, rows)
    cols["signal_conf_ph"] = (_values("i1", n, rng, (5,)) % 5, "1", 10_000)
    _table(g.create_group("heights"), cols, "physicalMeasurement", "delta_time lat_ph lon_ph", rng)
    nseg = max(n // 20, 2)
    tseg = t0 + np.linspace(0, n / 40_000, nseg)
    rows_of = (PHOTON_CHUNK, 50_000, None)
    geo: Columns = {"delta_time": (tseg, "seconds since 2018-01-01", PHOTON_CHUNK)}
    for i, name in enumerate(GEOLOCATION):
        dtype = ("i4", "f8", "f4")[i % 3]
        geo[name] = (_values(dtype, nseg, rng), "meters", rows_of[i % 3])
    geo["velocity_sc"] = (_values("f4", nseg, rng, (3,)), "meters/second", PHOTON_CHUNK)
    _table(g.create_group("geolocation"), geo, "modelResult",
           "delta_time reference_photon_lat reference_photon_lon", rng)
    corr = g.create_group("geophys_corr", track_order=True)
    for kind, names in GEOPHYS.items():
        cols = {"delta_time": (tseg, "seconds since 2018-01-01", 50_000)}
        cols |= {nm: (_values("f4", nseg, rng), "meters", rows_of[j % 3])
                 for j, nm in enumerate(names)}
        _table(corr.create_group(kind), cols, "referenceInformation", "delta_time", rng)
    nfr = max(n // 800, 2)
    tfr = t0 + np.linspace(0, n / 40_000, nfr)
    bck: Columns = {"delta_time": (tfr, "seconds since 2018-01-01", None)}
    bck |= {nm: (_values("f4" if j % 2 else "i4", nfr, rng), "counts", PHOTON_CHUNK)
            for j, nm in enumerate(BCKGRD)}
    _table(g.create_group("bckgrd_atlas"), bck, "auxiliaryInformation", "delta_time", rng)
    sfo = g.create_group("signal_find_output")
    for k, surface in enumerate(SURFACES):
        rows = max(nfr // (3 + 4 * k), 2)
        cols = {"delta_time": (np.sort(rng.uniform(tfr[0], tfr[-1], rows)),
                               "seconds since 2018-01-01", None)}
        cols |= {nm: (_values("f4", rows, rng), "1", None) for nm in SIGNAL_FIND}
        _table(sfo.create_group(surface), cols, "auxiliaryInformation", "delta_time", rng)


def _ancillary(f: h5py.File, rng: np.random.Generator, t0: float) -> None:
    anc = f.create_group("ancillary_data", track_order=True)
    for edge in ("start", "end"):
        for name, dtype in (("cycle", "i4"), ("delta_time", "f8"), ("geoseg", "i4"),
                            ("gpssow", "f8"), ("gpsweek", "i4"), ("orbit", "i4"),
                            ("region", "i4"), ("rgt", "i4")):
            _small(anc, f"{edge}_{name}", np.array([t0 if name == "delta_time" else 7], dtype))
    vlen = h5py.string_dtype()
    for name, text in (("data_start_utc", "2019-03-29T13:06:45.000000Z"),
                       ("data_end_utc", "2019-03-29T13:12:10.000000Z"),
                       ("release", "006"), ("version", "02")):
        anc.create_dataset(name, data=text, dtype=vlen)  # variable-length string scalars
    anc.create_dataset("control", data=np.array([f"PARAM_{i:03d} = {i * 7 % 101}"
                                                 for i in range(40)], dtype=vlen))
    anc.create_dataset("granule_ids", data=np.array([f"ATL03_{i:06d}".encode()
                                                     for i in range(12)]))  # fixed-length
    eng = anc.create_group("atlas_engineering")
    for part, names in ENGINEERING.items():
        for pce in ("pce1", "pce2", "pce3"):
            grp = eng.require_group(part).create_group(pce)
            for name in names:
                _small(grp, name, np.round(rng.uniform(0, 100, 4), 3))
    for surface in SURFACES:
        grp = anc.create_group(surface)
        for j in range(12):
            _small(grp, f"param_{j:02d}", np.array([rng.uniform(0, 9)], "f8"))
    cal = anc.create_group("calibrations")
    for k in range(6):
        grp = cal.create_group(f"cal_{k}")
        _small(grp, "table", np.round(rng.normal(0, 1, (8, 16)), 3).astype("f4"))
        grp.create_dataset("bins", data=np.arange(2_000, dtype="f4") * 0.1)  # contiguous
        grp.create_dataset("hist", data=rng.integers(0, 1_000, (400, 50)).astype("i4"),
                           chunks=(100, 50), compression="gzip")


def _metadata(f: h5py.File) -> None:
    """METADATA/: attribute-only groups and variable-length string datasets."""
    meta = f.create_group("METADATA")
    vlen = h5py.string_dtype()
    for section in ("AcquisitionInformation", "DataQuality", "Lineage", "ProcessStep",
                    "ProductSpecificationDocument", "SeriesIdentification"):
        grp = meta.create_group(section)
        for k in range(5):
            sub = grp.create_group(f"item{k}")
            sub.attrs.update({"description": f"{section} item {k}", "identifier": f"id-{k}",
                              "version": "6", "source": "simulated"})
            sub.create_dataset("text", data=f"{section} {k}: " + "free text " * 20, dtype=vlen)


def write_atl03_alt(path: str | Path, *, size_mb: float = 70.0, seed: int = 0) -> Path:
    """Write the alternative ATL03-like granule (see the module docstring) of about ``size_mb``.

    Parameters
    ----------
    path : str or Path
        File to write (overwritten).
    size_mb : float
        Approximate file size in MB (sets the photon count; strong beams get 4x the weak).
    seed : int
        Seeds every value; the same seed writes the same values.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    rng = np.random.default_rng(seed)
    photons = max(int((size_mb * 1e6 - FIXED_BYTES) / BYTES_PER_PHOTON), 6_000)
    t0 = 4.5e7 + seed * 1000.0
    with h5py.File(path, "w", libver="latest", fs_strategy="page", fs_persist=True,
                   fs_page_size=PAGE_SIZE, track_order=True) as f:
        for beam in BEAMS:
            share = 0.4 if beam.endswith("l") else 0.1  # strong beams: 4x the photons
            _beam(f, beam, int(photons * share / 1.5), rng, t0)
        _ancillary(f, rng, t0)
        orbit = f.create_group("orbit_info")
        for name in ("crossing_time", "cycle_number", "lan", "orbit_number", "rgt",
                     "sc_orient", "sc_orient_time"):
            _small(orbit, name, np.array([rng.uniform(0, 100)], "f8"))
        qa = f.create_group("quality_assessment")
        for beam in BEAMS:
            grp = qa.create_group(beam)
            for name in ("qa_perc_signal_conf_ph_high", "qa_perc_signal_conf_ph_low",
                         "qa_perc_signal_conf_ph_med", "qa_perc_surf_type", "qa_total_signal"):
                _small(grp, name, rng.integers(0, 100, 5).astype("i4"))
        _metadata(f)
        f.attrs.update({"short_name": "ATL03", "level": "L2A", "Conventions": "CF-1.6",
                        "title": "ATLAS/ICESat-2 L2A Global Geolocated Photon Data (alternative)",
                        "granule_generator": "benchmarks/_granule_alt.py"})
    return path
