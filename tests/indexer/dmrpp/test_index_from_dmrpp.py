"""``h5sidecar index --from-dmrpp`` and :func:`h5sidecar.indexer.index_source`: granules indexed
from the DMR++ beside them (``auto``: where one exists, ``only``: or fail), and the sidecar
checked by ``h5sidecar verify`` like any other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar import index_dmrpp
from h5sidecar.cli import main
from h5sidecar.errors import InvalidDmrppError, SourceNotFoundError
from h5sidecar.indexer import DMRPP_KEY, index_source
from h5sidecar.references import read_refs, write_json
from h5sidecar.workflows.index._up_to_date import check_up_to_date
from tests.indexer._compare import open_plain
from tests.indexer.dmrpp._documents import document, write_beside


def _granule(path: Path, seed: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.random.default_rng(seed).random((6, 8)).astype("<f4")
    with h5py.File(path, "w") as f:
        t = f.create_dataset("t", data=data, chunks=(3, 4), compression="gzip", shuffle=True)
        t.attrs["units"] = "K"  # the attributes the handmade document gives
        t.attrs["scale_factor"] = np.float32(0.5)
    return path


def test_index_source_modes(tmp_path: Path) -> None:
    with_doc = _granule(tmp_path / "a.h5", 0)
    write_beside(with_doc, document(with_doc, "t", filters="shuffle deflate"))
    without = _granule(tmp_path / "b.h5", 1)
    assert DMRPP_KEY in index_source(str(with_doc), from_dmrpp="auto").extra
    assert DMRPP_KEY not in index_source(str(with_doc), from_dmrpp="never").extra
    assert DMRPP_KEY not in index_source(str(without), from_dmrpp="auto").extra
    with pytest.raises(SourceNotFoundError):
        index_source(str(without), from_dmrpp="only")
    write_beside(without, "not xml")  # a bad document is reported, not crawled around
    with pytest.raises(InvalidDmrppError):
        index_source(str(without), from_dmrpp="auto")


def test_cli_index_from_dmrpp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in"
    a = _granule(src / "a.h5", 0)
    write_beside(a, document(a, "t", filters="shuffle deflate"))
    _granule(src / "b.h5", 1)
    dest = tmp_path / "out"
    assert main(["index", str(src), "-o", str(dest), "--serial", "--from-dmrpp", "auto"]) == 0
    assert "2 indexed" in capsys.readouterr().out
    assert DMRPP_KEY in read_refs(str(dest / "a.h5.parq")).extra
    assert DMRPP_KEY not in read_refs(str(dest / "b.h5.parq")).extra
    # the sidecar from the DMR++ reads the file's values, checked as any sidecar
    assert main(["verify", str(dest / "a.h5.parq"), "--sample", "all", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    args = ["index", str(src), "-o", str(tmp_path / "o2"), "--serial", "--json"]
    assert main([*args, "--from-dmrpp", "only"]) == 1
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts == {"ok": 1, "failed": 1, "up_to_date": 0}


def test_from_dmrpp_mode_is_among_the_settings_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A re-run with another ``--from-dmrpp`` re-indexes the sidecars not made as it asks
    (``never``: those from a DMR++; ``only``: those from the HDF5) without ``--force``, from
    the record and from the sidecar alike; ``auto`` takes them made either way."""
    src = tmp_path / "in"
    a = _granule(src / "a.h5", 0)
    write_beside(a, document(a, "t", filters="shuffle deflate"))
    _granule(src / "b.h5", 1)
    dest = tmp_path / "out"
    args = ["index", str(src), "-o", str(dest), "--serial", "--json", "--from-dmrpp"]

    def run(mode: str) -> dict[str, int]:
        main([*args, mode])
        return dict(json.loads(capsys.readouterr().out)["counts"])

    assert run("auto") == {"ok": 2, "failed": 0, "up_to_date": 0}
    assert run("auto") == {"ok": 0, "failed": 0, "up_to_date": 2}
    assert run("never") == {"ok": 1, "failed": 0, "up_to_date": 1}  # a.h5, crawled now
    assert DMRPP_KEY not in read_refs(str(dest / "a.h5.parq")).extra
    assert run("never") == {"ok": 0, "failed": 0, "up_to_date": 2}
    assert run("auto") == {"ok": 0, "failed": 0, "up_to_date": 2}
    assert run("only") == {"ok": 1, "failed": 1, "up_to_date": 0}  # b.h5 has no DMR++
    assert DMRPP_KEY in read_refs(str(dest / "a.h5.parq")).extra
    # without the record, from the sidecars' extras blocks
    sidecar = str(dest / "a.h5.parq")
    assert check_up_to_date(str(a), sidecar, from_dmrpp="only") is not None
    assert check_up_to_date(str(a), sidecar, from_dmrpp="auto") is not None
    assert check_up_to_date(str(a), sidecar, from_dmrpp="never") is None
    b = str(dest / "b.h5.parq")
    assert check_up_to_date(str(src / "b.h5"), b, from_dmrpp="never") is not None
    assert check_up_to_date(str(src / "b.h5"), b, from_dmrpp="only") is None


def test_index_from_dmrpp_on_s3(
    tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    local = _granule(tmp_path / "a.h5", 0)
    doc = write_beside(local, document(local, "t", filters="shuffle deflate"))
    s3.put(str(local), f"{s3_bucket}/in/a.h5")
    s3.put(doc, f"{s3_bucket}/in/a.h5.dmrpp")
    s3.put(str(local), f"{s3_bucket}/in/b.h5")  # no DMR++ beside it
    url = f"s3://{s3_bucket}/in/a.h5"
    refs = index_source(url, from_dmrpp="auto", storage_options=s3_storage_options)
    assert refs.source.url == url and refs.source.etag  # the freshness guard's identity
    assert refs.extra[DMRPP_KEY]["url"] == url + ".dmrpp"
    assert refs.arrays["t"].manifest.urls == (url,)
    group = open_plain(write_json(refs, tmp_path / "refs.json"), "s3", s3_storage_options)
    with h5py.File(local) as f:
        np.testing.assert_array_equal(group["t"][...], f["t"][...])
    other = index_source(f"s3://{s3_bucket}/in/b.h5", from_dmrpp="auto",
                         storage_options=s3_storage_options)  # fmt: skip
    assert DMRPP_KEY not in other.extra


def test_request_budget_on_s3(
    tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any], proxy: Any
) -> None:
    """From a DMR++: one GET of the document and one HEAD of the granule (its identity); a
    fletcher32 among other filters adds one ranged GET of one chunk (the order check)."""
    local = _granule(tmp_path / "a.h5", 0)
    s3.put(str(local), f"{s3_bucket}/a.h5")
    s3.put(write_beside(local, document(local, "t", filters="shuffle deflate")),
           f"{s3_bucket}/a.h5.dmrpp")  # fmt: skip
    options = {**s3_storage_options, "endpoint_url": proxy.url}
    proxy.delay = 0.2  # requests sent together are in flight together
    proxy.clear()
    refs = index_source(f"s3://{s3_bucket}/a.h5", from_dmrpp="only", storage_options=options)
    assert sorted((r.method, r.path.rpartition("/")[2]) for r in proxy.requests) == [
        ("GET", "a.h5.dmrpp"), ("HEAD", "a.h5")
    ]  # fmt: skip
    assert proxy.peak_in_flight == 2  # asked at once
    assert len(refs.arrays["t"].manifest.urls) == 1
    checked = tmp_path / "c" / "a.h5"
    checked.parent.mkdir()
    with h5py.File(checked, "w") as f:
        f.create_dataset("t", data=np.arange(48, dtype="<f4").reshape(6, 8), chunks=(3, 4),
                         compression="gzip", fletcher32=True)  # fmt: skip
    s3.put(str(checked), f"{s3_bucket}/c.h5")
    s3.put(write_beside(checked, document(checked, "t", filters="deflate fletcher32")),
           f"{s3_bucket}/c.h5.dmrpp")  # fmt: skip
    proxy.clear()
    index_source(f"s3://{s3_bucket}/c.h5", from_dmrpp="only", storage_options=options)
    assert sorted((r.method, r.path.rpartition("/")[2], r.range is not None)
                  for r in proxy.requests) == [
        ("GET", "c.h5", True), ("GET", "c.h5.dmrpp", False), ("HEAD", "c.h5", False)
    ]  # fmt: skip


def test_index_dmrpp_over_https_sources(tmp_path: Path) -> None:
    """A document and its granule on web servers (127.0.0.1): the placeholder resolves to the
    granule's URL, and the values read back through it."""
    from tests.sources.ranges_server import ranges_server

    local = _granule(tmp_path / "a.h5", 0)
    doc = Path(write_beside(local, document(local, "t", filters="shuffle deflate")))
    with ranges_server(local) as granule, ranges_server(doc) as served:
        refs = index_dmrpp(served.url, granule.url)
        assert refs.source.url == granule.url and refs.source.size == local.stat().st_size
        assert refs.arrays["t"].manifest.urls == (granule.url,)
        group = open_plain(write_json(refs, tmp_path / "refs.json"), "http")
        with h5py.File(local) as f:
            np.testing.assert_array_equal(group["t"][...], f["t"][...])
