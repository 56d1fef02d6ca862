"""Process-wide tuning: the caches and the decode pool follow ReadSettings (configure() or the
H5SIDECAR_* variables), and no reader changes zarr's process-wide configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr

import h5sidecar.read
from h5sidecar.read import SidecarStore, cache_stats, clear_caches, configure, load_refs
from h5sidecar.read._process_settings import set_process_settings
from h5sidecar.read.native._decode import decode_executor, decode_threads
from h5sidecar.settings import ReadSettings, from_env
from tests._granules import read_h5

PATH = "gt1l/heights/h_ph"  # 5 gzip+shuffle chunks of 1000 values


@pytest.fixture(autouse=True)
def _process_defaults(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts from the defaults and leaves the next one the environment's values."""
    for name in ("SIDECAR_CACHE_BYTES", "CHUNK_CACHE_BYTES", "DECODE_THREADS"):
        monkeypatch.delenv(f"H5SIDECAR_{name}", raising=False)
    set_process_settings(None)
    yield
    set_process_settings(None)


def _read(sidecar: str) -> tuple[np.ndarray, SidecarStore]:
    store = SidecarStore(sidecar)
    return zarr.open_group(store, mode="r", zarr_format=2)[PATH][...], store


def test_defaults_are_the_former_constants() -> None:
    s = ReadSettings()
    assert (s.sidecar_cache_bytes, s.chunk_cache_bytes, s.decode_threads) == (
        256 * 2**20, 64 * 2**20, 0)
    stats = cache_stats()
    assert stats["sidecars"].max_bytes == 256 * 2**20
    assert stats["chunks"].max_bytes == 64 * 2**20
    assert decode_threads() == max(os.cpu_count() or 2, 2)


def test_from_env_reads_the_new_fields() -> None:
    env = {"H5SIDECAR_SIDECAR_CACHE_BYTES": "1000", "H5SIDECAR_CHUNK_CACHE_BYTES": "0",
           "H5SIDECAR_DECODE_THREADS": "3"}
    s = from_env(ReadSettings, env=env)
    assert (s.sidecar_cache_bytes, s.chunk_cache_bytes, s.decode_threads) == (1000, 0, 3)


def test_tiny_chunk_cache_evicts(small_sidecars: dict[str, str], small_h5: Path) -> None:
    configure(ReadSettings(chunk_cache_bytes=3000))  # about one compressed chunk of h_ph
    got, _ = _read(small_sidecars["json"])
    np.testing.assert_array_equal(got, read_h5(small_h5, PATH))
    chunks = cache_stats()["chunks"]
    assert chunks.max_bytes == 3000
    assert chunks.evictions >= 3, chunks
    assert chunks.current_bytes <= 3000


def test_chunk_cache_off_refetches(small_sidecars: dict[str, str], small_h5: Path) -> None:
    want = read_h5(small_h5, PATH)
    _read(small_sidecars["json"])
    again, store = _read(small_sidecars["json"])
    np.testing.assert_array_equal(again, want)
    assert store.stats["cache_hits"] == 5  # default: every chunk of the re-read is cached

    clear_caches()
    configure(ReadSettings(chunk_cache_bytes=0))
    _read(small_sidecars["json"])
    again, store = _read(small_sidecars["json"])
    np.testing.assert_array_equal(again, want)
    assert store.stats["cache_hits"] == 0
    assert store.stats["requests"] >= 1
    assert cache_stats()["chunks"].entries == 0


def test_shrinking_evicts_what_is_cached(small_sidecars: dict[str, str]) -> None:
    _read(small_sidecars["json"])
    assert cache_stats()["chunks"].entries == 5
    configure(ReadSettings(chunk_cache_bytes=0, sidecar_cache_bytes=0))
    stats = cache_stats()
    assert (stats["chunks"].entries, stats["sidecars"].entries) == (0, 0)


def test_sidecar_cache_size(small_sidecars: dict[str, str]) -> None:
    path = small_sidecars["parquet"]
    assert load_refs(path) is load_refs(path)  # parsed once per process by default
    configure(ReadSettings(sidecar_cache_bytes=0))
    assert load_refs(path) is not load_refs(path)


def test_environment_sizes_the_process_on_first_use(
    small_sidecars: dict[str, str], small_h5: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("H5SIDECAR_CHUNK_CACHE_BYTES", "0")
    monkeypatch.setenv("H5SIDECAR_SIDECAR_CACHE_BYTES", "12345")
    monkeypatch.setenv("H5SIDECAR_DECODE_THREADS", "3")
    monkeypatch.setenv("H5SIDECAR_MAX_GAP", "not a number")  # per store: not read here
    got = h5sidecar.read.read_arrays(small_sidecars["json"], [PATH])[PATH]
    np.testing.assert_array_equal(got, read_h5(small_h5, PATH))
    stats = cache_stats()
    assert (stats["chunks"].max_bytes, stats["sidecars"].max_bytes) == (0, 12345)
    assert stats["chunks"].entries == 0
    assert decode_threads() == 3


def test_configure_resizes_the_decode_pool(small_sidecars: dict[str, str], small_h5: Path
                                           ) -> None:
    before = decode_executor()
    configure(ReadSettings(decode_threads=3))
    pool = decode_executor()
    assert decode_threads() == 3
    assert pool is not before
    assert decode_executor() is pool  # made once per size
    got = h5sidecar.read.read_arrays(small_sidecars["json"], [PATH])[PATH]
    np.testing.assert_array_equal(got, read_h5(small_h5, PATH))


def test_store_settings_do_not_touch_the_process(small_sidecars: dict[str, str]) -> None:
    SidecarStore(small_sidecars["json"], settings=ReadSettings(chunk_cache_bytes=0,
                                                                decode_threads=1))
    assert cache_stats()["chunks"].max_bytes == 64 * 2**20
    assert decode_threads() == max(os.cpu_count() or 2, 2)


@pytest.mark.parametrize("field", ["sidecar_cache_bytes", "chunk_cache_bytes", "decode_threads"])
def test_negative_sizes_are_refused(field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=f"{field}=-1"):
        configure(ReadSettings(**{field: -1}))
    monkeypatch.setenv(f"H5SIDECAR_{field.upper()}", "-1")
    set_process_settings(None)
    with pytest.raises(ValueError, match="H5SIDECAR_"):
        cache_stats()


# -- zarr's configuration is the user's ------------------------------------------------------------

_UNTOUCHED = """
import copy, json, sys, warnings
warnings.simplefilter("ignore")
import h5py, numpy as np, xarray as xr, zarr
from zarr.registry import get_codec_class

sidecar, h5 = sys.argv[1], sys.argv[2]
get_codec_class("numcodecs.zlib")  # zarr's own lazy loading happens before the snapshot
before = copy.deepcopy(zarr.config.config)
from h5sidecar.read import SidecarStore
with h5py.File(h5) as f:
    want = f["gt1l/heights/h_ph"][...]
equal = []
for fmt in (2, 3):
    store = SidecarStore(sidecar, zarr_format=fmt)
    equal.append(bool(np.array_equal(
        zarr.open_group(store, mode="r")["gt1l/heights/h_ph"][...], want)))
for native in (True, False):
    ds = xr.open_dataset(sidecar, engine="h5sidecar", group="gt1l/heights", native=native)
    equal.append(bool(np.array_equal(ds["h_ph"].values, want)))
after = zarr.config.config
print(json.dumps({"equal": equal, "changed": sorted(
    k for k in set(before) | set(after) if before.get(k) != after.get(k)),
    "concurrency": zarr.config.get("async.concurrency")}))
"""


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True, env=env)
    return json.loads(out.stdout)


def test_readers_leave_zarr_config_unchanged(small_sidecars: dict[str, str], small_h5: Path
                                             ) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARR_")}
    out = _run(_UNTOUCHED, small_sidecars["parquet"], str(small_h5), env=env)
    assert out["equal"] == [True] * 4
    assert out["changed"] == []
    assert out["concurrency"] == 10  # zarr 3.1's own default, not raised behind the user's back


def test_user_choice_of_concurrency_is_kept(small_sidecars: dict[str, str], small_h5: Path
                                            ) -> None:
    env = {**os.environ, "ZARR_ASYNC__CONCURRENCY": "128"}
    out = _run(_UNTOUCHED, small_sidecars["json"], str(small_h5), env=env)
    assert out["equal"] == [True] * 4
    assert (out["changed"], out["concurrency"]) == ([], 128)


_REGISTER = """
import json
from zarr.abc.codec import ArrayArrayCodec, BytesBytesCodec
from zarr.registry import get_codec_class
def known(name):
    try:
        return get_codec_class(name)
    except KeyError:
        return None
before = known("numcodecs.categorize")
from h5sidecar.read import register_numcodecs_v3
register_numcodecs_v3(["categorize", "zlib"])
print(json.dumps({
    "before": before is not None,
    "array_array": issubclass(known("numcodecs.categorize"), ArrayArrayCodec),
    "zlib_kept": known("numcodecs.zlib").__module__.startswith("zarr."),
    "h5sidecar": issubclass(known("numcodecs.h5sidecar.szip"), BytesBytesCodec),
}))
"""


def test_register_numcodecs_v3_is_explicit_and_additive() -> None:
    out = _run(_REGISTER)
    assert out == {"before": False, "array_array": True, "zlib_kept": True, "h5sidecar": True}
