"""kerchunk JSON v1: layout, lossless round trips, kerchunk's own sidecars, malformed input."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import (
    INLINE,
    MISSING,
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    SourceInfo,
    from_kerchunk,
    to_kerchunk,
)
from h5sidecar.references.json_sidecar._kerchunk_json import decode_json, encode_json
from tests.references._h5refs import kerchunk_translate, refs_from_h5, write_sample
from tests.references._strategies import granule_refs


def small_refs() -> GranuleRefs:
    """A 2x3 grid with byte ranges, a missing chunk, an ASCII and a binary inline chunk."""
    manifest = ChunkManifest.from_arrays(
        urls=["s3://bucket/g.h5"],
        codes=np.array([[0, MISSING, 0], [INLINE, 0, INLINE]]),
        offsets=np.array([[100, 0, 5], [0, 300, 0]]),
        lengths=np.array([[50, 0, 6], [0, 70, 0]]),
        inline={3: b"abc", 5: b"\x00\xff"},
    )
    meta = ArrayMeta(
        shape=(4, 6),
        chunks=(2, 2),
        dtype="<i4",
        fill_value=-9,
        dimension_names=("y", "x"),
        attrs={"units": "m/s"},
    )
    arr = ArrayRefs(
        "g/v",
        meta,
        manifest,
        note="partly inline",
        checksums=np.arange(6, dtype=np.uint64).reshape(2, 3),
    )
    scalar = ArrayRefs(
        "s",
        ArrayMeta(shape=(), chunks=(), dtype="<f8"),
        ChunkManifest.from_arrays(
            urls=["s3://bucket/g.h5"], codes=np.array(0), offsets=np.array(8), lengths=np.array(8)
        ),
    )
    return GranuleRefs(
        SourceInfo("s3://bucket/g.h5", 1000, etag="abc"),
        {"": {"title": "t"}},
        {"g/v": arr, "s": scalar},
        extra={"indexer": "test"},
    )


def test_layout_is_kerchunk_v1() -> None:
    d = to_kerchunk(small_refs())
    refs = d["refs"]
    assert d["version"] == 1
    consolidated = json.loads(refs[".zmetadata"])
    assert consolidated["zarr_consolidated_format"] == 1
    assert set(consolidated["metadata"]) == {
        ".zgroup",
        ".zattrs",
        "g/.zgroup",
        "g/.zattrs",
        "g/v/.zarray",
        "g/v/.zattrs",
        "s/.zarray",
        "s/.zattrs",
    }
    for key, doc in consolidated["metadata"].items():  # every document also under its own key
        assert isinstance(refs[key], str) and json.loads(refs[key]) == doc
    assert json.loads(refs["g/v/.zattrs"])["_ARRAY_DIMENSIONS"] == ["y", "x"]
    assert refs["g/v/0.0"] == ["s3://bucket/g.h5", 100, 50]
    assert refs["g/v/1.1"] == ["s3://bucket/g.h5", 300, 70]
    assert "g/v/0.1" not in refs  # missing chunks have no key
    assert refs["g/v/1.0"] == "abc"  # ASCII inline as text, as kerchunk does
    assert refs["g/v/1.2"] == "base64:" + base64.b64encode(b"\x00\xff").decode()
    assert refs["s/0"] == ["s3://bucket/g.h5", 8, 8]  # 0-d arrays: key "0"
    assert d["h5sidecar"]["source"]["etag"] == "abc"


def test_text_writer_matches_dict() -> None:
    g = small_refs()
    assert json.loads(encode_json(g)) == json.loads(json.dumps(to_kerchunk(g)))


def test_roundtrip_small() -> None:
    g = small_refs()
    assert from_kerchunk(to_kerchunk(g)) == g
    assert decode_json(encode_json(g)) == g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(granule_refs())
def test_roundtrip_random(g: GranuleRefs) -> None:
    text = encode_json(g)
    assert decode_json(text) == g
    assert from_kerchunk(to_kerchunk(g)) == g
    assert json.loads(text) == json.loads(json.dumps(to_kerchunk(g)))


def test_ascii_inline_starting_with_base64_prefix_is_encoded() -> None:
    from h5sidecar.references.json_sidecar._kerchunk_json import decode_inline, encode_inline

    assert encode_inline(b"base64:x").startswith("base64:")
    assert decode_inline(encode_inline(b"base64:x")) == b"base64:x"


def test_reads_kerchunk_json(tmp_path: Path) -> None:
    pytest.importorskip("kerchunk.hdf")
    h5 = write_sample(tmp_path / "s.h5")
    theirs = from_kerchunk(kerchunk_translate(h5))
    ours = refs_from_h5(h5)
    # no extras: identity is unknown, the URL comes from the first chunk
    assert theirs.source == SourceInfo(url=str(h5), size=-1)
    assert theirs.skipped == () and dict(theirs.extra) == {}
    assert set(theirs.arrays) == set(ours.arrays)
    for path, arr in ours.arrays.items():
        assert theirs.arrays[path].manifest == arr.manifest, path
        assert theirs.arrays[path].meta.filters == arr.meta.filters, path
        assert theirs.arrays[path].meta.fill_value == arr.meta.fill_value, path


def test_templates_are_rendered() -> None:
    d = to_kerchunk(small_refs())
    d["templates"] = {"u": "s3://bucket/g.h5"}
    d["refs"]["g/v/0.0"] = ["{{u}}", 100, 50]
    assert from_kerchunk(d) == small_refs()


def _mutate(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(to_kerchunk(small_refs()))
    target = d
    for p in path[:-1]:
        target = target[p]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return d


_DELETE = object()
_ZARRAY = json.loads(to_kerchunk(small_refs())["refs"]["g/v/.zarray"])


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("version",), 2, "version 2 is not supported"),
        (("refs",), _DELETE, "needs a 'refs' object"),
        (("gen",), [{"key": "x"}], "'gen'"),
        (("refs", "g/v/.zarray"), "{not json", "not valid JSON"),
        (("refs", "g/v/.zarray"), 5, "must be a JSON document"),
        (("refs", "g/v/.zarray"), json.dumps({**_ZARRAY, "shape": [4, -6]}), "non-negative"),
        (("refs", "g/v/.zarray"), json.dumps({**_ZARRAY, "dimension_separator": "/"}), "separator"),
        (("refs", "g/v/.zarray"), json.dumps({"zarr_format": 2}), "lacks shape, chunks, dtype"),
        (("refs", "g/v/.zarray"), json.dumps({**_ZARRAY, "filters": [{"x": 1}]}), "codec configs"),
        (("refs", "g/v/.zarray"), json.dumps({**_ZARRAY, "chunks": [2]}), "differ in rank"),
        (("refs", "g/v/.zattrs"), json.dumps({"_ARRAY_DIMENSIONS": ["x"]}), "dimension names"),
        (("refs", "zarr.json"), "{}", "Zarr v3"),
        (("refs", "g/v/9.0"), ["s3://bucket/g.h5", 0, 4], "outside the chunk grid"),
        (("refs", "g/v/0"), ["s3://bucket/g.h5", 0, 4], "dot-separated"),
        (("refs", "g/v/0.x"), ["s3://bucket/g.h5", 0, 4], "non-negative integers"),
        (("refs", "g/v/0.0"), ["s3://bucket/g.h5", -1, 4], "offsets must be >= 0"),
        (("refs", "g/v/0.0"), ["s3://bucket/g.h5", 0, 0], "lengths > 0"),
        (("refs", "g/v/0.0"), ["s3://bucket/g.h5", 1.5, 4], "must be integers"),
        (("refs", "g/v/0.0"), ["s3://bucket/g.h5"], "whole-object reference"),
        (("refs", "g/v/0.0"), {"url": "x"}, "neither"),
        (("refs", "g/v/0.0"), [None, 0, 4], "no URL"),
        (("refs", "g/v/0.0"), ["s3://elsewhere/g.h5", 0, 4], "not among"),
        (("refs", "g/v/0.0"), ["s3://bucket/g.h5", 990, 50], "past the end"),
        (("refs", "g/v/1.2"), "base64:@@@", "not valid base64"),
        (("refs", "nope/0"), ["s3://bucket/g.h5", 0, 4], "belongs to no array"),
        (("refs", "g/.zattrs"), "[]", "must hold a JSON object"),
        (("h5sidecar", "version"), 99, "extras version 99"),
        (("h5sidecar", "source"), _DELETE, "source identity"),
        (("h5sidecar", "source", "size"), "big", "malformed source identity"),
        (("h5sidecar", "arrays", "ghost"), {"status": "virtual"}, "has no .zarray"),
        (("h5sidecar", "arrays", "g/v", "status"), "gone", "status"),
        (("h5sidecar", "arrays", "g/v", "urls"), [7], "outside the url table"),
        (("h5sidecar", "arrays", "g/v", "checksums"), "base64:AAAA", "checksums for a chunk"),
        (("h5sidecar", "skipped"), [{"path": "x", "kind": "bogus", "reason": ""}], "unknown kind"),
    ],
)
def test_malformed(path: tuple[Any, ...], value: Any, match: str) -> None:
    with pytest.raises(InvalidReferenceError, match=match):
        from_kerchunk(_mutate(path, value))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (None, "not valid JSON"),  # truncated
    ],
)
def test_malformed_text(data: bytes | None, match: str) -> None:
    text = encode_json(small_refs())[:-20] if data is None else data
    with pytest.raises(InvalidReferenceError, match=match):
        decode_json(text)


def test_version_0_refs_are_read() -> None:
    d = to_kerchunk(small_refs())
    v0 = {**d["refs"], "h5sidecar": d["h5sidecar"]}
    assert from_kerchunk(v0) == small_refs()
