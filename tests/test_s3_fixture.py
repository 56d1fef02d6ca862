"""The moto S3 server fixture works through s3fs exactly as users reach S3."""

from __future__ import annotations


def test_s3_roundtrip_with_ranges(s3, s3_bucket: str) -> None:  # type: ignore[no-untyped-def]
    data = bytes(range(256)) * 4
    s3.pipe(f"{s3_bucket}/obj.bin", data)
    info = s3.info(f"{s3_bucket}/obj.bin")
    assert info["size"] == len(data)
    assert info["ETag"]
    assert s3.cat_file(f"{s3_bucket}/obj.bin", start=10, end=20) == data[10:20]
