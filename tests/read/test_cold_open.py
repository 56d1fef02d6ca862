"""The first open of a Parquet sidecar on S3 is one round of concurrent requests (identity,
``.zmetadata`` and the manifests file), its first read needs no more sidecar requests, and no
sidecar is ever cached under the identity of another version of it (counted at the server,
through the recording proxy, on moto)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import fsspec
import h5py
import numpy as np
import pytest

from h5sidecar.credentials._s3_chain import fsspec_options
from h5sidecar.read import _cold_open as cold
from h5sidecar.read import load_refs, read_arrays
from h5sidecar.read._shared_caches import SIDECARS
from h5sidecar.references import write_parquet
from tests._granules import refs_for
from tests.faultproxy import FaultProxy

SEL = (37, slice(None))  # one row: a thin run in each chunk of the row


@pytest.fixture
def sidecar(
    tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any], proxy: FaultProxy
) -> dict[str, Any]:
    """An uncompressed granule and its Parquet sidecar on S3; everything read through the
    recording proxy."""
    local = tmp_path / "g.h5"
    with h5py.File(local, "w") as f:
        f.attrs["title"] = "version-A"
        data = np.arange(120 * 400, dtype="<i2").reshape(120, 400)
        f.create_dataset("x", data=data, chunks=(60, 100))
    url = f"s3://{s3_bucket}/g.h5"
    s3.put(str(local), url)
    side = write_parquet(refs_for(url, storage_options=s3_storage_options), f"{url}.parq",
                         storage_options=s3_storage_options)  # fmt: skip
    proxy.clear()
    opts = {**s3_storage_options, "endpoint_url": proxy.url}
    return {"local": local, "url": side, "opts": opts, "meta": f"{side}/.zmetadata",
            "direct": s3_storage_options}  # fmt: skip


def _sidecar_requests(proxy: FaultProxy) -> list[tuple[str, str]]:
    return sorted((r.method, r.path.split(".parq/", 1)[1]) for r in proxy.requests
                  if ".parq" in r.path)  # fmt: skip


def _want(local: Path) -> np.ndarray:
    with h5py.File(local, "r") as f:
        return f["x"][SEL]


def test_cold_open_is_one_round_and_the_read_needs_no_sidecar_request(
    sidecar: dict[str, Any], proxy: FaultProxy
) -> None:
    proxy.delay = 0.1  # requests sent together are surely in flight together
    refs = load_refs(sidecar["url"], sidecar["opts"])
    # the sequential open sent HEAD .zmetadata, then GET .zmetadata, and the first read
    # GET manifests.parq: three round trips; now two GETs (the identity comes with the first),
    # both in flight at once
    assert _sidecar_requests(proxy) == [("GET", ".h5sidecar/manifests.parq"),
                                        ("GET", ".zmetadata")]  # fmt: skip
    assert proxy.peak_in_flight == 2
    proxy.clear()
    out = read_arrays(refs, {"x": SEL}, storage_options=sidecar["opts"])
    np.testing.assert_array_equal(out["x"], _want(sidecar["local"]))
    assert _sidecar_requests(proxy) == []  # the manifests came with the open
    assert proxy.requests and all(r.path.endswith("/g.h5") for r in proxy.requests)


def test_warm_open_is_one_head_and_a_hit(sidecar: dict[str, Any], proxy: FaultProxy) -> None:
    first = load_refs(sidecar["url"], sidecar["opts"])
    proxy.clear()
    hits = SIDECARS.stats.hits
    assert load_refs(sidecar["url"], sidecar["opts"]) is first
    assert _sidecar_requests(proxy) == [("HEAD", ".zmetadata")]
    assert SIDECARS.stats.hits == hits + 1
    out = read_arrays(sidecar["url"], {"x": SEL}, storage_options=sidecar["opts"])
    np.testing.assert_array_equal(out["x"], _want(sidecar["local"]))


def test_a_sidecar_rewritten_after_a_cold_open_is_read_again(
    sidecar: dict[str, Any], s3: Any
) -> None:
    assert load_refs(sidecar["url"], sidecar["opts"]).groups[""]["title"] == "version-A"
    _rewrite(s3, sidecar["meta"], b"version-A", b"version-B")
    assert load_refs(sidecar["url"], sidecar["opts"]).groups[""]["title"] == "version-B"


def _rewrite(s3: Any, meta: str, old: bytes, new: bytes) -> bytes:
    data = s3.cat_file(meta)
    assert old in data
    s3.pipe_file(meta, data.replace(old, new))
    return data.replace(old, new)


def _fs(sidecar: dict[str, Any]) -> Any:
    url = sidecar["url"]
    return fsspec.core.url_to_fs(url, **fsspec_options(url, sidecar["opts"]))[0]


def _assert_cache_consistent(versions: dict[str, str]) -> None:
    """Every cached sidecar is the version its key's ETag names."""
    for key in SIDECARS.key_snapshot():
        entry = SIDECARS.get(key)
        assert entry is not None
        assert versions[str(key[3]).strip('"')] == entry.groups[""]["title"], key


def test_rewritten_between_head_and_get_is_never_cached_under_the_new_identity(
    sidecar: dict[str, Any], s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HEAD beside the GET (stores whose GET answer does not name the object): the GET
    answered first with version A, the sidecar was rewritten (same size), then the HEAD saw
    version B.  The open must not cache A's metadata under B's identity."""
    monkeypatch.setattr(cold, "_get_carries_identity", lambda fs: False)
    fs = _fs(sidecar)
    old = s3.cat_file(sidecar["meta"])
    new = old.replace(b"version-A", b"version-B")
    versions = {hashlib.md5(old).hexdigest(): "version-A", hashlib.md5(new).hexdigest(): "version-B"}
    state = {"rewritten": False}
    cat, info = fs._cat_file, fs._info

    async def cat_then_rewrite(path: str, *args: Any, **kwargs: Any) -> bytes:
        data = await cat(path, *args, **kwargs)
        if path.endswith("/.zmetadata") and not state["rewritten"]:
            await s3._pipe_file(path, new)  # straight to the server
            state["rewritten"] = True
        return data

    async def info_after_rewrite(path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        while path.endswith("/.zmetadata") and not state["rewritten"]:
            await asyncio.sleep(0.005)
        return await info(path, *args, **kwargs)

    monkeypatch.setattr(fs, "_cat_file", cat_then_rewrite)
    monkeypatch.setattr(fs, "_info", info_after_rewrite)
    refs = load_refs(sidecar["url"], sidecar["opts"])
    assert state["rewritten"]
    assert refs.groups[""]["title"] == "version-B"  # read again after the HEAD
    _assert_cache_consistent(versions)
    assert len(SIDECARS) == 1
    assert load_refs(sidecar["url"], sidecar["opts"]) is refs  # warm: HEAD names B, a hit
    out = read_arrays(refs, {"x": SEL}, storage_options=sidecar["opts"])
    np.testing.assert_array_equal(out["x"], _want(sidecar["local"]))


def test_a_sidecar_that_keeps_changing_is_served_but_never_cached_wrongly(
    sidecar: dict[str, Any], s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewritten (to another size) right after every HEAD: whatever the open returns is a
    whole version, and nothing is cached under another version's identity."""
    monkeypatch.setattr(cold, "_get_carries_identity", lambda fs: False)
    fs = _fs(sidecar)
    a = s3.cat_file(sidecar["meta"])
    b = a.replace(b"version-A", b"version-BB")
    versions = {hashlib.md5(a).hexdigest(): "version-A", hashlib.md5(b).hexdigest(): "version-BB"}
    info = fs._info
    turn = {"n": 0}

    async def info_then_rewrite(path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        got = await info(path, *args, **kwargs)
        if path.endswith("/.zmetadata"):
            turn["n"] += 1
            await s3._pipe_file(path, b if turn["n"] % 2 else a)  # straight to the server
        return got

    monkeypatch.setattr(fs, "_info", info_then_rewrite)
    refs = load_refs(sidecar["url"], sidecar["opts"])
    assert refs.groups[""]["title"] in ("version-A", "version-BB")
    assert turn["n"] >= 1
    _assert_cache_consistent(versions)


def test_a_json_sidecar_and_a_missing_one_open_as_before(
    sidecar: dict[str, Any], s3: Any, s3_bucket: str, proxy: FaultProxy
) -> None:
    """No ``.zmetadata`` under the name: the cold open steps aside for the sequential one."""
    from h5sidecar.errors import NotIndexedError
    from h5sidecar.references import read_refs, write_json

    refs = read_refs(sidecar["url"], storage_options=sidecar["opts"], lazy=False)
    plain = f"s3://{s3_bucket}/g.h5.refs"  # a JSON sidecar whose name does not say so
    write_json(refs, plain, storage_options=sidecar["direct"])  # PUTs go straight to moto
    got = load_refs(plain, sidecar["opts"])
    assert got.groups[""]["title"] == "version-A"
    out = read_arrays(got, {"x": SEL}, storage_options=sidecar["opts"])
    np.testing.assert_array_equal(out["x"], _want(sidecar["local"]))
    with pytest.raises(NotIndexedError, match="no sidecar"):
        load_refs(f"s3://{s3_bucket}/absent.h5.parq", sidecar["opts"])


def test_the_check_proves_only_what_it_can() -> None:
    data = b'{"metadata": {}}'
    md5 = hashlib.md5(data).hexdigest()
    assert cold._check({"size": len(data), "ETag": f'"{md5}"'}, data) == "same"
    assert cold._check({"size": len(data) + 1, "ETag": f'"{md5}"'}, data) == "changed"
    # a 32-digit ETag that is not this content's MD5 may be a store's own scheme
    assert cold._check({"size": len(data), "ETag": '"' + "0" * 32 + '"'}, data) == "unknown"
    assert cold._check({"size": len(data), "ETag": '"abc-2"'}, data) == "unknown"
    assert cold._check({"size": None, "mtime": 5.0}, data) == "unknown"  # HEAD without length


def test_the_cache_counts_its_entries_per_sidecar() -> None:
    """Whether any version of a sidecar is cached is answered from per-sidecar counts (a cold
    open asks at every open: a scan of every key would cost O(entries) an open), kept right
    through replacement, eviction, resizing and clearing."""
    from h5sidecar.read._byte_lru import ByteLRU
    from h5sidecar.read._sidecar_key import sidecar_group

    cache: ByteLRU[bytes] = ByteLRU(100, group=sidecar_group)
    a1 = ("s3", "b/a.parq/.zmetadata", 10, '"e1"', "[]")
    a2 = ("s3", "b/a.parq/.zmetadata", 11, '"e2"', "[]")
    b = ("s3", "b/b.parq/.zmetadata", 10, '"e3"', "[]")
    group_a, group_b = ("s3", "b/a.parq", "[]"), ("s3", "b/b.parq", "[]")
    cache.put(a1, b"x" * 40)
    cache.put(a2, b"x" * 40)  # a second version of the same sidecar
    cache.put(a1, b"y" * 40)  # replaced: still two entries of group a
    assert cache.has_group(group_a) and not cache.has_group(group_b)
    assert not cache.has_group(("s3", "b/a.parq", "[('anon', True)]"))  # other options
    cache.put(b, b"z" * 40)  # evicts a2, the least recently used
    assert a2 not in cache and cache.has_group(group_a) and cache.has_group(group_b)
    cache.resize(45)  # keeps the newest only
    assert list(cache.key_snapshot()) == [b]
    assert not cache.has_group(group_a) and cache.has_group(group_b)
    cache.clear()
    assert not cache.has_group(group_b)
    assert SIDECARS.group is sidecar_group
