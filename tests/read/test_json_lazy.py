"""Lazy JSON sidecars: ``read_refs`` parses the file but builds an array's manifest only when it
is first used; the result equals the eager parse, values equal h5py."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.read import read_arrays
from h5sidecar.references import GranuleRefs, read_refs, write_json
from h5sidecar.references._lazy_refs import LazyArrayRefs
from tests._granules import read_h5

NAMED = ("gt1l/heights/h_ph", "gt1l/heights/lat_ph", "gt2r/heights/lon_ph")


@pytest.fixture(scope="module")
def sidecar(atl03_refs: GranuleRefs, tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_json(atl03_refs, tmp_path_factory.mktemp("jsonlazy") / "g.h5.json")


def test_reading_named_arrays_builds_only_their_manifests(sidecar: str, atl03_h5: Path) -> None:
    refs = read_refs(sidecar)
    assert len(refs.arrays) > 900
    assert all(isinstance(a, LazyArrayRefs) for a in refs.arrays.values())
    assert not any(a.manifest_loaded for a in refs.arrays.values())
    got = read_arrays(refs, list(NAMED))
    loaded = {p for p, a in refs.arrays.items() if a.manifest_loaded}
    assert loaded == set(NAMED)
    for path in NAMED:
        np.testing.assert_array_equal(got[path], read_h5(atl03_h5, path))


def test_lazy_equals_eager(sidecar: str, atl03_refs: GranuleRefs) -> None:
    lazy = read_refs(sidecar)
    eager = read_refs(sidecar, lazy=False)
    assert not any(isinstance(a, LazyArrayRefs) for a in eager.arrays.values())
    assert lazy == eager == atl03_refs
    for path, arr in eager.arrays.items():
        assert lazy.arrays[path].zarray_fill_value() == arr.zarray_fill_value(), path
        assert lazy.arrays[path].urls == arr.urls, path
        assert lazy.arrays[path].status == arr.status, path


def test_pickles_with_built_and_unbuilt_manifests(sidecar: str, atl03_h5: Path) -> None:
    refs = read_refs(sidecar)
    first = refs.arrays[NAMED[0]].manifest  # built: its parsed references are dropped
    back = pickle.loads(pickle.dumps(refs))
    assert back.arrays[NAMED[0]].manifest_loaded and not back.arrays[NAMED[1]].manifest_loaded
    assert back.arrays[NAMED[0]].manifest == first
    got = read_arrays(back, list(NAMED))
    for path in NAMED:
        np.testing.assert_array_equal(got[path], read_h5(atl03_h5, path))


def test_unbuilt_arrays_are_charged_to_the_sidecar_cache(sidecar: str) -> None:
    refs = read_refs(sidecar)
    before = refs.nbytes
    assert before > 0  # parsed references in memory count before any manifest is built
    refs.arrays[NAMED[0]].manifest  # noqa: B018 - builds it
    assert refs.nbytes > 0


def test_malformed_chunk_references_fail_when_first_used(sidecar: str, tmp_path: Path) -> None:
    doc = json.loads(Path(sidecar).read_text())
    key = next(k for k in doc["refs"] if k.startswith(NAMED[1] + "/") and k[-1].isdigit())
    doc["refs"][key] = ["s3://elsewhere/x.h5", -5, 10]  # negative offset, unknown URL
    bad = tmp_path / "bad.h5.json"
    bad.write_text(json.dumps(doc))
    refs = read_refs(bad)  # other arrays stay readable
    assert refs.arrays[NAMED[0]].manifest.n_stored > 0
    with pytest.raises(InvalidReferenceError, match=NAMED[1]):
        refs.arrays[NAMED[1]].manifest  # noqa: B018
    with pytest.raises(InvalidReferenceError):
        read_refs(bad, lazy=False)


def test_stray_references_and_control_characters_fail_at_open(sidecar: str,
                                                               tmp_path: Path) -> None:
    doc = json.loads(Path(sidecar).read_text())
    stray = dict(doc, refs={**doc["refs"], "no/such/array/0": ["x", 0, 1]})
    (tmp_path / "stray.json").write_text(json.dumps(stray))
    with pytest.raises(InvalidReferenceError, match="belongs to no array"):
        read_refs(tmp_path / "stray.json")
    ctl = json.loads(json.dumps(doc))
    ctl["h5sidecar"]["urls"][0] = ctl["h5sidecar"]["urls"][0] + "\x00"
    (tmp_path / "ctl.json").write_text(json.dumps(ctl))
    with pytest.raises(InvalidReferenceError):
        read_refs(tmp_path / "ctl.json")


def test_dataclasses_replace_gives_a_plain_array(sidecar: str, atl03_h5: Path) -> None:
    import dataclasses

    from h5sidecar.references import ArrayRefs, ChunkManifest

    refs = read_refs(sidecar)
    arr = refs.arrays[NAMED[0]]
    m = arr.manifest
    moved = ChunkManifest.from_arrays(urls=m.urls, codes=m.codes, offsets=m.offsets,
                                      lengths=m.lengths, inline=m.inline)
    plain = dataclasses.replace(arr, manifest=moved)
    assert type(plain) is ArrayRefs and plain.manifest == m and plain.meta == arr.meta
    arrays = {**refs.arrays, NAMED[0]: plain}
    got = read_arrays(dataclasses.replace(refs, arrays=arrays), [NAMED[0]])
    np.testing.assert_array_equal(got[NAMED[0]], read_h5(atl03_h5, NAMED[0]))
