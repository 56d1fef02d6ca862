"""An append to a Parquet cube reads its coordinates without decoding every array's chunk rows:
an open of a few named arrays of a cube stays lazy (its extras are packed), and the all-arrays
manifests file is cut down to those arrays' rows before it is decoded.  Values read that way
equal h5py's and xarray + h5netcdf's on the files."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.read import read_arrays
from h5sidecar.references import read_refs
from h5sidecar.references.parquet_sidecar import _kerchunk_parquet, _manifests_file
from h5sidecar.workflows import build_cube
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import _days, _index, _read_everywhere


def _decoded_rows(monkeypatch: pytest.MonkeyPatch, size: int) -> list[set[str]]:
    """The arrays each decode of a manifests file of ``size`` bytes was for (``metas``), with
    the arrays of the rows it kept."""
    seen: list[set[str]] = []
    sizes: list[int] = []
    decode = _manifests_file.decode_manifests
    only = _manifests_file._only

    def watched(data: bytes, metas, others=()):  # type: ignore[no-untyped-def]
        sizes.append(len(data))
        if len(data) == size:
            seen.append(set(metas))
        return decode(data, metas, others)

    def kept(table, metas):  # type: ignore[no-untyped-def]
        out = only(table, metas)
        if sizes[-1] == size:
            seen.append(set(out.column("array").combine_chunks().dictionary_decode()
                            .to_pylist()))
        return out

    monkeypatch.setattr(_manifests_file, "_only", kept)
    monkeypatch.setattr("h5sidecar.references.parquet_sidecar._parquet_lazy.decode_manifests",
                        watched)
    return seen


def _built(tmp_path: Path, days: int) -> tuple[list[Path], Path, Path]:
    """``days`` daily granules indexed into DEST and built into a Parquet cube."""
    files = _days(tmp_path / "nc", 0, days)
    dest = _index(tmp_path / "nc", tmp_path / "dest")
    cube = tmp_path / "cube.parq"
    build_cube(str(dest), str(cube))
    return files, dest, cube


def _bulk_size(cube: Path) -> int:
    return (cube / _manifests_file.MANIFESTS_FILE).stat().st_size


def test_an_open_of_a_cubes_coordinate_is_lazy_and_reads_its_rows_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files, _, cube = _built(tmp_path, 4)
    whole = read_arrays(str(cube), ["time", "lat", "lon"])

    def eager(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("read every array now")

    monkeypatch.setattr(_kerchunk_parquet, "read_parquet_parts", eager)
    monkeypatch.setattr("h5sidecar.references._io.read_parquet_parts", eager)
    seen = _decoded_rows(monkeypatch, _bulk_size(cube))
    alone = read_refs(str(cube), arrays=["time", "lat", "lon"])
    assert set(alone.arrays) == {"time", "lat", "lon"}
    got = read_arrays(alone, ["time", "lat", "lon"])
    assert seen == [{"time", "lat", "lon"}] * 2  # for them, and their rows alone kept
    for name in ("time", "lat", "lon"):
        np.testing.assert_array_equal(got[name], whole[name])
    assert got["time"].size == len(files)
    with h5py.File(files[0]) as f:  # the shared coordinates are the granules' own (raw)
        np.testing.assert_array_equal(got["lat"], f["lat"][...])
        np.testing.assert_array_equal(got["lon"], f["lon"][...])
    times = []
    for path in files:
        with h5py.File(path) as f:
            times.append(f["time"][...])
    np.testing.assert_array_equal(got["time"], np.concatenate(times))


def test_an_append_decodes_only_the_coordinates_rows_and_reads_like_h5py(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files, dest, cube = _built(tmp_path, 3)
    new = _days(tmp_path / "nc", 3, 2)
    _index(tmp_path / "nc", dest)
    seen = _decoded_rows(monkeypatch, _bulk_size(cube))
    result = build_cube(str(dest), str(cube), mode="append")
    assert result.action == "appended" and result.written == "tail"
    # the cube's own manifests were decoded for its coordinates alone (tas and pr not at all)
    assert seen and all(rows <= {"time", "lat", "lon"} for rows in seen), seen
    assert len(seen) == 2  # one decode, its rows cut down
    assert len(result.cubes[0].granules) == 5
    assert list(result.cubes[0].granules) == [str(f) for f in [*files, *new]]
    assert result.cubes[0].granules[-1] == str(new[-1])
    monkeypatch.undo()
    _read_everywhere(str(cube), [*files, *new])
    _assert_raw_matches_h5py(str(cube), [*files, *new])
