"""Request budget of ``verify_refs`` on S3: the kerchunk Parquet sidecar's record files are
read once, in one round, and the source's metadata once for all checks (the doc's batch example
took minutes against the S3 server: a HEAD and a GET per record file per check, and the
source's metadata again for every group each check opened)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from h5sidecar.workflows import index_many, verify_refs
from tests.faultproxy import FaultProxy
from tests.workflows.conftest import write_granule


def test_verify_on_s3_reads_each_record_file_once(
    tmp_path: Path, s3, s3_bucket: str, s3_storage_options: dict[str, Any], proxy: FaultProxy
) -> None:
    src = write_granule(tmp_path / "g.h5", n=40_000)
    s3.put(str(src), f"{s3_bucket}/in/g.h5")
    report = index_many(f"s3://{s3_bucket}/in/g.h5", f"s3://{s3_bucket}/out",
                        storage_options=s3_storage_options, executor="serial")  # fmt: skip
    opts = {**s3_storage_options, "endpoint_url": proxy.url}
    assert report.ok, report.to_dict()
    sidecar = report.granules[0].sidecar
    records = [p for p in s3.find(sidecar.split("://", 1)[1]) if p.endswith(".parq")
               and "/refs." in p]  # fmt: skip
    proxy.clear()
    checked = verify_refs(sidecar, sample=0, storage_options=opts)
    assert checked.ok and checked.reader == "fsspec", checked.to_dict()
    reads = Counter((r.method, r.path) for r in proxy.requests)
    on_records = {k: n for k, n in reads.items() if "/refs." in k[1]}
    assert len(records) == 6
    assert on_records == {("GET", f"/{p}"): 1 for p in records}, on_records
    on_source = sum(n for (method, path), n in reads.items() if path.endswith("/in/g.h5"))
    chunks = sum(v.chunks_checked for v in checked.variables)
    # each chunk through the plain reader for the raw and the decoded check, the rest metadata
    assert on_source <= 2 * chunks + 6, (on_source, chunks, reads)
