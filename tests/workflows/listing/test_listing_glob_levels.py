"""An S3 glob of several levels without ``**`` (``s3://b/a/*/c/*.h5``) is listed level by level:
a delimited listing of each wildcard level, only under the folders that matched the levels
before, instead of every key under its literal head (``a/``); counted at the server (moto,
through the recording proxy)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from h5sidecar.workflows.listing._listing import list_granules
from tests.conftest import moto_seed
from tests.faultproxy import FaultProxy
from tests.workflows.listing.test_listing_globs import _globbed


def _listings(proxy: FaultProxy) -> list[tuple[str, str]]:
    """``(prefix, delimiter)`` of every ``ListObjectsV2`` request the server received."""
    out = []
    for r in proxy.requests:
        query = parse_qs(r.query)
        if r.method == "GET" and query.get("list-type") == ["2"]:
            out.append((query.get("prefix", [""])[0], query.get("delimiter", [""])[0]))
    return sorted(out)


def test_a_glob_of_several_levels_lists_only_the_matching_folders(
        s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any], proxy: FaultProxy) -> None:
    b = s3_bucket
    keys = {f"{b}/a/{y}/c/g{i}.h5": b"x" for y in ("2019", "2020", "x21") for i in range(3)}
    keys[f"{b}/a/2020/c/readme.txt"] = b"x"
    keys[f"{b}/a/2020/c/deeper/g9.h5"] = b"x"  # below c/: not matched by c/*.h5
    keys[f"{b}/a/2020/d/g0.h5"] = b"x"
    # what the glob leaves out: 1,200 keys under a/2019/other/ (two pages of a full listing)
    keys.update({f"{b}/a/2019/other/{i // 100}/o{i:04d}.h5": b"x" for i in range(1_200)})
    moto_seed(keys)
    s3.invalidate_cache()
    opts = {**s3_storage_options, "endpoint_url": proxy.url}
    for glob, folders in (("a/*/c/*.h5", ("2019", "2020", "x21")),
                          ("a/20[12]?/c/g[01].h5", ("2019", "2020"))):  # fmt: skip
        expected = _globbed(s3, f"{b}/{glob}", "s3")
        assert expected  # the glob finds granules (fsspec's glob, listing everything)
        proxy.clear()
        found = list_granules(f"s3://{b}/{glob}", storage_options=opts)
        assert [(g.name, g.url, g.identity) for g in found] == expected, glob
        # a/ listed by folder, then c/ of each year the first level matched: nothing else
        head = glob.split("/")[1].split("*")[0].split("[")[0]
        assert _listings(proxy) == sorted([(f"a/{head}", "/"), *(
            (f"a/{y}/c/{glob.rsplit('/', 1)[1].split('*')[0].split('[')[0]}", "/")
            for y in folders)]), glob  # fmt: skip
