"""A JSON sidecar's manifests of a few chunks are built in plain Python
(``few_chunks_manifest``); they equal the general path's, and whatever that path refuses is
left to it (so it names what is wrong)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import GranuleRefs
from h5sidecar.references._assemble import build_manifest
from h5sidecar.references._keys import parse_chunk_names
from h5sidecar.references._manifest import ChunkManifest
from h5sidecar.references.json_sidecar import _kerchunk_json
from h5sidecar.references.json_sidecar._json_lazy import decode_json_lazy
from h5sidecar.references.json_sidecar._kerchunk_json import (
    FEW_CHUNKS,
    chunk_columns,
    encode_json,
    few_chunks_manifest,
)
from tests.references._strategies import granule_refs
from tests.references.test_manifests_file_small import _same_layout

U, V = "s3://bucket/g.h5", "s3://bucket/other.h5"


def _general(grid: tuple[int, ...], names: list[str], values: list[Any],
             order: tuple[str, ...] | None) -> ChunkManifest:
    flat = parse_chunk_names(names, grid, "a")
    return build_manifest("a", grid, chunk_columns("a", flat, values, {}), order)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(granule_refs())
def test_lazy_json_manifests_equal_the_general_paths(g: GranuleRefs) -> None:
    data = encode_json(g)
    fast = decode_json_lazy(data)
    with mock.patch.object(_kerchunk_json, "FEW_CHUNKS", 0):  # every array the general way
        general = decode_json_lazy(data)
        for path in g.arrays:
            general.arrays[path].manifest  # noqa: B018 - built under the patch
    for path, arr in g.arrays.items():
        got, want = fast.arrays[path].manifest, general.arrays[path].manifest
        assert got == want == arr.manifest, path
        _same_layout(got, want)


@pytest.mark.parametrize(("grid", "names", "values", "order"), [
    ((3,), ["0"], [[U, 10, 4]], None),
    ((3,), ["2", "0"], [[U, 10, 4], [V, 0, 7]], None),  # URLs in order of appearance
    ((3,), ["2", "0"], [[U, 10, 4], [V, 0, 7]], (V, U)),  # the extras' order
    ((2, 3), ["1.2", "0.0", "0.1"], [[U, 1, 2], [U, 3, 4], [U, 5, 6]], (U,)),
    ((), ["0"], [[U, 0, 8]], None),  # 0-d
    ((4,), ["01"], [[U, 2**63 - 1, 1]], None),  # leading zero; the largest offset
    ((1,), ["0"], ["base64:AAAAAAB4eEA="], ()),  # an inline coordinate
    ((3,), ["0", "2"], ["text", [U, 0, 4]], (U,)),  # inline text beside a byte range
])  # fmt: skip
def test_few_chunks_equal_the_general_path(grid: tuple[int, ...], names: list[str],
                                           values: list[Any], order: tuple[str, ...] | None
                                           ) -> None:
    got = few_chunks_manifest(grid, names, values, order)
    assert got is not None
    want = _general(grid, names, values, order)
    assert got == want
    _same_layout(got, want)
    assert got.urls == want.urls and np.array_equal(got.codes, want.codes)


@pytest.mark.parametrize(("grid", "names", "values", "order", "match"), [
    ((3,), ["0.0"], [[U, 0, 4]], None, "dot-separated"),
    ((3,), ["x"], [[U, 0, 4]], None, "non-negative integers"),
    ((3,), ["-1"], [[U, 0, 4]], None, "non-negative integers"),
    ((3,), ["\u00b2"], [[U, 0, 4]], None, "non-negative integers"),  # a digit, not ASCII
    ((3,), ["3"], [[U, 0, 4]], None, "outside the chunk grid"),
    ((3,), ["1", "01"], [[U, 0, 4], [U, 4, 4]], None, "same chunk"),
    ((3,), ["0"], [[U, -1, 4]], None, "offsets must be >= 0"),
    ((3,), ["0"], [[U, 0, 0]], None, "lengths > 0"),
    ((3,), ["0"], [[U, 1.5, 4]], None, "must be integers"),
    ((3,), ["0"], [[U, True, 4]], None, "must be integers"),
    ((3,), ["0"], [[U, 2**64, 4]], None, "must be integers|malformed"),
    ((3,), ["0"], [[U]], None, "whole-object reference"),
    ((3,), ["0"], [{"url": U}], None, "neither"),
    ((3,), ["0"], [[None, 0, 4]], None, "no URL"),
    ((3,), ["0"], [[U, 0, 4]], (V,), "not among"),
    ((3,), ["0"], ["base64:@@@"], None, "not valid base64"),
    ((3,), ["0", "00"], ["x", [U, 0, 4]], None, "same chunk"),  # inline and a byte range
])  # fmt: skip
def test_what_the_general_path_refuses_is_left_to_it(
    grid: tuple[int, ...], names: list[str], values: list[Any], order: tuple[str, ...] | None,
    match: str,
) -> None:
    assert few_chunks_manifest(grid, names, values, order) is None
    with pytest.raises(InvalidReferenceError, match=match):
        _general(grid, names, values, order)


def test_many_chunks_take_the_general_path() -> None:
    many = [str(i) for i in range(FEW_CHUNKS + 1)]
    refs = [[U, 8 * i, 8] for i in range(FEW_CHUNKS + 1)]
    assert few_chunks_manifest((FEW_CHUNKS + 1,), many, refs, None) is None
    assert few_chunks_manifest((3,), [], [], None) is None  # nothing stored: general path
