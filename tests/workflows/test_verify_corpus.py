"""verify_refs on real files of the conformance corpus: every chunk of every variable decoded
through the sidecar (plain fsspec + zarr) equals h5py, across the awkward types (flattened and
padded compounds, tagged opaque data, object references, variable-length strings, enums,
complex numbers, external raw storage, unallocated chunks)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from h5sidecar.workflows import index_many, verify_refs

pytestmark = pytest.mark.corpus

FILES = {
    # file below files/ -> variables that must have been compared (not skipped)
    "wrwilliams__hdf5/testfiles/tnestedcomp.h5": ["ArrayOfStructures"],
    "usnistgov__h5wasm/test/array.h5": ["compound"],
    "Unidata__netcdf-c/h5_test/ref_tst_compounds.nc": ["obs"],
    "scigolib__hdf5/hdf5_official/h5diff_dset2.h5": ["g1/opaque", "g1/compound2D"],
    "wrwilliams__hdf5/testfiles/h5repack_refs.h5": [],
    "wrwilliams__hdf5/testfiles/tvlstr.h5": [],
    "wrwilliams__hdf5/testfiles/tenum.h5": [],
    "scigolib__hdf5/hdf5_official/tcomplex.h5": [],
    "wrwilliams__hdf5/testfiles/h5repack_ext.h5": [],
    "wrwilliams__hdf5/test/h5fc_ext1_f.h5": [],
    "Unidata__netcdf-c/ncdump/ref_tst_irish_rover.nc": [],
}


@pytest.fixture(scope="module")
def manifest(corpus_dir: Path) -> dict[str, dict]:
    doc = json.loads((corpus_dir / "MANIFEST.json").read_text())
    return {f["name"]: f for f in doc["files"]}


@pytest.mark.parametrize("name", sorted(FILES))
def test_verify_corpus_file(name: str, corpus_dir: Path, manifest: dict[str, dict],
                            tmp_path: Path) -> None:
    path = corpus_dir / "files" / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == manifest[name]["sha256"]
    report = index_many(str(path), str(tmp_path), format="json", executor="serial")
    assert report.ok, report.granules[0].error
    result = verify_refs(report.granules[0].sidecar, sample=0)
    problems = [(v.path, v.status, v.message) for v in result.variables
                if v.status in ("different", "error")]
    assert result.ok and not problems, problems
    status = {v.path: v.status for v in result.variables}
    assert sum(s == "ok" for s in status.values()) >= 1
    for var in FILES[name]:
        assert status[var] == "ok", (var, status.get(var))
