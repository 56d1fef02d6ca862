"""A run given a list of URLs records what the list was (how many, their digest, the file), not
every URL as a source root: the record, the export and an object-store part's footer stay O(1)
in the list's length, re-runs still resume, the gateway still serves each granule from its row,
and DESTs whose runs kept every URL as a root still read."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pyarrow.parquet as pq

from h5sidecar.dest import RunReport, write_report
from h5sidecar.dest._record_parts import part_meta
from h5sidecar.workflows import UrlList, index_many, read_report
from tests.gateway._http import gateway
from tests.workflows.conftest import assert_matches_h5py, write_granule


def _listed(tmp_path: Path, n: int = 3) -> tuple[list[Path], Path]:
    """``n`` granules in two folders (no common prefix a root could stand for) and their list."""
    paths = [write_granule(tmp_path / f"src{i % 2}" / f"G{i}.h5", seed=i, n=1500)
             for i in range(n)]  # fmt: skip
    urls = tmp_path / "urls.txt"
    urls.write_text("# granules\n" + "".join(f"{p}\n" for p in reversed(paths)))
    return paths, urls


def _digest(paths: list[Path]) -> str:
    """SHA-256 of the URLs in name order, one line each."""
    return hashlib.sha256("".join(f"{p}\n" for p in sorted(paths, key=lambda p: p.name))
                          .encode()).hexdigest()  # fmt: skip


def _roots_table(dest: Path) -> list[str]:
    with sqlite3.connect(dest / "_h5sidecar.sqlite") as db:
        return [r for (r,) in db.execute("SELECT root FROM roots ORDER BY seq")]


def test_a_url_list_run_records_the_list_not_its_urls(tmp_path: Path) -> None:
    paths, urls = _listed(tmp_path)
    dest = tmp_path / "dest"
    report = index_many(UrlList(urls), str(dest), executor="serial")
    assert report.ok and report.counts["ok"] == 3
    listed = {"urls": 3, "sha256": _digest(paths), "file": str(urls)}
    assert report.roots == () and report.options["url_list"] == listed
    assert _roots_table(dest) == []  # no row per URL
    on_disk = read_report(str(dest))
    assert on_disk.roots == () and on_disk.source_roots == ()
    assert on_disk.options["url_list"] == listed and on_disk.source == "(a list of 3 URLs)"
    for p in paths:
        assert_matches_h5py(str(dest / f"{p.name}.parq"), p)

    # a re-run resumes from the rows (the same list in another order: the same digest)
    again = index_many([str(p) for p in paths], str(dest), executor="serial")
    assert again.counts["up_to_date"] == 3 and again.options["url_list"]["sha256"] == _digest(paths)
    assert "file" not in again.options["url_list"]  # a Python list has none
    assert _roots_table(dest) == []

    # a later run over a prefix adds its root, and the gateway serves every granule
    assert index_many(str(tmp_path / "src0"), str(dest), executor="serial").ok
    assert _roots_table(dest) == [str(tmp_path / "src0")]
    with gateway(str(dest)) as (url, _app):
        for p in paths:  # the list's granules of src1 are under no root: allowed from the rows
            r = httpx.get(f"{url}/zarr/{p.name}/gt1l/heights/quality/0", timeout=30)
            assert r.status_code == 200, r.text
            with h5py.File(p) as f:
                np.testing.assert_array_equal(np.frombuffer(r.content, "i1"),
                                              f["gt1l/heights/quality"][:1000])  # fmt: skip


def test_a_dest_whose_runs_kept_every_url_still_reads(tmp_path: Path) -> None:
    """Runs before kept each URL of a list as a root: such a record still reads and serves, and
    a new list run adds no root to it."""
    paths, urls = _listed(tmp_path)
    dest = tmp_path / "dest"
    first = index_many(UrlList(urls), str(dest), executor="serial")
    old = replace(first, roots=tuple(str(p) for p in sorted(paths, key=lambda p: p.name)),
                  options={k: v for k, v in first.options.items() if k != "url_list"})
    (dest / "_h5sidecar.sqlite").unlink()
    write_report(old, str(dest), merge=False)  # the record as an older version wrote it
    assert _roots_table(dest) == list(old.roots)
    assert read_report(str(dest)).source_roots == old.roots
    again = index_many(UrlList(urls), str(dest), executor="serial")
    assert again.counts["up_to_date"] == 3
    assert read_report(str(dest)).roots == old.roots  # kept, nothing added
    with gateway(str(dest)) as (url, _app):
        r = httpx.get(f"{url}/zarr/{paths[1].name}/gt1l/heights/quality/0", timeout=30)
        assert r.status_code == 200, r.text


def test_an_object_store_part_holds_the_list_not_its_urls(
        tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]) -> None:
    paths, _ = _listed(tmp_path)
    for p in paths:
        s3.put(str(p), f"{s3_bucket}/in/{p.parent.name}/{p.name}")
    urls = [f"s3://{s3_bucket}/in/{p.parent.name}/{p.name}" for p in paths]
    dest = f"s3://{s3_bucket}/out"
    report = index_many(urls, dest, executor="serial", storage_options=s3_storage_options)
    assert report.ok
    s3.invalidate_cache()
    parts = [p for p in s3.ls(f"{s3_bucket}/out/_h5sidecar_record") if p.endswith(".parquet")]
    assert parts
    for part in parts:
        with s3.open(part, "rb") as f:
            meta = part_meta(pq.ParquetFile(f))
        assert meta["roots"] == []
        for run in meta["runs"]:
            assert run["report"]["roots"] == [] and run["report"]["options"]["url_list"]["urls"] == 3
    on_disk = read_report(dest, storage_options=s3_storage_options)
    assert on_disk.source_roots == () and on_disk.counts["ok"] == 3
    again = index_many(list(reversed(urls)), dest, executor="serial",
                       storage_options=s3_storage_options)  # fmt: skip
    assert again.counts["up_to_date"] == 3
    for p, u in zip(paths, urls, strict=True):
        assert_matches_h5py(f"{dest}/{p.name}.parq", p, s3_storage_options, remote_protocol="s3")
        assert u in {g.url for g in on_disk.granules}


def test_an_old_list_report_with_every_url_merges_them_once() -> None:
    """Merging keeps an older report's URL roots (what it allowed) and adds none of a list."""
    from h5sidecar.dest._report_io import merge_reports

    base = RunReport("(a list of 2 URLs)", "d", "parquet", {}, "a", "b", 1.0, (),
                     roots=("/s/a.h5", "/s/b.h5"))  # fmt: skip
    new = RunReport("(a list of 2 URLs)", "d", "parquet", {"url_list": {"urls": 2}}, "a", "b",
                    1.0, ())  # fmt: skip
    assert merge_reports(base, new).roots == ("/s/a.h5", "/s/b.h5")
    assert merge_reports(new, new).roots == ()
    prefix = RunReport("/s", "d", "parquet", {}, "a", "b", 1.0, ())
    assert merge_reports(new, prefix).roots == ("/s",)
    assert merge_reports(prefix, new).roots == ("/s",)
