"""Zarr clients over HTTP against the gateway: zarr-python 3.1 (fsspec HTTPFileSystem) and
xarray read the v2, v3 and virtually sharded views, and every value equals what h5py reads from
the same file.  Sources live on the moto S3 server; DEST is a local folder or an S3 prefix.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.core.metadata import ArrayV3Metadata
from zarr.errors import ZarrUserWarning

from tests.gateway._http import ATL03, SMALL, Corpus, gateway, http_corpus, served, settled

__all__ = ["http_corpus", "served"]  # fixtures used below

#: Groups of the ATL03-like granule compared array by array (photon, segment, 50 Hz rates).
ATL03_GROUPS = ("gt1l/heights", "gt1l/geolocation", "gt2r/bckgrd_atlas", "orbit_info")


@contextmanager
def v3_codec_warnings() -> Iterator[None]:
    """zarr warns that numcodecs codecs (zlib, shuffle) are outside the v3 spec: expected."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Numcodecs codecs are not in the Zarr version 3",
                                ZarrUserWarning)  # fmt: skip
        yield


def array(root: zarr.Group, path: str) -> zarr.Array:
    """``root[path]``, which must be an array (narrows zarr's Array | Group for type checkers)."""
    node = root[path]
    assert isinstance(node, zarr.Array), path
    return node


def group(root: zarr.Group, path: str) -> zarr.Group:
    node = root[path]
    assert isinstance(node, zarr.Group), path
    return node


def datasets(f: h5py.File, groups: tuple[str, ...] | None = None) -> list[str]:
    names: list[str] = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    if groups is not None:
        names = [n for n in names if n.rpartition("/")[0] in groups]
    return names


def assert_same(root: zarr.Group, f: h5py.File, names: list[str],
                skip: frozenset[str] = frozenset()) -> None:  # fmt: skip
    """Every array in ``names`` reads the same values (and dtype up to byte order) as h5py."""
    checked = 0
    for name in names:
        if name in skip:
            continue
        expected = f[name][()]
        if isinstance(expected, bytes | np.bytes_) or getattr(expected, "dtype", None) == object:
            continue  # strings: compared by the xarray test below
        got = np.asarray(array(root, name)[...])
        # Zarr v3 hands big-endian data back in native order: same values, same type
        assert got.dtype.newbyteorder("=") == expected.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(got, expected, err_msg=name)
        checked += 1
    assert checked >= max(1, len(names) // 2), "too few arrays compared"


def requests(app, route: str, status: str | None = None) -> float:  # type: ignore[no-untyped-def]
    m = settled(app)
    if status is None:
        return sum(m.value("h5sidecar_http_requests_total", route=route, method="GET",
                           status=s) for s in ("200", "206", "404"))  # fmt: skip
    return m.value("h5sidecar_http_requests_total", route=route, method="GET", status=status)


def test_zarr_v2_view_equals_h5py(served, http_corpus: Corpus) -> None:
    url, _ = served
    root = zarr.open_group(f"{url}/zarr/{ATL03}/", mode="r")
    with h5py.File(http_corpus.local[ATL03]) as f:
        names = datasets(f, ATL03_GROUPS)
        assert any(f[n].chunks and f[n].shape[0] > f[n].chunks[0] for n in names)  # multi-chunk
        assert_same(root, f, names)


def test_zarr_v2_every_quirk_of_the_small_granule(served, http_corpus: Corpus) -> None:
    url, _ = served
    root = zarr.open_group(f"{url}/zarr/{SMALL}/", mode="r")
    with h5py.File(http_corpus.local[SMALL]) as f:
        names = datasets(f)
        assert_same(root, f, names)
        # big-endian structured records decode right through the v2 view
        np.testing.assert_array_equal(array(root, "gt1l/geolocation/records")[...],
                                      f["gt1l/geolocation/records"][...])  # fmt: skip
        # unallocated chunks of 'sparse' read as the HDF5 fill value
        assert (np.asarray(array(root, "ancillary_data/sparse")[5:, 5:]) == -1.0).all()


def test_xarray_open_zarr_group_over_http(served, http_corpus: Corpus) -> None:
    url, _ = served
    ds = xr.open_zarr(f"{url}/zarr/{ATL03}/", group="gt1l/heights", mask_and_scale=False,
                      decode_times=False)  # fmt: skip
    with h5py.File(http_corpus.local[ATL03]) as f:
        g = f["gt1l/heights"]
        assert set(ds.variables) == {n for n in g if isinstance(g[n], h5py.Dataset)}
        for name, var in ds.variables.items():
            np.testing.assert_array_equal(var.values, g[name][...], err_msg=name)
        assert ds["h_ph"].attrs["units"] == g["h_ph"].attrs["units"]
        assert ds["h_ph"].dims == ("delta_time",)


def test_xarray_decodes_cf_like_h5netcdf(served, http_corpus: Corpus) -> None:
    url, _ = served
    got = xr.open_zarr(f"{url}/zarr/{ATL03}/", group="gt1l/geolocation")
    want = xr.open_dataset(http_corpus.local[ATL03], engine="h5netcdf", group="gt1l/geolocation",
                           phony_dims="access")  # fmt: skip
    for name in ("segment_id", "reference_photon_lat", "delta_time", "segment_length"):
        xr.testing.assert_equal(got[name].reset_coords(drop=True).variable,
                                want[name].reset_coords(drop=True).variable)  # fmt: skip


def test_zarr_v3_view_equals_h5py(served, http_corpus: Corpus) -> None:
    url, _ = served
    with v3_codec_warnings(), h5py.File(http_corpus.local[ATL03]) as f:
        root = zarr.open_group(f"{url}/zarr3/{ATL03}/", mode="r", zarr_format=3)
        assert root.metadata.zarr_format == 3
        assert_same(root, f, datasets(f, ATL03_GROUPS))


def test_zarr_v3_views_of_the_small_granule(served, http_corpus: Corpus) -> None:
    url, _ = served
    with v3_codec_warnings(), h5py.File(http_corpus.local[SMALL]) as f:
        names = datasets(f)
        for view in ("zarr3", "zarr3-shard/1", "zarr3-shard/2", "zarr3-shard/3", "zarr3-shard/64"):
            root = zarr.open_group(f"{url}/{view}/{SMALL}/", mode="r", zarr_format=3)
            # v3 cannot express big-endian fields of a structured type: left out of the view
            assert "records" not in group(root, "gt1l/geolocation")
            assert_same(root, f, names, skip=frozenset({"gt1l/geolocation/records"}))


def test_shard_view_metadata_and_query_form(served) -> None:
    url, _ = served
    with v3_codec_warnings():
        a = zarr.open_array(f"{url}/zarr3-shard/4/{SMALL}/gt1l/heights/h_ph", mode="r")
        from zarr.codecs import ShardingCodec

        assert isinstance(a.metadata, ArrayV3Metadata)
        codec = a.metadata.codecs[0]
        assert isinstance(codec, ShardingCodec)
        assert codec.chunk_shape == (1000,) and a.shards == (4000,)
        # K larger than the chunk rows is capped: one shard holds the whole array
        b = zarr.open_array(f"{url}/zarr3-shard/1024/{SMALL}/gt1l/heights/h_ph", mode="r")
        assert b.shards == (5000,)
    import httpx

    path_form = httpx.get(f"{url}/zarr3-shard/4/{SMALL}/gt1l/heights/h_ph/zarr.json").json()
    query_form = httpx.get(f"{url}/zarr3/{SMALL}/gt1l/heights/h_ph/zarr.json?shard=4").json()
    assert path_form == query_form
    shard = httpx.get(f"{url}/zarr3/{SMALL}/gt1l/heights/h_ph/0?shard=4")
    assert shard.content == httpx.get(f"{url}/zarr3-shard/4/{SMALL}/gt1l/heights/h_ph/0").content


def test_sharded_whole_read_needs_fewer_requests(http_corpus: Corpus) -> None:
    with gateway(http_corpus.dest, http_corpus.options) as (url, app), \
            h5py.File(http_corpus.local[SMALL]) as f, v3_codec_warnings():  # fmt: skip
        want = f["gt1l/heights/quality_ph"][...]  # 8 chunks of 700
        v2 = zarr.open_array(f"{url}/zarr/{SMALL}/gt1l/heights/quality_ph", mode="r")
        before = requests(app, "zarr")
        np.testing.assert_array_equal(v2[...], want)
        assert requests(app, "zarr") - before == 8  # one request per chunk
        sh = zarr.open_array(f"{url}/zarr3-shard/8/{SMALL}/gt1l/heights/quality_ph", mode="r")
        before = requests(app, "zarr3-shard")
        np.testing.assert_array_equal(sh[...], want)
        assert requests(app, "zarr3-shard") - before == 1  # one shard, fetched whole
        # one coalesced upstream read built it (the chunks are adjacent in the file)
        m = app.state.gateway.metrics
        assert m.total("h5sidecar_upstream_requests_total") <= 1 + 8


def test_partial_shard_read_uses_ranges(http_corpus: Corpus) -> None:
    with gateway(http_corpus.dest, http_corpus.options) as (url, app), \
            h5py.File(http_corpus.local[SMALL]) as f, v3_codec_warnings():  # fmt: skip
        sh = zarr.open_array(f"{url}/zarr3-shard/4/{SMALL}/gt1l/heights/h_ph", mode="r")
        before_206 = requests(app, "zarr3-shard", "206")
        before_200 = requests(app, "zarr3-shard", "200")
        np.testing.assert_array_equal(sh[1200:1300], f["gt1l/heights/h_ph"][1200:1300])
        # zarr read the shard index by suffix range, then the one inner chunk it needs
        assert requests(app, "zarr3-shard", "206") - before_206 == 2
        assert requests(app, "zarr3-shard", "200") - before_200 == 0
        sp = zarr.open_array(f"{url}/zarr3-shard/2/{SMALL}/ancillary_data/sparse", mode="r")
        np.testing.assert_array_equal(sp[3:7, 2:8], f["ancillary_data/sparse"][3:7, 2:8])


def test_xarray_over_the_sharded_view(served, http_corpus: Corpus) -> None:
    url, _ = served
    with v3_codec_warnings():
        ds = xr.open_zarr(f"{url}/zarr3-shard/8/{ATL03}/", group="gt1l/heights",
                          zarr_format=3, mask_and_scale=False, decode_times=False)  # fmt: skip
        with h5py.File(http_corpus.local[ATL03]) as f:
            for name, var in ds.variables.items():
                np.testing.assert_array_equal(var.values, f["gt1l/heights"][name][...],
                                              err_msg=name)  # fmt: skip


@pytest.mark.parametrize("view", ["zarr", "zarr3-shard/2"])
def test_dest_on_s3(http_corpus: Corpus, view: str) -> None:
    with gateway(http_corpus.dest_s3, http_corpus.options) as (url, _), v3_codec_warnings(), \
            h5py.File(http_corpus.local[SMALL]) as f:  # fmt: skip
        root = zarr.open_group(f"{url}/{view}/{SMALL}/", mode="r")
        skip = frozenset({"gt1l/geolocation/records"} if view != "zarr" else ())
        assert_same(root, f, datasets(f), skip=skip)
