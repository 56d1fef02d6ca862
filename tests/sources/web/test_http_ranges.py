"""Ranged answers are checked, not trusted: a web server that answers another range than the
one asked for (and says so, or lies) is sliced when it sent more, refused otherwise, when
indexing and when reading (tests/sources/ranges_server.py misbehaves in each way)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import SourceReadError, StaleReferenceError
from h5sidecar.indexer import index_granule
from h5sidecar.read import read_arrays
from h5sidecar.references import write_json
from h5sidecar.sources.web._content_range import ContentRange, parse_content_range
from h5sidecar.sources.web._http_client import HttpClient
from tests.sources.ranges_server import MODES, RangesServer, ranges_server

pytestmark = pytest.mark.timeout(120)

#: Modes whose answers do not hold the bytes asked for, or do not say which they hold.
REFUSED = ["whole", "shifted", "subset", "label_earlier", "label_later", "short_body",
           "long_body", "chunked_long", "no_content_range", "star_total", "multipart"]  # fmt: skip
NAMES = ["lat", "t"]


def _granule(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        lat = f.create_dataset("lat", data=np.arange(-89, 8103, 2, dtype="<i4"))  # 4096 values
        lat.attrs["units"] = "degrees_north"
        f.create_dataset("t", data=np.linspace(0, 1, 20_000, dtype="<f8").reshape(100, 200),
                         chunks=(25, 50), compression="gzip")  # fmt: skip
    return path


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("EARTHDATA_TOKEN", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with ranges_server(_granule(tmp_path / "g.h5")) as server:
        refs = index_granule(server.url)
        sidecar = tmp_path / "g.h5.json"
        write_json(refs, sidecar)
        yield server, sidecar


def _read(sidecar: Path, names: list[str] = NAMES) -> dict[str, np.ndarray]:
    return read_arrays(sidecar, names)


def _assert_h5py(got: dict[str, np.ndarray], path: Path) -> None:
    with h5py.File(path) as f:
        for name in NAMES:
            np.testing.assert_array_equal(got[name], f[name][()])


def test_modes_are_all_exercised() -> None:
    assert set(REFUSED) | {"honest", "superset", "total_plus_one"} == set(MODES)


@pytest.mark.parametrize("mode", ["honest", "superset"])
def test_a_superset_is_sliced(served: tuple[RangesServer, Path], mode: str) -> None:
    server, sidecar = served
    server.mode = mode
    _assert_h5py(_read(sidecar), server.path)
    opened = xr.open_dataset(sidecar, engine="h5sidecar")
    with xr.open_dataset(server.path, engine="h5netcdf", phony_dims="sort") as want:
        np.testing.assert_array_equal(opened["lat"].values[:3], [-89, -87, -85])
        np.testing.assert_array_equal(opened["lat"].values, want["lat"].values)
    opened.close()


@pytest.mark.parametrize("mode", REFUSED)
def test_a_read_of_another_range_is_refused(served: tuple[RangesServer, Path], mode: str) -> None:
    server, sidecar = served
    server.mode = mode
    for names in (["lat"], NAMES):  # lat alone: uncompressed, a shift would pass unnoticed
        with pytest.raises(SourceReadError, match=r"127\.0\.0\.1") as err:
            _read(sidecar, names)
        assert not isinstance(err.value, StaleReferenceError)
    # refused at once: the fetcher does not retry what a server answers every time
    server.mode = "honest"
    _assert_h5py(_read(sidecar), server.path)


def test_another_total_is_a_changed_source(served: tuple[RangesServer, Path]) -> None:
    server, sidecar = served
    server.mode = "total_plus_one"
    with pytest.raises(StaleReferenceError, match="changed since its sidecar"):
        _read(sidecar)


@pytest.mark.parametrize("mode", REFUSED)
def test_indexing_through_a_misbehaving_server_is_refused(tmp_path: Path, mode: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with ranges_server(_granule(tmp_path / "g.h5")) as server:
        server.mode = mode
        with pytest.raises(SourceReadError, match=r"127\.0\.0\.1"):
            index_granule(server.url)


def test_indexing_through_a_superset_gives_the_same_references(served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    server, sidecar = served
    server.mode = "superset"
    again = tmp_path / "again.h5.json"
    write_json(index_granule(server.url), again)
    import json

    def refs(path: Path) -> dict:
        return json.loads(path.read_text())["refs"]

    assert refs(again) == refs(sidecar)


@pytest.mark.parametrize(("start", "stop"), [(0, 2), (5, 50), (4000, 99_999)])
def test_the_client_returns_exactly_the_range(served, start: int, stop: int) -> None:  # type: ignore[no-untyped-def]
    server, _ = served
    data = server.path.read_bytes()
    client = HttpClient()
    for mode in ("honest", "superset"):
        server.mode = mode
        got = client.get_range(server.url, start, stop)
        assert got.data == data[start:stop] and got.size == len(data), mode
    # one connection kept throughout: a refused body never reaches the next answer
    for mode in REFUSED:
        server.mode = mode
        with pytest.raises(SourceReadError):
            client.get_range(server.url, start, stop)
        server.mode = "honest"
        assert client.get_range(server.url, start, stop).data == data[start:stop], mode


def test_parse_content_range() -> None:
    assert parse_content_range("bytes 0-9/10") == ContentRange(0, 10, 10)
    assert parse_content_range(" bytes 5-5/* ") == ContentRange(5, 6, None)
    for bad in (None, "", "bytes 5-4/10", "bytes 0-10/10", "bytes */10", "items 0-1/2",
                "bytes 0-1/2, 4-5/6", "bytes 0-\u00b9/10", "bytes " + "9" * 5000 + "-1/2"):
        assert parse_content_range(bad) is None, bad
