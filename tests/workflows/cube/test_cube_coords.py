"""A cube build's checks on many granules at once: the coordinates read in one batch, the
encodings compared with one key per granule."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.errors import InvalidReferenceError, StaleReferenceError
from h5sidecar.read import load_refs
from h5sidecar.references import GranuleRefs, read_refs
from h5sidecar.sample import write_daily_collection, write_daily_granule
from h5sidecar.workflows import build_cube, index_many
from h5sidecar.workflows.cube._cube_assemble import read_coords
from h5sidecar.workflows.cube._cube_checks import encoding_groups, encodings

COORDS = ["time", "lat", "lon"]


def _collection(root: Path, days: int, fmt: str = "parquet", layout: str = "kerchunk",
                **kw) -> tuple[list[Path], list[GranuleRefs], Path]:
    files = write_daily_collection(root / "nc", days=days, **kw)
    report = index_many(str(root / "nc"), str(root / "sidecars"), executor="serial",
                        format=fmt, layout=layout)
    assert report.ok, report.to_dict()
    ext = "parq" if fmt == "parquet" else "json"
    # lazily held manifests, and every other granule's read eagerly (both kinds are renamed)
    refs = [load_refs(str(root / "sidecars" / f"{f.name}.{ext}")) if k % 2 else
            read_refs(str(root / "sidecars" / f"{f.name}.{ext}"), lazy=False)
            for k, f in enumerate(files)]
    return files, refs, root / "sidecars"


@pytest.mark.parametrize(("fmt", "layout"), [("parquet", "kerchunk"), ("parquet", "compact"),
                                             ("json", "kerchunk")])
def test_batched_coordinates_equal_h5py_for_every_member(tmp_path: Path, fmt: str,
                                                        layout: str) -> None:
    files, refs, _ = _collection(tmp_path, 9, fmt, layout, mixed_packing=True)
    # granules in another order than their files: each result belongs to its own granule
    order = [3, 0, 9, 5, 1, 8, 2, 7, 4, 6]
    got = read_coords([refs[i] for i in order], COORDS, {})
    assert len(got) == len(order)
    for i, values in zip(order, got, strict=True):
        with h5py.File(files[i]) as h:
            for name in COORDS:
                want = h[name][...]
                assert values[name].dtype == want.dtype, (files[i].name, name)
                np.testing.assert_array_equal(values[name], want, err_msg=files[i].name)
    times = [v["time"][0] for v in got]
    assert len(set(times)) == len(order)  # nine days and the repacked one: all distinct


def test_a_member_whose_coordinates_cannot_be_read_is_named(tmp_path: Path) -> None:
    files, _, sidecars = _collection(tmp_path, 6)
    # two granules re-processed after indexing (new values, same names): their references
    # are stale, and the build says which ones
    for k in (1, 4):
        write_daily_granule(files[k], datetime.date(2020, 1, 1 + k), seed=99, hour=6.0)
    with pytest.raises(StaleReferenceError) as info:
        build_cube(str(sidecars), str(tmp_path / "cube.parq"))
    text = str(info.value)
    assert "2 of 6 granules" in text
    for k in range(6):
        assert (files[k].name in text) == (k in (1, 4)), (files[k].name, text)
    assert not (tmp_path / "cube.parq").exists()


def test_a_sidecar_whose_manifest_cannot_be_loaded_is_named(tmp_path: Path) -> None:
    files, _, sidecars = _collection(tmp_path, 4)
    # one sidecar's chunk references are damaged (a partial copy)
    broken = sidecars / f"{files[2].name}.parq" / ".h5sidecar" / "manifests.parq"
    broken.write_bytes(broken.read_bytes()[:100])
    with pytest.raises(InvalidReferenceError) as info:
        build_cube(str(sidecars), str(tmp_path / "cube.parq"))
    text = str(info.value)
    assert files[2].name in text and "1 of 4 granules" in text
    assert all(f.name not in text for k, f in enumerate(files) if k != 2)


def _meta_variant(refs: GranuleRefs, path: str, **changes) -> GranuleRefs:
    arr = refs.arrays[path]
    arrays = dict(refs.arrays)
    arrays[path] = replace(arr, meta=replace(arr.meta, **changes), manifest=arr.manifest)
    return GranuleRefs(refs.source, refs.groups, arrays, refs.skipped, refs.extra, refs.members)


def test_encoding_groups_equal_grouping_by_every_field(tmp_path: Path) -> None:
    """One key per granule groups exactly as comparing every field's canonical text does:
    values equal in Python but not in JSON (1 vs 1.0 vs True) stay apart."""
    _, refs, _ = _collection(tmp_path, 3, mixed_packing=True)
    tas = refs[0].arrays["tas"].meta.attrs
    variants = [
        *refs,
        _meta_variant(refs[0], "tas", attrs={**tas, "scale_factor": 1}),
        _meta_variant(refs[0], "tas", attrs={**tas, "scale_factor": 1.0}),
        _meta_variant(refs[0], "tas", attrs={**tas, "scale_factor": True}),
        _meta_variant(refs[1], "pr", attrs={**refs[1].arrays["pr"].meta.attrs, "units": "mm"}),
        _meta_variant(refs[1], "time", attrs={**refs[1].arrays["time"].meta.attrs,
                                              "units": "hours since 2020-01-01"}),
        refs[2],
    ]
    paths = ["time", "lat", "lon", "tas", "pr"]
    for ignore in (None, {"time": ("units",)}):
        by_field: dict[str, list[int]] = {}
        for i, r in enumerate(variants):
            key = json.dumps(encodings(r, paths, "time", ignore), sort_keys=True)
            by_field.setdefault(key, []).append(i)
        assert encoding_groups(variants, paths, "time", ignore) == list(by_field.values())
    groups = encoding_groups(variants, paths, "time")
    # the three regular granules agree; the repacked one, each scale_factor spelling and each
    # changed unit is its own group (refs[2] joins the first)
    assert groups[0] == [0, 1, 2, 9] and len(groups) == 7


def test_a_build_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    import gc

    files, _, sidecars = _collection(tmp_path, 3)
    assert gc.isenabled()
    build_cube(str(sidecars), str(tmp_path / "cube.parq"))
    assert gc.isenabled()  # paused during the build only
    write_daily_granule(files[1], datetime.date(2020, 1, 2), seed=99, hour=6.0)
    with pytest.raises(StaleReferenceError):
        build_cube(str(sidecars), str(tmp_path / "again.parq"))
    assert gc.isenabled()  # also when the build fails
    gc.disable()
    try:
        with pytest.raises(StaleReferenceError):
            build_cube(str(sidecars), str(tmp_path / "off.parq"))
        assert not gc.isenabled()  # a caller's disabled collector stays disabled
    finally:
        gc.enable()
