"""Batch indexing of an S3 prefix on the moto server, sidecars on S3 too; resume by ETag."""

from __future__ import annotations

from pathlib import Path

from h5sidecar.references import read_refs
from h5sidecar.workflows import index_many, read_report
from tests.workflows.conftest import assert_matches_h5py, write_granule


def test_index_s3_prefix_to_s3(tmp_path: Path, s3, s3_bucket: str, s3_storage_options) -> None:
    # small granules: moto copies the whole object on every ranged GET
    local = {f"G{i}.h5": write_granule(tmp_path / f"G{i}.h5", seed=i, n=2000) for i in range(2)}
    for name, path in local.items():
        s3.put(str(path), f"{s3_bucket}/in/{name}")
    s3.pipe(f"{s3_bucket}/in/bad.h5", b"not an HDF5 file at all" * 10)
    source, dest = f"s3://{s3_bucket}/in", f"s3://{s3_bucket}/out"
    report = index_many(source, dest, storage_options=s3_storage_options, workers=2)
    by_name = {g.name: g for g in report.granules}
    assert set(by_name) == {"G0.h5", "G1.h5", "bad.h5"}
    assert by_name["bad.h5"].status == "failed" and by_name["bad.h5"].error.kind == "not_hdf5"
    for name, path in local.items():
        g = by_name[name]
        assert g.status == "ok", g.error
        assert g.sidecar == f"{dest}/{name}.parq"
        refs = read_refs(g.sidecar, storage_options=s3_storage_options)
        info = s3.info(f"{s3_bucket}/in/{name}")
        assert refs.source.url == f"{source}/{name}"
        assert refs.source.size == info["size"] and refs.source.etag == info["ETag"].strip('"')
        assert_matches_h5py(g.sidecar, path, s3_storage_options, remote_protocol="s3")
    assert read_report(dest, storage_options=s3_storage_options).counts["failed"] == 1
    # unchanged objects are up to date; a replaced object (new ETag) is re-indexed
    write_granule(tmp_path / "new.h5", seed=7, n=2500)
    s3.put(str(tmp_path / "new.h5"), f"{s3_bucket}/in/G1.h5")
    again = index_many(source, dest, storage_options=s3_storage_options, executor="serial")
    status = {g.name: g.status for g in again.granules}
    assert status == {"G0.h5": "up_to_date", "G1.h5": "ok", "bad.h5": "failed"}
    assert_matches_h5py(f"{dest}/G1.h5.parq", tmp_path / "new.h5", s3_storage_options,
                        remote_protocol="s3")
    # an object-store Parquet write killed before its commit marker (.zmetadata, written last)
    # leaves record files only: that sidecar counts as absent and is rewritten
    s3.rm(f"{s3_bucket}/out/G0.h5.parq/.zmetadata")
    third = index_many(source, dest, storage_options=s3_storage_options, executor="serial")
    assert {g.name: g.status for g in third.granules}["G0.h5"] == "ok"
    assert_matches_h5py(f"{dest}/G0.h5.parq", local["G0.h5"], s3_storage_options,
                        remote_protocol="s3")
