"""Fixtures of the catalog tests: sample granules indexed into JSON and Parquet DEST folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

#: Photons per sample granule: enough for two 10,000-row chunks on strong beams, quick to index.
PHOTONS = 30_000


@dataclass(frozen=True)
class Indexed:
    """Sample granules (what h5py reads) and the DEST folders the batch workflow wrote."""

    src: Path
    atl03: tuple[Path, ...]
    netcdf: Path
    dest_parquet: Path  # every granule, Parquet sidecars
    dest_json: Path  # the first ATL03 granule, JSON sidecar


@pytest.fixture(scope="session")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Indexed:
    """Two ATL03-like granules and a CF netCDF-4 file, indexed once per session."""
    from h5sidecar.sample import granule_name, write_atl03_like, write_netcdf_like
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("catalog")
    src = root / "src"
    src.mkdir()
    atl03 = tuple(write_atl03_like(src / granule_name(seed), photons=PHOTONS, seed=seed)
                  for seed in (0, 5))
    netcdf = write_netcdf_like(src / "gridded_sample.nc")
    dest_parquet = root / "dest-parquet"
    report = index_many(str(src), str(dest_parquet), format="parquet", executor="serial")
    assert report.ok, report.to_dict()
    dest_json = root / "dest-json"
    report = index_many(str(atl03[0]), str(dest_json), format="json", executor="serial")
    assert report.ok, report.to_dict()
    return Indexed(src, atl03, netcdf, dest_parquet, dest_json)


@pytest.fixture(scope="session")
def catalog_dir(indexed: Indexed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog with the Parquet collection (track footprints read: polygons that follow the
    tracks) and the JSON collection (the default: boxes of what was recorded)."""
    from h5sidecar.catalog import build_catalog

    stac = tmp_path_factory.mktemp("stac")
    res = build_catalog(str(indexed.dest_parquet), stac, collection_id="samples",
                        gateway_url="http://127.0.0.1:9/", track_footprints="read")
    assert res.ok, res.errors
    res = build_catalog(str(indexed.dest_json), stac, collection_id="samples-json")
    assert res.ok, res.errors
    return stac
