"""Variable tables of the ATL03-like sample granule (names, dtypes, units, value generators).

Each table line is ``names : dtype units kind args...``; ``kind`` is ``computed`` (values built
from the simulated ground track and photons) or a generator of
:func:`h5sidecar.sample._atl03._generic_values`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
SURFACES = ("land", "ocean", "sea_ice", "land_ice", "inland_water")


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())

UNITS = {"t": "seconds since 2018-01-01", "m": "meters", "s": "seconds", "deg_n": "degrees_north",
         "deg_e": "degrees_east", "deg": "degrees", "rad": "radians", "hz": "counts/second",
         "j": "joules", "m/s": "meters/second", "counts": "counts", "1": "1"}

# Variable tables (see the module docstring).
HEIGHTS = """
delta_time : f8 t computed
h_ph dist_ph_across dist_ph_along : f4 m computed
lat_ph : f8 deg_n computed
lon_ph : f8 deg_e computed
pce_mframe_cnt : u4 counts computed
ph_id_channel ph_id_count ph_id_pulse weight_ph : u1 1 computed
quality_ph signal_conf_ph : i1 1 computed
"""
GEOLOCATION = """
delta_time : f8 t computed
segment_id reference_photon_index segment_ph_cnt : i4 1 computed
ph_index_beg : i8 1 computed
reference_photon_lat : f8 deg_n computed
reference_photon_lon : f8 deg_e computed
segment_dist_x : f8 m computed
surf_type : i1 1 surf
velocity_sc : f4 m/s xyz
segment_length : f8 m noise 20 0.01
altitude_sc : f8 m smooth 496000 3000
bounce_time_offset : f4 s smooth 0.0033 5e-6
full_sat_fract near_sat_fract : f4 1 step 0 0.02
neutat_delay_derivative : f4 1 smooth -0.00023 1e-5
neutat_delay_total : f4 m smooth 2.3 0.05
neutat_ht : f4 m smooth 500 300
pitch roll yaw : f4 deg smooth 0 0.3
podppd_flag : i1 1 flag 0.01
range_bias_corr : f4 m step -0.05 0.05
ref_azimuth : f4 rad smooth 0 3
ref_elev : f4 rad smooth 1.57 0.01
sigma_across sigma_along : f4 m noise 5 0.5
sigma_h : f4 m noise 0.5 0.05
sigma_lat sigma_lon : f4 deg noise 5e-5 5e-6
solar_azimuth : f4 deg smooth 100 60
solar_elevation : f4 deg smooth 10 30
tx_pulse_energy : f4 j noise 0.00014 2e-6
tx_pulse_skew_est : f4 s noise 1e-11 1e-12
tx_pulse_width_lower tx_pulse_width_upper : f4 s noise 7e-10 1e-11
knn : i2 1 int 0 30
"""
GEOPHYS_CORR = """
delta_time : f8 t computed
dem_h : f4 m computed
dem_flag : i1 1 step 0 3
dac : f4 m smooth 0 0.05 0.3
tide_ocean : f4 m smooth 0 0.5 0.3
geoid : f4 m smooth 20 15
geoid_free2mean : f4 m smooth -0.1 0.05
tide_earth tide_earth_free2mean tide_equilibrium : f4 m smooth 0 0.1
tide_load tide_oc_pole tide_pole : f4 m smooth 0 0.1
"""
BCKGRD_ATLAS = """
delta_time : f8 t computed
pce_mframe_cnt : u4 counts computed
bckgrd_counts : i4 counts int 100 400
bckgrd_counts_reduced : i4 counts int 80 300
bckgrd_hist_top : f4 m smooth 600 100
bckgrd_int_height bckgrd_int_height_reduced : f4 m noise 700 5
bckgrd_rate : f4 hz smooth 1500000 1000000
tlm_height_band1 tlm_height_band2 : f4 m step 100 700
tlm_top_band1 tlm_top_band2 : f4 m smooth 800 200
"""
SIGNAL_FIND = """
delta_time : f8 t computed
bckgrd_mean : f4 hz noise 1000000 200000
bckgrd_sigma : f4 hz noise 100000 20000
t_pc_delta : f4 s noise 1e-4 1e-5
z_pc_delta : f4 m noise 15 2
"""
# Signal-finding parameters (scalars, compact layout) under ancillary_data/<surface>/.
SIGNAL_FIND_PARAMS = _words(
    "addpad_flag alpha_inc alpha_max delta_t_gap_min delta_t_lin_fit delta_t_max delta_t_min "
    "delta_z_bg delta_zmax2 delta_zmin e_a e_linfit_edit e_linfit_slant e_m e_m_mult htspanmin "
    "lslant_flag min_fit_time_fact min_full_sat min_near_sat min_sat_h_bins min_scan_time "
    "nbin_min nphot_min nslw nslw_v out_edit_flag pc_bckgrd_flag r r2 sig_find_t_inc snrlow "
    "snrmed t_gap_big")
ALTIMETRY_PARAMS = _words(
    "atlas_pulse_rate pulses_per_mframe range_window_min range_window_max sf_time_bin "
    "sf_height_bin geoseg_length ph_uncorrelated_error dead_time_default min_ph_per_seg "
    "tof_bias tep_window_start tep_window_end velocity_tolerance bounce_time_tol "
    "spot_separation")
CONTENT_TYPE = {"heights": "physicalMeasurement", "geolocation": "referenceInformation",
                "geophys_corr": "modelResult", "bckgrd_atlas": "auxiliaryInformation",
                "signal_find_output": "auxiliaryInformation"}
EXTRA_ATTRS: dict[str, dict[str, Any]] = {
    "lat_ph": {"standard_name": "latitude", "valid_min": -90.0, "valid_max": 90.0},
    "lon_ph": {"standard_name": "longitude", "valid_min": -180.0, "valid_max": 180.0},
    "reference_photon_lat": {"standard_name": "latitude", "valid_min": -90.0, "valid_max": 90.0},
    "reference_photon_lon": {"standard_name": "longitude", "valid_min": -180.0,
                             "valid_max": 180.0},
    "delta_time": {"standard_name": "time", "calendar": "standard"},
    "h_ph": {"standard_name": "height"},
    "signal_conf_ph": {"valid_min": np.int8(-2), "valid_max": np.int8(4),
                       "flag_values": np.arange(-2, 5, dtype=np.int8),
                       "flag_meanings": "possible_tep not_considered noise buffer low medium high"},
    "quality_ph": {"valid_min": np.int8(0), "valid_max": np.int8(3)},
}


@dataclass(frozen=True)
class Spec:
    """One variable of a table: name, dtype, units and how its values are made."""

    name: str
    dtype: np.dtype[Any]
    units: str
    kind: str
    args: tuple[float, ...]


def parse_table(table: str) -> list[Spec]:
    """Expand a variable table into one :class:`Spec` per variable."""
    specs = []
    for line in table.strip().splitlines():
        names, rest = line.split(":")
        dtype, units, kind, *args = rest.split()
        specs += [Spec(n, np.dtype(dtype), UNITS[units], kind, tuple(map(float, args)))
                  for n in names.split()]
    return specs




# Attribute-only METADATA tree (ISO 19115-like, as in the real product): group -> attributes,
# nested groups are dict values that are themselves dicts of dicts.
METADATA_TREE: dict[str, Any] = {
    "AcquisitionInformation": {
        "lidar": {"description": "ATLAS", "identifier": "ATLAS", "type": "Photon Counting Lidar"},
        "lidarDocument": {"edition": "Pre-Launch", "publicationDate": "12/31/2015",
                          "title": "A document describing the ATLAS instrument"},
        "platform": {"description": "ICESat-2", "identifier": "ICESat-2", "type": "Spacecraft"},
        "platformDocument": {"edition": "Pre-Launch", "publicationDate": "12/31/2015",
                             "title": "A document describing the ICESat-2 spacecraft"},
    },
    "DataQuality": {
        "CompletenessOmission": {"evaluationMethodType": "directInternal",
                                 "measureDescription": "Percent of missing data",
                                 "nameOfMeasure": "PercentMissingData", "value": "NaN"},
        "DomainConsistency": {"evaluationMethodType": "directInternal",
                              "measureDescription": "Consistency within the granule",
                              "nameOfMeasure": "PercentInconsistentData", "value": "NaN"},
    },
    "DatasetIdentification": {"abstract": "Geolocated photon data (simulated sample).",
                              "characterSet": "utf8", "language": "eng", "originatorOrganization":
                              "NASA GSFC", "shortName": "ATL03", "spatialRepresentationType":
                              "along-track", "status": "onGoing", "topicCategory": "geoscientific"},
    "Extent": {},  # filled per granule (bounds and times)
    "Lineage": {f"ANC{i:02d}": {"description": f"Ancillary input {i}", "fileName": f"anc{i:02d}",
                                "shortName": f"ANC{i:02d}", "version": "1"} for i in range(1, 13)}
    | {"ATL02": {"description": "ATLAS level 2 telemetry", "shortName": "ATL02"},
       "Control": {"description": "Control file", "shortName": "CNTL"}},
    "ProcessStep": {name: {"processDescription": f"{name} generation", "softwareVersion": "6.0",
                           "identifier": name.lower()}
                    for name in ("Browse", "Metadata", "PGE", "QA")},
    "ProductSpecificationDocument": {"ShortName": "ATL03", "edition": "v6",
                                     "title": "ICESat-2 ATL03 data dictionary"},
    "QADatasetIdentification": {"abstract": "QA summary", "creationDate": "2023-01-01"},
    "SeriesIdentification": {"identifier": "ATL03", "maintenanceAndUpdateFrequency": "asNeeded",
                             "shortName": "ATL03", "title": "ATLAS/ICESat-2 L2A Global Geolocated "
                             "Photon Data"},
}
