"""Simulation and writing of the ATL03-like granule: ground track, photons, beam groups."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from h5sidecar.sample._ancillary import (
    GranuleSummary,
    root_attributes,
    small_dataset,
    write_ancillary,
    write_impulse_response,
    write_metadata,
    write_orbit_info,
    write_quality_assessment,
)
from h5sidecar.sample._tables import (
    BCKGRD_ATLAS,
    BEAMS,
    CONTENT_TYPE,
    EXTRA_ATTRS,
    GEOLOCATION,
    GEOPHYS_CORR,
    HEIGHTS,
    SIGNAL_FIND,
    SURFACES,
    Spec,
    parse_table,
)

ATLAS_EPOCH = dt.datetime(2018, 1, 1)  # ATLAS SDP epoch of delta_time (leap seconds ignored)
CHUNK_ROWS = 10_000
GZIP_LEVEL = 6
PULSE_RATE_HZ = 10_000.0
MAJOR_FRAME_PULSES = 200  # 50 Hz major frames
GROUND_SPEED = 7000.0  # m/s along track
EARTH_RADIUS = 6_371_000.0
SEGMENT_LENGTH = 20.0  # m, geolocation segment
# Mean photons per pulse; strong beams are the "l" ones in this (forward) orientation.
STRONG_RATE, WEAK_RATE = 0.56, 0.14


@dataclass(frozen=True)
class _Identity:
    start: dt.datetime
    rgt: int
    cycle: int
    region: int


def _identity(seed: int) -> _Identity:
    """Reference ground track, cycle, region and start time of a seed (distinct per seed)."""
    rgt = (seed * 389) % 1387 + 1
    cycle = 3 + (seed // 1387) % 20
    region = seed % 14 + 1
    # RGTs repeat every 91 days; a region is ~1/14 of an orbit (~405 s).
    offset = dt.timedelta(days=91 * (cycle - 3) + 91 * (rgt - 1) / 1387, seconds=405 * region)
    start = dt.datetime(2019, 3, 29, 13, 0, 0) + offset
    return _Identity(start.replace(microsecond=0), rgt, cycle, region)


def granule_name(seed: int) -> str:
    """ATL03 file name (``ATL03_YYYYMMDDhhmmss_ttttccrr_006_01.h5``) of the granule for ``seed``."""
    ident = _identity(seed)
    return (f"ATL03_{ident.start:%Y%m%d%H%M%S}_{ident.rgt:04d}{ident.cycle:02d}"
            f"{ident.region:02d}_006_01.h5")


def _ground_track(t: np.ndarray, ident: _Identity, cross_track_m: np.ndarray | float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Latitude/longitude of a point ``cross_track_m`` off a 92-degree circular orbit at times t."""
    inc = np.radians(92.0)
    raan = 2 * np.pi * (ident.rgt - 1) / 1387
    u = 2 * np.pi * (ident.region - 0.5) / 14 + GROUND_SPEED / EARTH_RADIUS * t
    cu, su, co, so = np.cos(u), np.sin(u), np.cos(raan), np.sin(raan)
    pos = np.stack([co * cu - so * su * np.cos(inc), so * cu + co * su * np.cos(inc),
                    su * np.sin(inc)])
    normal = np.array([so * np.sin(inc), -co * np.sin(inc), np.cos(inc)])[:, None]
    d = np.asarray(cross_track_m) / EARTH_RADIUS
    p = np.cos(d) * pos + np.sin(d) * normal
    lat = np.degrees(np.arcsin(np.clip(p[2], -1, 1)))
    lon = np.degrees(np.arctan2(p[1], p[0]) - 7.2921159e-5 * t)
    return lat, (lon + 180.0) % 360.0 - 180.0


def _surface(x: np.ndarray, seed: int) -> np.ndarray:
    """Smooth terrain height (m) along track distance x (m)."""
    ph = np.random.default_rng(seed).uniform(0, 2 * np.pi, 3)
    return (800 + 400 * np.sin(x / 9000 + ph[0]) + 60 * np.sin(x / 1100 + ph[1])
            + 8 * np.sin(x / 140 + ph[2]))


def _generic_values(spec: Spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """Plausible values for a non-computed variable: smooth, noise, step, int, flag kinds."""
    a = spec.args
    shape: tuple[int, ...] = (n,)
    if spec.kind == "smooth":
        period = rng.uniform(0.5, 3.0) * max(n, 2)
        v = a[0] + a[1] * np.sin(2 * np.pi * np.arange(n) / period + rng.uniform(0, 6.3))
    elif spec.kind == "noise":
        v = rng.normal(a[0], a[1], n)
    elif spec.kind == "step":  # piecewise constant, like most engineering flags
        v = np.repeat(rng.uniform(a[0], a[1], n // 500 + 1), 500)[:n]
    elif spec.kind == "int":
        v = rng.integers(int(a[0]), int(a[1]) + 1, n)
    elif spec.kind == "flag":
        v = (rng.random(n) < a[0]).astype(int)
    elif spec.kind == "surf":  # (n, 5) surface-type mask: land everywhere, some ocean
        shape = (n, 5)
        v = np.zeros(shape)
        v[:, 0] = 1
        v[: n // 3, 1] = 1
    elif spec.kind == "xyz":  # (n, 3) spacecraft velocity
        shape = (n, 3)
        v = np.stack([rng.normal(0, 50, n), rng.normal(7100, 5, n), rng.normal(0, 50, n)], 1)
    else:
        raise ValueError(f"unknown value kind {spec.kind!r} for sample variable {spec.name!r}")
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        v = np.clip(np.round(v), info.min, info.max)
    return np.asarray(v).reshape(shape).astype(spec.dtype)


def _fill_value(dtype: np.dtype[Any]) -> Any:
    """The product's fill value: the largest value of the dtype."""
    return dtype.type(np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max)


def _write_var(group: h5py.Group, spec: Spec, data: np.ndarray, content_type: str,
               coordinates: str | None, with_fill: bool) -> h5py.Dataset:
    """One photon/segment-rate variable: unlimited rows, 10,000-row gzip chunks (+shuffle ints)."""
    fill = _fill_value(spec.dtype) if with_fill else None
    ds = group.create_dataset(
        spec.name, data=data, dtype=spec.dtype, chunks=(CHUNK_ROWS, *data.shape[1:]),
        maxshape=(None, *data.shape[1:]), compression="gzip", compression_opts=GZIP_LEVEL,
        shuffle=spec.dtype.kind in "iu", fillvalue=fill)
    ds.attrs["units"] = spec.units
    ds.attrs["long_name"] = spec.name.replace("_", " ")
    ds.attrs["contentType"] = content_type
    ds.attrs["description"] = f"{spec.name.replace('_', ' ').capitalize()} ({content_type})."
    ds.attrs["source"] = "ATL03 ATBD, simulated"
    if coordinates and spec.name != "delta_time":
        ds.attrs["coordinates"] = coordinates
    if fill is not None:
        ds.attrs["_FillValue"] = fill
    for key, value in EXTRA_ATTRS.get(spec.name, {}).items():
        ds.attrs[key] = value
    return ds


def _write_table(group: h5py.Group, table: str, n: int, computed: dict[str, np.ndarray],
                 rng: np.random.Generator, content_type: str, coordinates: str | None = None,
                 fill_values: bool = False) -> None:
    """Write every variable of a table, then make delta_time the scale of their first dimension."""
    datasets = []
    for spec in parse_table(table):
        if spec.kind == "computed":
            data = computed[spec.name]
        else:
            data = _generic_values(spec, n, rng)
            if len(spec.args) > 2 and fill_values:  # e.g. ocean tide undefined over land
                data[: int(n * spec.args[2])] = _fill_value(spec.dtype)
        datasets.append(_write_var(group, spec, data, content_type, coordinates, fill_values))
    _attach_scales(group, datasets)


def _attach_scales(group: h5py.Group, datasets: Iterable[h5py.Dataset]) -> None:
    """delta_time is the dimension scale of row dimensions, like the real product; the second
    dimension of (n, 5) and (n, 3) variables uses the root ds_surf_type / ds_xyz scales."""
    scale = group["delta_time"]
    scale.make_scale("delta_time")
    root = group.file
    for ds in datasets:
        if ds.name == scale.name:
            continue
        ds.dims[0].attach_scale(scale)
        if ds.ndim == 2:
            ds.dims[1].attach_scale(root["ds_surf_type" if ds.shape[1] == 5 else "ds_xyz"])


@dataclass(frozen=True)
class _Clock:
    """Pulse, segment and major-frame timing of one granule."""

    pulses: int
    start_delta_time: float

    @property
    def segments(self) -> int:
        return int(np.ceil(self.pulses * GROUND_SPEED / PULSE_RATE_HZ / SEGMENT_LENGTH))

    @property
    def frames(self) -> int:
        return -(-self.pulses // MAJOR_FRAME_PULSES)


def _beam_offset(beam: str) -> float:
    """Cross-track offset (m) of a beam: pairs 3.3 km apart, l/r 90 m apart within a pair."""
    return (int(beam[2]) - 2) * 3300.0 + (-45.0 if beam[3] == "l" else 45.0)


def _simulate_photons(beam: str, clock: _Clock, ident: _Identity, seed: int,
                      rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Photon-rate variables: Poisson photons per pulse, signal near the surface plus background."""
    strong = beam.endswith("l")
    pulse = np.repeat(np.arange(clock.pulses),
                      rng.poisson(STRONG_RATE if strong else WEAK_RATE, clock.pulses))
    n = pulse.size
    t = pulse / PULSE_RATE_HZ
    x = pulse * (GROUND_SPEED / PULSE_RATE_HZ)
    across = _beam_offset(beam) + rng.normal(0, 3, n)
    lat, lon = _ground_track(t, ident, across)
    signal = rng.random(n) < (0.75 if strong else 0.55)
    h = _surface(x, seed) + np.where(signal, rng.normal(0, 0.35, n), rng.uniform(-300, 300, n))
    conf = np.full((n, 5), -1, dtype=np.int8)
    conf[:, 0] = np.where(signal, np.where(rng.random(n) < 0.9, 4, 3), rng.integers(0, 2, n))
    ocean = t < t[-1] / 3 if n else np.zeros(0, bool)
    conf[ocean, 1] = conf[ocean, 0]
    quality = np.digitize(rng.random(n), [0.992, 0.997, 0.9995]).astype(np.int8)
    channels = (1, 16) if strong else (17, 20)
    return {
        "delta_time": clock.start_delta_time + t,
        "h_ph": h.astype(np.float32),
        "lat_ph": lat, "lon_ph": lon,
        "dist_ph_along": (x % SEGMENT_LENGTH + rng.normal(0, 0.5, n)).astype(np.float32),
        "dist_ph_across": across.astype(np.float32),
        "pce_mframe_cnt": (_frame_base(ident) + pulse // MAJOR_FRAME_PULSES).astype(np.uint32),
        "ph_id_channel": rng.integers(channels[0], channels[1] + 1, n).astype(np.uint8),
        "ph_id_count": (1 + (rng.random(n) < 0.1)).astype(np.uint8),
        "ph_id_pulse": (pulse % MAJOR_FRAME_PULSES + 1).astype(np.uint8),
        "quality_ph": quality,
        "signal_conf_ph": conf,
        "weight_ph": np.where(signal, rng.integers(150, 256, n),
                              rng.integers(0, 61, n)).astype(np.uint8),
        "_segment": np.minimum(x // SEGMENT_LENGTH, clock.segments - 1).astype(np.int64),
    }


def _frame_base(ident: _Identity) -> int:
    return 1_000_000 + ident.rgt * 1000 + ident.region * 50


def _segments(ph: dict[str, np.ndarray], beam: str, clock: _Clock, ident: _Identity,
              seed: int) -> dict[str, np.ndarray]:
    """Segment-rate (20 m) variables derived from the photons of one beam."""
    nseg = clock.segments
    counts = np.bincount(ph["_segment"], minlength=nseg)
    beg = np.cumsum(counts) - counts  # 0-based index of each segment's first photon
    ref = np.where(counts > 0, counts // 2, 0)
    mid_t = (np.arange(nseg) + 0.5) * SEGMENT_LENGTH / GROUND_SPEED
    # a segment's time is its reference photon's; empty segments take the segment mid-time
    t = clock.start_delta_time + mid_t
    if ph["delta_time"].size:
        photon_t = ph["delta_time"][np.minimum(beg + ref, ph["delta_time"].size - 1)]
        t = np.where(counts > 0, photon_t, t)
    t = np.maximum.accumulate(t)  # empty segments must not break monotonic time
    lat, lon = _ground_track(t - clock.start_delta_time, ident, _beam_offset(beam))
    seg0 = 1 + (ident.region - 1) * 142_000
    x = np.arange(nseg) * SEGMENT_LENGTH + SEGMENT_LENGTH / 2
    return {
        "delta_time": t,
        "segment_id": (seg0 + np.arange(nseg)).astype(np.int32),
        "segment_ph_cnt": counts.astype(np.int32),
        "ph_index_beg": np.where(counts > 0, beg + 1, 0).astype(np.int64),  # 1-based, 0 = none
        "reference_photon_index": np.where(counts > 0, ref + 1, 0).astype(np.int32),
        "reference_photon_lat": lat, "reference_photon_lon": lon,
        "segment_dist_x": (seg0 - 1 + np.arange(nseg)) * SEGMENT_LENGTH,
        "dem_h": _surface(x, seed).astype(np.float32),
    }


def _write_beam(root: h5py.Group, beam: str, clock: _Clock, ident: _Identity, seed: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One beam group: heights, geolocation, geophys_corr, bckgrd_atlas, signal_find_output.

    Returns the beam's (lat min, lat max, lon min, lon max) and its (surface x low/med/high)
    signal-confidence counts, for the granule summary and quality assessment.
    """
    g = root.create_group(beam)
    strong = beam.endswith("l")
    g.attrs.update({"atlas_beam_type": "strong" if strong else "weak",
                    "atlas_pce": "pce" + beam[2], "atlas_spot_number": str(BEAMS.index(beam) + 1),
                    "groundtrack_id": beam, "sc_orientation": "Forward",
                    "Description": "Each group contains the segments for one Ground Track."})
    ph = _simulate_photons(beam, clock, ident, seed, rng)
    seg = _segments(ph, beam, clock, ident, seed)
    sub = {name: g.create_group(name) for name in CONTENT_TYPE}
    sub["heights"].attrs["data_rate"] = "Data are stored at the photon detection rate."
    _write_table(sub["heights"], HEIGHTS, ph["h_ph"].size, ph, rng, CONTENT_TYPE["heights"],
                 "delta_time lat_ph lon_ph")
    for name, table in (("geolocation", GEOLOCATION), ("geophys_corr", GEOPHYS_CORR)):
        sub[name].attrs["data_rate"] = "Data are stored at the geolocation segment rate."
        _write_table(sub[name], table, clock.segments, seg, rng, CONTENT_TYPE[name],
                     "delta_time reference_photon_lat reference_photon_lon", fill_values=True)
    frame = np.arange(clock.frames)
    bck: dict[str, np.ndarray] = {
        "delta_time": clock.start_delta_time + frame * MAJOR_FRAME_PULSES / PULSE_RATE_HZ,
        "pce_mframe_cnt": (_frame_base(ident) + frame).astype(np.uint32)}
    sub["bckgrd_atlas"].attrs["data_rate"] = "Data are stored at the ATLAS 50 Hz rate."
    _write_table(sub["bckgrd_atlas"], BCKGRD_ATLAS, clock.frames, bck, rng, "auxiliaryInformation")
    for i, surface in enumerate(SURFACES):
        rows = max(1, clock.frames // (5 if i == 0 else 15 * i))
        t = {"delta_time": clock.start_delta_time + np.sort(rng.uniform(0, 1, rows))
             * clock.frames * MAJOR_FRAME_PULSES / PULSE_RATE_HZ}
        _write_table(sub["signal_find_output"].create_group(surface), SIGNAL_FIND, rows, t, rng,
                     "auxiliaryInformation")
    lat, lon = seg["reference_photon_lat"], seg["reference_photon_lon"]
    conf = ph["signal_conf_ph"]
    counts = np.stack([(conf == level).sum(axis=0) for level in (2, 3, 4)], axis=1)
    return np.array([lat.min(), lat.max(), lon.min(), lon.max()]), counts


def write_atl03_like(path: str | Path, *, photons: int = 200_000, seed: int = 0) -> Path:
    """Write an ICESat-2 ATL03-like HDF5 granule.

    Six beam groups (``gt1l`` ... ``gt3r``; the ``l`` beams strong) each hold photon-rate
    ``heights/``, segment-rate ``geolocation/`` and ``geophys_corr/``, 50 Hz ``bckgrd_atlas/`` and
    ``signal_find_output/<surface>/``; beside them ``ancillary_data/`` (compact, contiguous and
    chunked small datasets, fixed-length strings), ``orbit_info/``, ``quality_assessment/``,
    ``atlas_impulse_response/`` and the attribute-only ``METADATA/`` tree: 935 variables.
    Rate variables have unlimited first dimensions, 10,000-row chunks, gzip level 6 (+shuffle on
    integers), CF-style attributes and ``delta_time`` as their dimension scale.

    Parameters
    ----------
    path : str or Path
        File to write (overwritten).
    photons : int
        Total number of photons over the six beams (strong beams get 4x the weak ones).  The
        default gives a ~10 MB file written in about a second; ``photons=7_500_000`` gives a
        ~300 MB benchmark granule.
    seed : int
        Seeds the values *and* the granule identity (track, cycle, region, start time); the same
        seed writes the same file.

    Returns
    -------
    Path
        ``path``.
    """
    if photons < 1000:
        raise ValueError(f"photons={photons} is too small for a six-beam granule; use >= 1000")
    path = Path(path)
    ident = _identity(seed)
    rng = np.random.default_rng(seed)
    start_dt = (ident.start - ATLAS_EPOCH).total_seconds()
    clock = _Clock(int(photons / (3 * (STRONG_RATE + WEAK_RATE))), start_dt)
    # default settings (libver earliest, metadata interleaved with data) like real granules
    with h5py.File(path, "w") as f:
        small_dataset(f, "ds_surf_type", np.arange(1, 6, dtype="i4")).make_scale("ds_surf_type")
        small_dataset(f, "ds_xyz", np.arange(1, 4, dtype="i4")).make_scale("ds_xyz")
        results = {beam: _write_beam(f, beam, clock, ident, seed, rng) for beam in BEAMS}
        bounds = np.stack([b for b, _ in results.values()])
        duration = clock.pulses / PULSE_RATE_HZ
        seg0 = int(f["gt1l/geolocation/segment_id"][0])
        summary = GranuleSummary(
            start=ident.start, end=ident.start + dt.timedelta(seconds=duration),
            start_delta_time=start_dt, end_delta_time=start_dt + duration, rgt=ident.rgt,
            cycle=ident.cycle, region=ident.region, start_segment=seg0,
            end_segment=seg0 + clock.segments - 1,
            lat_bounds=(float(bounds[:, 0].min()), float(bounds[:, 1].max())),
            lon_bounds=(float(bounds[:, 2].min()), float(bounds[:, 3].max())))
        write_ancillary(f, summary, rng)
        write_orbit_info(f, summary)
        write_quality_assessment(f, {beam: c for beam, (_, c) in results.items()})
        write_impulse_response(f, rng)
        write_metadata(f, summary)
        f.attrs.update(root_attributes(summary, path.name))
    return path
