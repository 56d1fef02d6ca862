"""The small parts of the ATL03-like granule: ancillary_data, orbit_info, quality_assessment,
atlas_impulse_response, the attribute-only METADATA tree and the root attributes.

These hold many tiny datasets in all three HDF5 layouts (compact, contiguous, chunked), fixed-length
strings and deeply nested attribute-only groups: the metadata-heavy part of a real granule.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Literal

import h5py
import numpy as np

from h5sidecar.sample._tables import (
    ALTIMETRY_PARAMS,
    BEAMS,
    METADATA_TREE,
    SIGNAL_FIND_PARAMS,
    SURFACES,
)

Layout = Literal["compact", "contiguous", "chunked"]
GPS_SECONDS_AT_ATLAS_EPOCH = 1_198_800_018  # GPS time of 2018-01-01T00:00:00Z


@dataclass(frozen=True)
class GranuleSummary:
    """What the small groups say about the granule (times, track, bounds)."""

    start: dt.datetime
    end: dt.datetime
    start_delta_time: float
    end_delta_time: float
    rgt: int
    cycle: int
    region: int
    start_segment: int
    end_segment: int
    lat_bounds: tuple[float, float]
    lon_bounds: tuple[float, float]

    @property
    def orbit(self) -> int:
        return (self.cycle - 1) * 1387 + self.rgt


def _create_compact(group: h5py.Group, name: str, arr: np.ndarray) -> h5py.Dataset:
    """A dataset with the compact layout (raw data inside the object header; h5py's high-level
    API cannot make one, so go through the low-level property list)."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    dcpl.set_obj_track_times(False)  # like h5py's default: no timestamps, reproducible bytes
    space = h5py.h5s.create_simple(arr.shape) if arr.ndim else h5py.h5s.create(h5py.h5s.SCALAR)
    dsid = h5py.h5d.create(group.id, name.encode(), h5py.h5t.py_create(arr.dtype), space,
                           dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, arr)
    return h5py.Dataset(dsid)


def small_dataset(group: h5py.Group, name: str, value: Any, *, layout: Layout = "contiguous",
                  units: str | None = "1", chunks: tuple[int, ...] | None = None,
                  description: str | None = None) -> h5py.Dataset:
    """A small ancillary dataset with CF-ish attributes in the requested layout."""
    arr = np.ascontiguousarray(value)
    if layout == "compact":
        ds = _create_compact(group, name, arr)
    elif layout == "chunked":
        ds = group.create_dataset(name, data=arr, chunks=chunks, compression="gzip",
                                  compression_opts=6, shuffle=arr.dtype.kind in "iu")
    else:
        ds = group.create_dataset(name, data=arr)
    if units is not None:
        ds.attrs["units"] = units
    ds.attrs["long_name"] = name.replace("_", " ")
    ds.attrs["contentType"] = "auxiliaryInformation"
    ds.attrs["description"] = description or f"{name.replace('_', ' ').capitalize()}."
    ds.attrs["source"] = "Control"
    return ds


def _utc(t: dt.datetime) -> bytes:
    """Fixed-width (27 byte) UTC string, as in the product's *_utc datasets."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f").encode() + b"Z"


def write_ancillary(root: h5py.Group, s: GranuleSummary, rng: np.random.Generator) -> None:
    """ancillary_data/: granule bounds (compact scalars), strings, altimetry and engineering
    parameters (contiguous), calibrations (chunked), signal-finding parameters per surface."""
    anc = root.create_group("ancillary_data")
    anc.attrs["Description"] = "Contains information ancillary to the data product."
    small_dataset(anc, "atlas_sdp_gps_epoch", np.array([GPS_SECONDS_AT_ATLAS_EPOCH], "f8"),
                  layout="compact", units="seconds since 1980-01-06T00:00:00.000000Z")
    for edge, t, seg in (("start", s.start_delta_time, s.start_segment),
                         ("end", s.end_delta_time, s.end_segment)):
        gps = t + GPS_SECONDS_AT_ATLAS_EPOCH
        for name, value, dtype in (("cycle", s.cycle, "i4"), ("delta_time", t, "f8"),
                                   ("geoseg", seg, "i4"), ("gpssow", gps % 604800, "f8"),
                                   ("gpsweek", gps // 604800, "i4"), ("orbit", s.orbit, "i4"),
                                   ("region", s.region, "i4"), ("rgt", s.rgt, "i4")):
            small_dataset(anc, f"{edge}_{name}", np.array([value], dtype), layout="compact")
    strings = {"data_start_utc": _utc(s.start), "data_end_utc": _utc(s.end),
               "granule_start_utc": _utc(s.start), "granule_end_utc": _utc(s.end),
               "release": b"006", "version": b"01",
               "control": b"\n".join(f"PARAM_{i:03d} = {i * 7 % 101}".encode()
                                     for i in range(40))}
    for name, text in strings.items():
        small_dataset(anc, name, np.array([text]), units=None)  # fixed-length |S strings
    alt = anc.create_group("altimetry")
    for name in ALTIMETRY_PARAMS:
        small_dataset(alt, name, np.round(rng.uniform(0.1, 100, 1), 3))
    _write_engineering(anc.create_group("atlas_engineering"), rng)
    _write_calibrations(anc.create_group("calibrations"), rng)
    tep = anc.create_group("tep")
    for name in ("tep_bin_size", "tep_gap_size", "tep_normalize", "tep_prim_window",
                 "tep_range_prim", "tep_rm_noise", "tep_sec_window", "tep_start_x"):
        small_dataset(tep, name, np.round(rng.uniform(0, 10, 1), 4), units="seconds")
    small_dataset(tep, "tep_valid_spot", np.array([1, 1, 3, 3, 1, 3], "i4"))
    small_dataset(tep, "tep_peak_bins", np.array([1200, 1800], "i4"))
    for surface in SURFACES:
        g = anc.create_group(surface)
        for name in SIGNAL_FIND_PARAMS:
            param: np.ndarray
            if name.endswith("_flag"):
                param = np.array([rng.integers(0, 2)], "i4")
            elif name.startswith(("n", "min_")):
                param = np.array([rng.integers(1, 50)], "i4")
            else:
                param = np.round(rng.uniform(0.01, 10, 1), 3)
            small_dataset(g, name, param, layout="compact")


def _write_engineering(g: h5py.Group, rng: np.random.Generator) -> None:
    small_dataset(g, "band_tol", np.array([20.0]), units="meters")
    small_dataset(g, "ds_gt", np.arange(1, 7, dtype="i2"))
    for flag in ("det_ab_flag", "hvpc_ab_flag", "laser_12_flag", "lrs_ab_flag", "pdu_ab_flag",
                 "spd_ab_flag", "tams_ab_flag"):
        small_dataset(g, flag, np.array([rng.integers(1, 3)], "i4"))
    rx = g.create_group("receiver")
    for name in ("rx_bckgrd_sensitivity", "rx_return_sensitivity"):
        small_dataset(rx, name, rng.uniform(0.5, 1.5, 6))
    tx = g.create_group("transmit")
    for name in ("tx_pulse_distribution", "tx_pulse_energy", "tx_pulse_skew_est",
                 "tx_pulse_thresh_lower", "tx_pulse_thresh_upper", "tx_pulse_width_lower",
                 "tx_pulse_width_upper"):
        small_dataset(tx, name, rng.uniform(0, 1, 6))


def _write_calibrations(g: h5py.Group, rng: np.random.Generator) -> None:
    """Dead-time tables (contiguous) and first-photon-bias cubes (chunked, gzip) per beam."""
    dead, ffb = g.create_group("dead_time"), g.create_group("first_photon_bias")
    for beam in BEAMS:
        d = dead.create_group(beam)
        small_dataset(d, "dead_time", rng.normal(3.1e-9, 5e-11, 20), units="seconds")
        small_dataset(d, "sigma", np.abs(rng.normal(1e-11, 1e-12, 20)), units="seconds")
        f = ffb.create_group(beam)
        width = np.linspace(1e-9, 4e-9, 60, dtype="f4")
        strength = np.array([0.5, 1.0, 2.0], "f4")
        cube = (strength[:, None, None] * width[None, :, None] * 1e8
                * np.linspace(0.1, 1.0, 20, dtype="f4")[None, None, :]).astype("f4")
        small_dataset(f, "ffb_corr", cube, layout="chunked", chunks=(1, 60, 20), units="meters")
        small_dataset(f, "width", width, units="seconds")
        small_dataset(f, "strength", strength)


def write_orbit_info(root: h5py.Group, s: GranuleSummary) -> None:
    """orbit_info/: one-element datasets describing the orbit."""
    g = root.create_group("orbit_info")
    for name, value, dtype in (("crossing_time", s.start_delta_time - 100.0, "f8"),
                               ("cycle_number", s.cycle, "i1"), ("lan", s.lon_bounds[0], "f8"),
                               ("orbit_number", s.orbit, "u2"), ("rgt", s.rgt, "i2"),
                               ("sc_orient", 1, "i1"), ("sc_orient_time", s.start_delta_time
                                                        - 86400.0, "f8")):
        small_dataset(g, name, np.array([value], dtype))


def write_quality_assessment(root: h5py.Group, counts: dict[str, np.ndarray]) -> None:
    """quality_assessment/: granule pass/fail and per-beam signal-confidence summaries.

    ``counts`` maps a beam to the (5 surfaces x 3 levels) count of medium/low/high photons.
    """
    g = root.create_group("quality_assessment")
    small_dataset(g, "qa_granule_fail_reason", np.array([0], "i4"))
    small_dataset(g, "qa_granule_pass_fail", np.array([0], "i4"))
    for beam, c in counts.items():
        b = g.create_group(beam)
        total = np.maximum(c.sum(axis=1), 1)
        for j, level in enumerate(("low", "med", "high")):
            small_dataset(b, f"qa_total_signal_conf_ph_{level}", c[None, :, j].astype("i4"))
            small_dataset(b, f"qa_perc_signal_conf_ph_{level}",
                          (100.0 * c[None, :, j] / total).astype("f4"), units="percent")
        small_dataset(b, "qa_perc_surf_type", np.array([[100, 33, 0, 0, 0]], "f4"),
                      units="percent")


def write_impulse_response(root: h5py.Group, rng: np.random.Generator) -> None:
    """atlas_impulse_response/: transmitter-echo-path histograms (chunked 1-D arrays)."""
    g = root.create_group("atlas_impulse_response")
    for pce in ("pce1_spot1", "pce2_spot3"):
        h = g.create_group(pce).create_group("tep_histogram")
        time = np.arange(2000) * 5e-11
        hist = (np.exp(-0.5 * ((time - 2e-8) / 1e-9) ** 2)
                + 0.05 * np.exp(-0.5 * ((time - 4e-8) / 3e-9) ** 2)
                + rng.exponential(1e-3, time.size))
        small_dataset(h, "tep_hist", hist / hist.sum(), layout="chunked", chunks=(500,))
        small_dataset(h, "tep_hist_time", time, layout="chunked", chunks=(500,), units="seconds")
        small_dataset(h, "tep_hist_sum", np.array([int(rng.integers(10**5, 10**6))], "i8"))
        small_dataset(h, "reference_tep_flag", np.array([1], "i2"))
        for name in ("tep_bckgrd", "tep_duration", "tep_tod"):
            small_dataset(h, name, np.round(rng.uniform(0, 1, 1), 6), units="seconds")


def _attrs_tree(group: h5py.Group, tree: dict[str, Any]) -> None:
    """Nested groups holding only attributes; text is fixed-length bytes like the product's."""
    for key, value in tree.items():
        if isinstance(value, dict):
            _attrs_tree(group.create_group(key), value)
        else:
            group.attrs[key] = np.bytes_(str(value).encode())


def write_metadata(root: h5py.Group, s: GranuleSummary) -> None:
    """METADATA/: attribute-only ISO-style tree; Extent carries this granule's bounds."""
    tree = dict(METADATA_TREE)
    tree["Extent"] = {"rangeBeginningDateTime": _utc(s.start).decode(),
                      "rangeEndingDateTime": _utc(s.end).decode(),
                      "southBoundLatitude": s.lat_bounds[0], "northBoundLatitude": s.lat_bounds[1],
                      "westBoundLongitude": s.lon_bounds[0], "eastBoundLongitude": s.lon_bounds[1]}
    _attrs_tree(root.create_group("METADATA"), tree)


def root_attributes(s: GranuleSummary, name: str) -> dict[str, Any]:
    """Global attributes of the granule (CF/ACDD-style, as in the real product)."""
    return {
        "short_name": "ATL03", "level": "L2A", "Conventions": "CF-1.6",
        "title": "ATLAS/ICESat-2 L2A Global Geolocated Photon Data (simulated sample)",
        "description": "Synthetic granule with the structure of ATL03 release 006.",
        "granule_type": "ATL03", "identifier_product_DOI": "10.5067/ATLAS/ATL03.006",
        "identifier_file_uuid": f"{s.rgt:04d}{s.cycle:02d}{s.region:02d}-sample",
        "institution": "h5sidecar sample generator", "project": "ICESat-2 (simulated)",
        "instrument": "ATLAS > Advanced Topographic Laser Altimeter System",
        "platform": "ICESat-2 > Ice, Cloud, and land Elevation Satellite-2",
        "producer_granule_id": name, "date_created": _utc(s.end + dt.timedelta(days=30)).decode(),
        "time_coverage_start": _utc(s.start).decode(), "time_coverage_end": _utc(s.end).decode(),
        "time_type": "CCSDS UTC-A", "geospatial_lat_min": s.lat_bounds[0],
        "geospatial_lat_max": s.lat_bounds[1], "geospatial_lon_min": s.lon_bounds[0],
        "geospatial_lon_max": s.lon_bounds[1], "geospatial_lat_units": "degrees_north",
        "geospatial_lon_units": "degrees_east",
    }
