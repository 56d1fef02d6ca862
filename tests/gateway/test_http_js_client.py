"""A JavaScript Zarr v3 client reads the gateway: zarrita (node) over the v3 and sharded views.

The gateway runs under uvicorn on 127.0.0.1 over a DEST folder that ``index_many`` built from two
sample granules (the ATL03-like sample and the small multi-feature granule).  ``js/read.mjs``
opens each array as Zarr v3 with zarrita -- so zarrita itself parses ``zarr.json`` and decodes
the codecs the gateway declares (``bytes``, ``numcodecs.shuffle``, ``numcodecs.zlib``,
``sharding_indexed`` + ``crc32c``) -- and prints the values as JSON; every array is compared
with what h5py reads from the same file.

zarrita is installed with npm (the exact version pinned in ``js/package.json``) into pytest's
cache directory, once.  Skipped, with a message, only when node/npm are missing or the npm
registry cannot be reached (``scripts/ensure-test-tools.sh`` installs node and npm).
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest

from tests._granules import write_small_granule
from tests.gateway._http import gateway

JS_DIR = Path(__file__).parent / "js"
ATL03 = "ATL03_20190329130645_00010301_006_01.h5"
SMALL = "small.h5"

#: Arrays read through the plain v3 view, per granule: floats and ints, gzip with and without
#: shuffle, big-endian, 2-D, several chunks with a partial last one, partially unallocated.
V3_ARRAYS = {
    ATL03: ("gt1l/heights/h_ph", "gt1l/heights/lat_ph", "gt1l/heights/pce_mframe_cnt",
            "gt1l/heights/signal_conf_ph", "gt2r/geolocation/segment_id"),
    SMALL: ("gt1l/heights/h_ph", "gt1l/heights/delta_time", "gt1l/heights/quality_ph",
            "ancillary_data/sparse"),
}  # fmt: skip

#: npm's messages when the registry cannot be reached (network down, DNS, proxy refusing).
_OFFLINE = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH"
                      r"|EHOSTUNREACH|network request|proxy", re.IGNORECASE)  # fmt: skip


def _node_major() -> int:
    out = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().lstrip("v").split(".")[0])


@pytest.fixture(scope="module")
def zarrita(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``read.mjs`` with zarrita installed next to it (cached across runs)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node/npm not found: run scripts/ensure-test-tools.sh to install them")
    if _node_major() < 18:  # zarrita's FetchStore needs the global fetch of node >= 18
        pytest.skip(f"node {_node_major()} is too old for zarrita (needs >= 18)")
    pinned = json.loads((JS_DIR / "package.json").read_text())["dependencies"]["zarrita"]
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    folder = Path(cache.mkdir(f"zarrita-{pinned}") if cache else tmp_path_factory.mktemp("zarrita"))
    # xdist workers share the cache folder: one installs while the others wait (two npm installs
    # in one folder at once fail with ENOTEMPTY and leave a half-installed package)
    with open(folder.parent / f"zarrita-{pinned}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install_zarrita(folder, pinned)


def _install_zarrita(folder: Path, pinned: str) -> Path:
    for name in ("package.json", "read.mjs"):
        shutil.copyfile(JS_DIR / name, folder / name)
    installed = folder / "node_modules" / "zarrita" / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != pinned:
        proc = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--no-package-lock"],
            check=False, cwd=folder, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if proc.returncode != 0:
            if _OFFLINE.search(proc.stderr):
                pytest.skip(
                    f"npm registry unreachable, cannot install zarrita: {proc.stderr[-300:]}"
                )
            raise AssertionError(f"npm install zarrita@{pinned} failed:\n{proc.stderr}")
    assert json.loads(installed.read_text())["version"] == pinned
    return folder


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The two sample granules (local) and the JSON DEST folder ``index_many`` wrote."""
    from h5sidecar.sample import write_atl03_like
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("js")
    src = root / "src"
    src.mkdir()
    write_atl03_like(src / ATL03, photons=5_000, seed=5)
    write_small_granule(src / SMALL)
    report = index_many(str(src), str(root / "dest"), format="json", executor="serial")
    assert report.ok, report.to_dict()
    return src, str(root / "dest")


@pytest.fixture(scope="module")
def base_url(sources: tuple[Path, str]) -> Iterator[str]:
    with gateway(sources[1]) as (url, _app):
        yield url


def read_js(folder: Path, store_url: str, paths: tuple[str, ...]) -> dict[str, Any]:
    """Run ``read.mjs`` (zarrita) on ``paths`` of the Zarr v3 store at ``store_url``."""
    proc = subprocess.run(["node", str(folder / "read.mjs"), store_url, *paths],
                          check=False, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, f"zarrita failed on {store_url}:\n{proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout)
    assert sorted(result) == sorted(paths)
    return result


def assert_matches_h5py(got: dict[str, Any], h5: h5py.File, path: str) -> None:
    """zarrita's shape, data type and values of one array equal h5py's."""
    expected = h5[path][()]
    assert tuple(got["shape"]) == expected.shape, path
    # zarrita returns native (little-endian) typed arrays: same values, same type
    assert np.dtype(got["dtype"]) == expected.dtype.newbyteorder("="), path
    values = np.array([np.nan if v is None else v for v in got["values"]], dtype=expected.dtype)
    np.testing.assert_array_equal(values.reshape(expected.shape), expected, err_msg=path)


def declared_codecs(url: str) -> list[str]:
    """The codec names of an array's ``zarr.json`` (inner codecs of a shard included)."""
    codecs = httpx.get(f"{url}/zarr.json", timeout=30).raise_for_status().json()["codecs"]
    names = [c["name"] for c in codecs]
    for c in codecs:
        if c["name"] == "sharding_indexed":
            names += [i["name"] for i in c["configuration"]["codecs"]]
            names += [i["name"] for i in c["configuration"]["index_codecs"]]
    return names


@pytest.mark.parametrize("granule", sorted(V3_ARRAYS))
def test_zarrita_reads_v3_view(zarrita: Path, sources: tuple[Path, str], base_url: str,
                               granule: str) -> None:  # fmt: skip
    paths = V3_ARRAYS[granule]
    got = read_js(zarrita, f"{base_url}/zarr3/{granule}", paths)
    with h5py.File(sources[0] / granule, "r") as h5:
        for path in paths:
            assert_matches_h5py(got[path], h5, path)
    # the arrays really went through zlib (HDF5 deflate) and shuffle in zarrita
    codecs = {n for p in paths for n in declared_codecs(f"{base_url}/zarr3/{granule}/{p}")}
    assert {"bytes", "numcodecs.zlib", "numcodecs.shuffle"} <= codecs, codecs


@pytest.mark.parametrize("k", [2, 64])
def test_zarrita_reads_sharded_view(zarrita: Path, sources: tuple[Path, str], base_url: str,
                                    k: int) -> None:  # fmt: skip
    """Virtual shards of K chunks (the last one partial with K=2) decode in zarrita."""
    paths = ("gt1l/heights/h_ph", "gt1l/heights/quality_ph", "ancillary_data/sparse")
    store = f"{base_url}/zarr3-shard/{k}/{SMALL}"
    got = read_js(zarrita, store, paths)
    with h5py.File(sources[0] / SMALL, "r") as h5:
        for path in paths:
            assert_matches_h5py(got[path], h5, path)
    codecs = declared_codecs(f"{store}/gt1l/heights/h_ph")
    assert codecs[0] == "sharding_indexed" and "crc32c" in codecs, codecs
