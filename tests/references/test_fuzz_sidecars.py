"""Fuzzing the sidecar parser and what the gateway builds from a sidecar.

Sidecars are untrusted input.  Whatever a JSON sidecar holds, reading it raises nothing but
``InvalidReferenceError`` (or succeeds), and a sidecar that parses yields Zarr v2 and v3
documents, a landing summary and a quick-look window without any error outside
``H5SidecarError`` (which the gateway maps to 4xx) -- never a builtin exception (HTTP 500).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import h5sidecar
from h5sidecar.errors import H5SidecarError, InvalidReferenceError
from h5sidecar.references import read_refs, write_json
from tests.references._h5refs import edit_zarray

VAR = "values"

_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=12),
)  # fmt: skip
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=8,
)
_dims = st.lists(st.integers(min_value=-2, max_value=2**64), min_size=0, max_size=4)
_dtypes = st.one_of(
    st.sampled_from(["<i4", "<f8", "|u1", "<U5", "|S3", "|O", "|V8", "<zz", "|V99999999999",
                     "<U999999999999", "", "M8[ns]", "<m8", "b1", "c16"]),
    st.lists(st.lists(st.one_of(st.text(max_size=3), st.sampled_from(["<i4", "|u1"]),
                                st.integers(-1, 3)), max_size=3), max_size=3),
    _json,
)  # fmt: skip
_codecs = st.one_of(
    st.none(),
    st.fixed_dictionaries({"id": st.sampled_from(["zlib", "gzip", "shuffle", "no-such", "blosc"])},
                          optional={"level": st.integers(-5, 20), "elementsize": st.integers(-1, 9)}),
    _json,
)  # fmt: skip
_zarray_changes = st.fixed_dictionaries(
    {},
    optional={"shape": _dims | _json, "chunks": _dims | _json, "dtype": _dtypes,
              "fill_value": _json, "order": st.sampled_from(["C", "F", "X"]) | _json,
              "compressor": _codecs, "filters": st.lists(_codecs, max_size=2) | _json,
              "zarr_format": st.sampled_from([2, 3]) | _json,
              "dimension_separator": st.sampled_from([".", "/"]) | _json},
)  # fmt: skip
_chunk_refs = st.one_of(
    st.lists(st.one_of(st.text(max_size=8), st.integers(-(2**65), 2**65)), max_size=4),
    st.text(max_size=10), _json,
)  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("fuzz")
    with h5py.File(root / "g.h5", "w") as f:
        f.create_dataset(VAR, data=np.arange(4000, dtype="i4"), chunks=(1000,))
    write_json(h5sidecar.index_granule(str(root / "g.h5")), root / "g.h5.json")
    return root, json.loads((root / "g.h5.json").read_text())


def _plant(doc: dict[str, Any], zchanges: dict[str, Any], chunk: Any, source: Any,
           extras_array: Any) -> dict[str, Any]:  # fmt: skip
    doc = edit_zarray(doc, VAR, **zchanges)
    refs = doc["refs"]
    if chunk is not None:
        refs[f"{VAR}/1"] = chunk
    if source is not None:
        doc["h5sidecar"]["source"] = source
    if extras_array is not None:
        doc["h5sidecar"]["arrays"][VAR] = extras_array
    return doc


def _exercise(refs: Any) -> None:
    """What the gateway derives from a parsed sidecar, without any source I/O."""
    from h5sidecar.gateway._landing import describe
    from h5sidecar.gateway._quicklook import _window
    from h5sidecar.read.zarr._keyspace import GranuleKeys

    for fmt in (2, 3):
        keys = GranuleKeys(refs, fmt)
        for key in list(keys.documents)[:20]:
            keys.resolve(key)
    describe(refs)
    for arr in refs.arrays.values():
        _window(arr.meta.shape)
        arr.zarray_fill_value()


# max_examples comes from the profile (tests/conftest.py): the "fuzz" profile draws many more
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(zchanges=_zarray_changes, chunk=st.none() | _chunk_refs,
       source=st.none() | _json, extras_array=st.none() | _json)  # fmt: skip
# issue 26: zarr's dtype parser raised OverflowError (the gateway's 500) on this one
@example(zchanges={"fill_value": 2147483648}, chunk=None, source=None, extras_array=None)
@example(zchanges={"fill_value": "AAAA", "dtype": "<f8"}, chunk=None, source=None,
         extras_array=None)  # issue 28 item 8: a bare TypeError
def test_parser_raises_only_invalid_reference(base, zchanges, chunk, source, extras_array) -> None:
    root, doc = base
    path = root / "fuzzed.h5.json"
    path.write_text(json.dumps(_plant(doc, zchanges, chunk, source, extras_array)))
    try:
        refs = read_refs(path)
    except InvalidReferenceError:
        return
    with contextlib.suppress(H5SidecarError):
        _exercise(refs)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_garbage_documents_are_invalid(base, text: str) -> None:
    root, _ = base
    path = root / "garbage.h5.json"
    path.write_text(text)
    with contextlib.suppress(InvalidReferenceError):
        read_refs(path)
