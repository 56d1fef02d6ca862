"""Lazy Parquet sidecars: opening reads ``.zmetadata`` only; the first manifest needed loads the
all-arrays manifests file (one GET for every array), or -- for sidecars without it -- that
variable's record files, once; counted at the (moto) S3 server through the request-recording
proxy."""

from __future__ import annotations

import pickle
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.indexer import index_granule
from h5sidecar.read import clear_caches
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs, read_refs, write_parquet
from h5sidecar.references._lazy_refs import LazyArrayRefs
from h5sidecar.references.parquet_sidecar._manifests_file import MANIFESTS_FILE
from h5sidecar.references.parquet_sidecar._parquet_lazy import ParquetManifests
from h5sidecar.sample import write_atl03_like
from tests.faultproxy import FaultProxy

#: one worker: the module's granule on S3 is made once, not once per worker
pytestmark = pytest.mark.xdist_group("lazy")
NO_DATA_AT_OPEN = {"create_default_indexes": False, "decode_times": False}
VAR = "gt1l/heights/h_ph"
OTHER = "gt2r/heights/signal_conf_ph"


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ATL03-like granule (hundreds of arrays, a few chunks each)."""
    path = tmp_path_factory.mktemp("lazy") / "ATL03_lazy.h5"
    write_atl03_like(path, photons=20_000)
    return path


@pytest.fixture(scope="module")
def local_refs(granule: Path) -> GranuleRefs:
    """The granule indexed locally, with chunk checksums (kept in the sidecar's side file)."""
    from h5sidecar.settings import IndexSettings

    return index_granule(str(granule), settings=IndexSettings(checksums=True))


@pytest.fixture(scope="module")
def published(granule: Path, s3_endpoint: str,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The granule and its Parquet sidecar on the moto server (written once per module).

    The sidecars (~900 objects each) are written locally and put straight into moto's store
    (:func:`tests.conftest.moto_seed_tree`): what this module tests is how they are read."""
    import s3fs

    from tests.conftest import moto_seed_tree

    options = {"endpoint_url": s3_endpoint}  # credentials: the environment s3_endpoint set up
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    bucket = f"lazy-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    url = f"s3://{bucket}/{granule.name}"
    fs.put(str(granule), url)
    refs = index_granule(url, storage_options=options)
    local = tmp_path_factory.mktemp("lazy-sidecars")
    write_parquet(refs, str(local / "full"))
    # the same sidecar without the all-arrays manifests file (kerchunk's layout alone)
    write_parquet(refs, str(local / "plain"), manifests_file=False)
    sidecar, plain = f"{url}.parq", f"{url}.plain.parq"
    moto_seed_tree(local / "full", sidecar.removeprefix("s3://"))
    moto_seed_tree(local / "plain", plain.removeprefix("s3://"))
    return {
        "refs": refs,
        "sidecar": sidecar,
        "prefix": f"/{bucket}/{granule.name}.parq/",
        "plain": plain,
        "plain_prefix": f"/{bucket}/{granule.name}.plain.parq/",
    }


@pytest.fixture
def on_s3(published: dict[str, Any], proxy: FaultProxy) -> dict[str, Any]:
    """``published`` plus storage options that send every request through the counting proxy."""
    clear_caches()
    return {**published, "via_proxy": {"endpoint_url": proxy.url}}


def _sidecar_gets(proxy: FaultProxy, prefix: str) -> list[str]:
    """Relative paths of the sidecar files fetched (GET), in order."""
    out = []
    for r in proxy.gets():
        path = r.path.split("?")[0]
        if path.startswith(prefix):
            out.append(path[len(prefix) :])
    return out


def _h5(path: Path, var: str) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f[var][()]


def test_open_reads_only_zmetadata(on_s3: dict[str, Any], proxy: FaultProxy) -> None:
    refs = read_refs(on_s3["sidecar"], storage_options=on_s3["via_proxy"])
    assert [(r.method, r.path) for r in proxy.requests] == [("GET", on_s3["prefix"] + ".zmetadata")]
    eager: GranuleRefs = on_s3["refs"]
    assert len(refs.arrays) == len(eager.arrays) > 100
    # the whole hierarchy's metadata is there without loading a manifest
    assert refs.zmetadata() == eager.zmetadata()
    assert dict(refs.groups) == dict(eager.groups) and refs.source == eager.source
    assert all(isinstance(a, LazyArrayRefs) for a in refs.arrays.values())
    assert {p: (a.meta, a.status, a.note) for p, a in refs.arrays.items()} == {
        p: (a.meta, a.status, a.note) for p, a in eager.arrays.items()
    }
    assert not any(a.manifest_loaded for a in refs.arrays.values()) and refs.nbytes == 0
    assert len(proxy.requests) == 1
    # first use of one manifest fetches the all-arrays manifests file, once ...
    assert refs.arrays[VAR].manifest == eager.arrays[VAR].manifest
    assert refs.arrays[VAR].manifest == eager.arrays[VAR].manifest
    assert _sidecar_gets(proxy, on_s3["prefix"]) == [".zmetadata", MANIFESTS_FILE]
    assert refs.nbytes == eager.arrays[VAR].manifest.nbytes  # built for this array only
    # ... and every other manifest comes from it without another request
    assert all(refs.arrays[p].manifest == a.manifest for p, a in eager.arrays.items())
    assert _sidecar_gets(proxy, on_s3["prefix"]) == [".zmetadata", MANIFESTS_FILE]


def test_without_manifests_file_a_variable_loads_its_records(
    on_s3: dict[str, Any], proxy: FaultProxy
) -> None:
    refs = read_refs(on_s3["plain"], storage_options=on_s3["via_proxy"])
    eager: GranuleRefs = on_s3["refs"]
    assert refs.arrays[VAR].manifest == eager.arrays[VAR].manifest
    assert refs.arrays[VAR].manifest == eager.arrays[VAR].manifest
    assert _sidecar_gets(proxy, on_s3["plain_prefix"]) == [".zmetadata", f"{VAR}/refs.0.parq"]
    assert refs.nbytes == eager.arrays[VAR].manifest.nbytes


def test_store_reads_manifests_once(
    on_s3: dict[str, Any], proxy: FaultProxy, granule: Path
) -> None:
    store = SidecarStore(
        on_s3["sidecar"], storage_options=on_s3["via_proxy"], remote_options=on_s3["via_proxy"]
    )
    group, _, name = VAR.rpartition("/")
    tree = h5sidecar.open_datatree(store, **NO_DATA_AT_OPEN)
    ds = xr.open_dataset(store, engine="h5sidecar", group=group, chunks={}, **NO_DATA_AT_OPEN)
    assert len(list(tree.subtree)) > 10 and name in ds.data_vars
    # a cold open: .zmetadata (whose answer names its version: the cache key) and the
    # manifests file, in one round; no record file, no granule byte
    assert sorted((r.method, r.path) for r in proxy.requests) == [
        ("GET", on_s3["prefix"] + MANIFESTS_FILE),
        ("GET", on_s3["prefix"] + ".zmetadata"),
    ]
    np.testing.assert_array_equal(ds[name].values, _h5(granule, VAR))
    assert _sidecar_gets(proxy, on_s3["prefix"]) == [".zmetadata", MANIFESTS_FILE]
    other = ds["signal_conf_ph"].values
    np.testing.assert_array_equal(other, _h5(granule, f"{group}/signal_conf_ph"))
    assert _sidecar_gets(proxy, on_s3["prefix"]) == [".zmetadata", MANIFESTS_FILE]


def test_lazy_refs_pickle_without_manifests_or_secrets(
    on_s3: dict[str, Any], proxy: FaultProxy
) -> None:
    secret = {**on_s3["via_proxy"], "key": "testing", "secret": "lazy-s3cr3t-never-pickled"}
    refs = read_refs(on_s3["sidecar"], storage_options=secret)
    blob = pickle.dumps(refs)
    assert b"lazy-s3cr3t" not in blob  # workers take credentials from their environment
    assert not any(a.manifest_loaded for a in refs.arrays.values())
    clone = pickle.loads(blob)
    assert not any(a.manifest_loaded for a in clone.arrays.values())
    n = len(proxy.requests)
    assert clone.arrays[VAR].manifest == on_s3["refs"].arrays[VAR].manifest
    assert _sidecar_gets(proxy, on_s3["prefix"])[n:] == [MANIFESTS_FILE]


@pytest.mark.parametrize("layout", ["sidecar", "plain"])
def test_concurrent_first_reads_load_once(
    on_s3: dict[str, Any], proxy: FaultProxy, layout: str
) -> None:
    refs = read_refs(on_s3[layout], storage_options=on_s3["via_proxy"])
    arr, other = refs.arrays[VAR], refs.arrays[OTHER]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: (arr if i % 2 else other).manifest, range(16)))
    assert all(m is got[1] for m in got[1::2]) and all(m is got[0] for m in got[::2])
    gets = _sidecar_gets(proxy, on_s3["prefix" if layout == "sidecar" else "plain_prefix"])
    if layout == "sidecar":
        assert gets.count(MANIFESTS_FILE) == 1 and len(gets) == 2
    else:
        assert gets.count(f"{VAR}/refs.0.parq") == gets.count(f"{OTHER}/refs.0.parq") == 1


def test_manifest_cache_is_bounded(tmp_path: Path, local_refs: GranuleRefs) -> None:
    eager = local_refs
    dest = write_parquet(eager, tmp_path / "g.parq")
    refs = read_refs(dest)
    loader = refs.arrays[VAR]._loader  # type: ignore[attr-defined]
    assert isinstance(loader, ParquetManifests)
    loader._max_bytes = 1  # room for the newest manifest only
    a, b = refs.arrays[VAR], refs.arrays["gt1l/heights/delta_time"]
    assert a.manifest == eager.arrays[VAR].manifest
    assert b.manifest == eager.arrays[b.path].manifest
    assert b.manifest_loaded and not a.manifest_loaded  # evicted, not lost:
    assert a.manifest == eager.arrays[VAR].manifest
    held = eager.arrays[VAR]
    assert refs.nbytes == held.manifest.nbytes + held.checksums.nbytes  # type: ignore[union-attr]


def test_lazy_and_eager_agree_locally(tmp_path: Path, local_refs: GranuleRefs) -> None:
    eager = local_refs
    dest = write_parquet(eager, tmp_path / "g.parq", record_size=3)
    lazy = read_refs(dest)
    assert read_refs(dest, lazy=False) == eager
    assert lazy.zmetadata() == eager.zmetadata()
    for path, arr in eager.arrays.items():
        got = lazy.arrays[path]
        assert got.urls == arr.manifest.urls
        assert got.zarray_fill_value() == arr.zarray_fill_value()
        assert np.array_equal(got.checksums, arr.checksums)  # type: ignore[arg-type]
    assert lazy == eager


def test_damaged_manifests_file_raises_on_first_use(
    tmp_path: Path, local_refs: GranuleRefs
) -> None:
    dest = Path(write_parquet(local_refs, tmp_path / "g.parq"))
    bulk = dest / MANIFESTS_FILE
    bulk.write_bytes(bulk.read_bytes()[:30])
    refs = read_refs(dest)  # .zmetadata is intact
    with pytest.raises(InvalidReferenceError, match=r"manifests\.parq is not a readable"):
        refs.arrays[VAR].manifest  # noqa: B018
    with pytest.raises(InvalidReferenceError, match=r"manifests\.parq is not a readable"):
        read_refs(dest, lazy=False)


def test_damaged_record_raises_on_first_use(tmp_path: Path, local_refs: GranuleRefs) -> None:
    dest = Path(write_parquet(local_refs, tmp_path / "g.parq", manifests_file=False))
    rec = dest / VAR / "refs.0.parq"
    rec.write_bytes(rec.read_bytes()[:30])
    refs = read_refs(dest)  # .zmetadata is intact
    with pytest.raises(InvalidReferenceError, match=r"h_ph/refs\.0\.parq is not a readable"):
        refs.arrays[VAR].manifest  # noqa: B018
    with pytest.raises(InvalidReferenceError):
        read_refs(dest, lazy=False)


def test_manifests_file_checks_name_only_the_bad_arrays(
    tmp_path: Path, local_refs: GranuleRefs, granule: Path
) -> None:
    """The manifests file's chunk numbers and source ranges are checked for every array at
    once; a chunk past the end of the granule or outside its grid fails only its own array,
    and the others load as the eager reader builds them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dest = Path(write_parquet(local_refs, tmp_path / "g.parq"))
    bulk = dest / MANIFESTS_FILE
    table = pq.read_table(bulk)
    names = table.column("array").to_pylist()
    first = {n: names.index(n) for n in (VAR, OTHER)}
    offset = table.column("offset").to_numpy().copy()
    chunk = table.column("chunk").to_numpy().copy()
    offset[first[VAR]] = granule.stat().st_size  # the chunk now ends past the granule
    chunk[first[OTHER]] = 10**9  # and this one lies outside its grid
    table = table.set_column(table.schema.get_field_index("offset"), "offset", pa.array(offset))
    table = table.set_column(table.schema.get_field_index("chunk"), "chunk", pa.array(chunk))
    pq.write_table(table, bulk)
    refs = read_refs(dest)
    with pytest.raises(InvalidReferenceError, match=f"{VAR}: a chunk ends at byte .* past the end"):
        refs.arrays[VAR].manifest  # noqa: B018
    with pytest.raises(InvalidReferenceError, match=f"{OTHER} has a chunk number outside"):
        refs.arrays[OTHER].manifest  # noqa: B018
    good = [p for p in local_refs.arrays if p not in (VAR, OTHER)]
    assert len(good) > 10
    for path in good:
        assert refs.arrays[path].manifest == local_refs.arrays[path].manifest, path
