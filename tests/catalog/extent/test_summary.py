"""Coordinate summaries recorded at index time: their values are h5py's (fill values masked),
the catalog locates gridded granules from them without reading a value, and what it derives is
exactly what it derives from the values themselves (the path taken without a summary)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar.catalog import granule_extent
from h5sidecar.references import read_refs


def _grid(path: Path, lon: np.ndarray, *, fill: bool = True) -> Path:
    with h5py.File(path, "w") as f:
        lat = np.linspace(-30.0, 40.0, 8)
        if fill:
            lat[0] = -999.0  # a fill value: never part of the footprint
        f["lat"] = lat
        f["lat"].attrs["units"] = "degrees_north"
        f["lat"].attrs["_FillValue"] = -999.0
        f["lon"] = lon
        f["lon"].attrs["units"] = "degrees_east"
        f["time"] = np.array([10.0, 11.5, 12.0, 13.0])
        f["time"].attrs["units"] = "days since 2001-01-01"
        for name in ("lat", "lon", "time"):
            f[name].make_scale(name)
        f["v"] = np.zeros((4, 8, lon.size), "f4")
        for i, name in enumerate(("time", "lat", "lon")):
            f["v"].dims[i].attach_scale(f[name])
    return path


def _indexed(tmp_path: Path, src: Path) -> Path:
    from h5sidecar.workflows import index_many

    dest = tmp_path / "dest"
    assert index_many(str(src), str(dest), format="json", executor="serial").ok
    return dest / f"{src.name}.json"


@pytest.mark.parametrize("lon", [
    np.linspace(165.0, 195.0, 7),          # across the antimeridian in 0..360
    np.linspace(-10.0, 20.0, 7),
    np.arange(0.0, 360.0, 10.0),           # all around: global
], ids=["antimeridian", "plain", "global"])
def test_summary_gives_the_extent_of_the_values(tmp_path: Path, lon: np.ndarray,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    src = _grid(tmp_path / "g.h5", lon)
    refs = read_refs(str(_indexed(tmp_path, src)))
    summary = refs.extra["coordinate_summary"]
    with h5py.File(src) as f:
        lat = f["lat"][()]
        lat = lat[lat != -999.0]
        assert (summary["lat"]["min"], summary["lat"]["max"]) == (lat.min(), lat.max())
        assert summary["lon"]["finite"] == f["lon"].size
        assert summary["time"]["ends"] == [f["time"][0], f["time"][-1]]
    # without the summary: the values are read (today's path); with it: nothing is read
    read = granule_extent(dataclasses.replace(refs, extra={
        k: v for k, v in refs.extra.items() if k != "coordinate_summary"}))

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("values were read")

    monkeypatch.setattr("h5sidecar.catalog.extent._granule_extent._Reader", no_read)
    recorded = granule_extent(refs)
    assert recorded == read
    assert recorded.footprint is not None and recorded.start is not None
    w, s, e, n = recorded.footprint.bbox
    assert s == pytest.approx(-20.0) and n == pytest.approx(40.0)
    if lon[0] > 100:
        assert w > e  # crosses the antimeridian


def test_packed_coordinates_are_not_summarised(tmp_path: Path) -> None:
    src = _grid(tmp_path / "g.h5", np.linspace(0.0, 10.0, 5))
    with h5py.File(src, "a") as f:
        f["lat"].attrs["scale_factor"] = 1.0
    refs = read_refs(str(_indexed(tmp_path, src)))
    assert "lat" not in refs.extra["coordinate_summary"]
    assert granule_extent(refs).footprint is not None  # read from the values instead


def test_a_granule_read_over_s3_is_summarised_by_the_catalog_not_the_indexer(
    tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, object]
) -> None:
    """Over a network the indexer records no summary (its values would be fetched one variable
    at a time, outside the metadata prefetch): the catalog reads them, to the same extent."""
    from h5sidecar.indexer import index_granule

    src = _grid(tmp_path / "g.h5", np.linspace(-10.0, 20.0, 7))
    local = read_refs(str(_indexed(tmp_path, src)))
    url = f"s3://{s3_bucket}/g.h5"
    s3.put(str(src), url)
    remote = index_granule(url, storage_options=s3_storage_options)
    assert "coordinate_summary" in local.extra
    assert "coordinate_summary" not in remote.extra
    got = granule_extent(remote, storage_options=s3_storage_options)
    want = granule_extent(local)
    assert (got.footprint.bbox, got.start, got.end) == (want.footprint.bbox, want.start, want.end)


def test_summaries_take_the_attributes_already_decoded(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The packing and fill value attributes a summary needs are those the indexer decoded
    from the metadata bytes, not asked of HDF5 again (a search of the attribute storage per
    name and variable); the summary is the same."""
    from h5sidecar.indexer import index_granule

    src = _grid(tmp_path / "g.h5", np.linspace(-10.0, 20.0, 7))
    asked: list[str] = []
    contains = h5py.AttributeManager.__contains__

    def counting(self: h5py.AttributeManager, name: str) -> bool:
        asked.append(name)
        return contains(self, name)

    monkeypatch.setattr(h5py.AttributeManager, "__contains__", counting)
    summary = index_granule(str(src)).extra["coordinate_summary"]
    monkeypatch.undo()
    assert not {"scale_factor", "add_offset", "_Unsigned", "_FillValue"} & set(asked)
    with h5py.File(src) as f:
        lat = f["lat"][()]
        lat = lat[lat != f["lat"].attrs["_FillValue"]]
        assert (summary["lat"]["min"], summary["lat"]["max"]) == (lat.min(), lat.max())
        assert summary["lat"]["finite"] == lat.size
        assert summary["time"]["ends"] == [f["time"][0], f["time"][-1]]


@pytest.mark.parametrize("lon", [
    np.array([-180.0, 179.99999999999997, -0.0, 0.0, 1e-300, -1e-300, 5.0]),
    np.linspace(-180.0, 180.0, 1001)[:-1],   # in range: the remainder is skipped
    np.linspace(-200.0, 400.0, 997),         # out of range: it is not
    np.array([42.0]),
], ids=["edges", "in-range", "out-of-range", "one"])
def test_longitude_arcs_are_the_plain_computations(lon: np.ndarray) -> None:
    """The summary's shortcuts (no remainder for longitudes already in range, np.unique's
    steps without its general case) give exactly what the plain expressions give."""
    from h5sidecar.indexer import longitude_arc
    from h5sidecar.indexer._summary import _wrapped

    plain = ((lon + 180.0) % 360.0) - 180.0
    wrapped = _wrapped(lon)
    assert wrapped.tobytes() == plain.tobytes()  # signed zeros included
    u = np.unique(plain)
    if u.size == 1:
        want = (float(u[0]), float(u[0]))
    else:
        gaps = np.diff(np.r_[u, u[0] + 360.0])
        i = int(np.argmax(gaps))
        want = ((-180.0, 180.0) if gaps[i] <= 2 * float(np.median(gaps))
                else (float(u[(i + 1) % u.size]), float(u[i])))  # fmt: skip
    assert longitude_arc(wrapped) == want
