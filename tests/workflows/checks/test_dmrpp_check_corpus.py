"""``check_dmrpp`` over the DMR++ corpus (``../shared/corpus-dmrpp``), against what the DMR++
conformance test finds (``tests/indexer/dmrpp/test_dmrpp_corpus.py``).

The audit must flag every document whose variables read wrong there (``EXPECTED_DIFFER``:
``FletcherShuffle.nc4``, every offset 40 bytes early), and a document it calls clean must read
equal to h5py through its DMR++ sidecar.  The documents it flags, and why, are pinned.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import pytest

from h5sidecar import check_dmrpp, index_dmrpp
from h5sidecar.references import key_safe_name, write_json
from tests.indexer._compare import assert_values_equal, h5_dataset, h5_read, open_plain
from tests.indexer.dmrpp.test_dmrpp_corpus import DMRPP_CORPUS, EXPECTED_DIFFER

pytestmark = [pytest.mark.corpus, pytest.mark.xdist_group("corpus-dmrpp")]

#: Documents the audit flags: file -> {kind: variables}.
EXPECTED_FINDINGS: dict[str, dict[str, set[str]]] = {
    # the document no longer describes its file: 9 variables 40 bytes early, and the one
    # filtered variable does not decode (its fletcher32 fails)
    "FletcherShuffle.nc4": {"chunks": {*EXPECTED_DIFFER["FletcherShuffle.nc4"], "Y"}},
    # build_dmrpp left out the variables of types DAP4 has no name for (opaque, bitfield,
    # variable-length, arrays of arrays, compounds of those, references)
    "ntypes.h5": {"missing from DMR++": {
        "Dataset1", "Dataset3", "array_type", "array_type_2", "bitfield_type_1",
        "bitfield_type_2", "compound_type", "compound_type_2", "compound_type_3",
        "compound_type_4", "enum_type", "opaque_type", "vl_type",
    }},
    # the document writes a vertical tab as the text "\\013"
    "t_special_char_attr.h5": {"attribute": {"@special_char_attr"}},
}  # fmt: skip
AUDITS: dict[str, Any] = {}


def _files() -> list[dict[str, Any]]:
    path = DMRPP_CORPUS / "MANIFEST.json"
    return json.loads(path.read_text())["files"] if path.exists() else []


FILES = _files()


@pytest.mark.parametrize("entry", FILES, ids=[e["name"] for e in FILES])
def test_dmrpp_check_corpus_file(entry: dict[str, Any], tmp_path: Path) -> None:
    path = DMRPP_CORPUS / "files" / entry["name"]
    audit = check_dmrpp(str(path))
    AUDITS[entry["name"]] = audit
    found: dict[str, set[str]] = {}
    for f in audit.findings:
        found.setdefault(f.kind, set()).add(f.path)
    assert found == EXPECTED_FINDINGS.get(entry["name"], {}), audit.findings
    # every variable the conformance test reads wrong is flagged
    assert EXPECTED_DIFFER.get(entry["name"], set()) <= {f.path for f in audit.findings}
    if not audit.ok:
        return
    # clean: every variable read through the document equals h5py
    refs = index_dmrpp(audit.dmrpp, str(path))
    plain = open_plain(write_json(refs, tmp_path / "refs.json"))
    with h5py.File(path) as h5:
        for p in refs.arrays:
            parent, _, name = p.rpartition("/")
            hidden = f"{parent}/_nc4_non_coord_{name}".lstrip("/")  # netCDF-4's name for it
            hp = hidden if hidden in h5 else p
            if hp not in h5 or not isinstance(h5[hp], h5py.Dataset):
                continue  # a variable of another file (HDF-EOS5 coordinates)
            dset = h5_dataset(h5, "/" + hp)
            rel = "/".join(key_safe_name(part) for part in p.split("/"))
            assert_values_equal(plain[rel][...], h5_read(dset), dset, p)


def test_dmrpp_check_corpus_summary() -> None:
    """The audit's table over the corpus (``-rP`` to see it)."""
    if not AUDITS:
        pytest.skip("no DMR++ corpus file was audited in this worker")
    kinds = Counter(f.kind for a in AUDITS.values() for f in a.findings)
    flagged = sorted(n for n, a in AUDITS.items() if not a.ok)
    unchecked = sum(len(a.unchecked) for a in AUDITS.values())
    print(
        f"dmrpp-check over {len(AUDITS)} documents: {len(AUDITS) - len(flagged)} clean, "
        f"{len(flagged)} with disagreements ({', '.join(flagged)})"
    )
    print(f"  disagreements by kind: {dict(kinds)}; variables not checked: {unchecked}")
    assert set(flagged) <= set(EXPECTED_FINDINGS)


def test_dmrpp_check_assumed_byte_order() -> None:
    """``byte_order="LE"`` checks what an old document without ``byteOrder`` leaves unchecked:
    the one big-endian array the conformance test reads wrong that way is flagged, and the 2-D
    attributes DAP4 flattens show up."""
    if not (DMRPP_CORPUS / "MANIFEST.json").exists():
        pytest.skip("DMR++ corpus not found")
    audit = check_dmrpp(str(DMRPP_CORPUS / "files" / "ntypes.h5"), byte_order="LE")
    assert ("dtype", "atomic_type_1") in {(f.kind, f.path) for f in audit.findings}
    audit = check_dmrpp(str(DMRPP_CORPUS / "files" / "d_int.h5"), byte_order="LE")
    assert [(f.kind, f.path) for f in audit.findings] == [("attribute", "d16_2@value_2d")]
