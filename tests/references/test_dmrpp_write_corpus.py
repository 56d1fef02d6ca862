"""``write_dmrpp`` over the DMR++ corpus: every file indexed from HDF5, written as a DMR++, and
read back two ways.

* ``index_dmrpp`` (ours): every variable written reads back equal to h5py, none is skipped
  on reading, and the audit of the written document against its file finds nothing but the
  variables the writer left out (each with a reason).
* VirtualiZarr's ``DMRPPParser`` (a parser we did not write): every variable it shows from the
  written document equals h5py, except scalars, which it reads as 0 from build_dmrpp's own
  documents too (its chunk key of a 0-d array); it shows at least the variables it shows from
  build_dmrpp's document of the same file.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar import check_dmrpp, index_dmrpp, index_granule
from h5sidecar.references import key_safe_name, write_dmrpp, write_json
from tests.indexer._compare import assert_values_equal, h5_dataset, h5_read, open_plain
from tests.indexer.dmrpp._virtualizarr import open_dmrpp_group
from tests.indexer.dmrpp.test_dmrpp_corpus import DMRPP_CORPUS

pytestmark = [pytest.mark.corpus, pytest.mark.xdist_group("corpus-dmrpp")]

FILES = (
    json.loads((DMRPP_CORPUS / "MANIFEST.json").read_text())["files"]
    if (DMRPP_CORPUS / "MANIFEST.json").exists()
    else []
)
#: file -> counts, for the summary
COUNTS: dict[str, Counter[str]] = {}


def _peer(doc: Path, paths: list[str]) -> dict[str, Any]:
    """Variable -> values VirtualiZarr's DMR++ parser reads (or "error" / "not shown")."""
    out: dict[str, Any] = dict.fromkeys(paths, "not shown")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for group in sorted({p.rpartition("/")[0] for p in paths}):
            try:
                ds = open_dmrpp_group(f"file://{doc}", group)
            except Exception:  # noqa: BLE001 - the peer refusing a group is what is counted
                out.update({p: "error" for p in paths if p.rpartition("/")[0] == group})
                continue
            for p in paths:
                name = p.rpartition("/")[2]
                if p.rpartition("/")[0] == group and name in ds.variables:
                    try:
                        out[p] = np.asarray(ds[name].values)
                    except Exception:  # noqa: BLE001 - counted
                        out[p] = "error"
    return out


def _verdict(got: Any, want: np.ndarray) -> str:
    if isinstance(got, str):
        return got
    same = got.shape == want.shape and want.dtype.names is None
    return (
        "exact"
        if same and np.array_equal(got, want, equal_nan=want.dtype.kind == "f")
        else "differ"
    )


def _beside(folder: Path, data: Path, doc_text: str | None = None) -> Path:
    """``folder/NAME`` linked to the granule and ``folder/NAME.dmrpp`` (VirtualiZarr reads the
    data at the document's URL without ``.dmrpp``)."""
    folder.mkdir()
    (folder / data.name).symlink_to(data)
    doc = folder / (data.name + ".dmrpp")
    if doc_text is None:
        doc.symlink_to(f"{data}.dmrpp")
    else:
        doc.write_text(doc_text)
    return doc


@pytest.mark.parametrize("entry", FILES, ids=[e["name"] for e in FILES])
def test_dmrpp_written_corpus_file(entry: dict[str, Any], tmp_path: Path) -> None:
    path = DMRPP_CORPUS / "files" / entry["name"]
    refs = index_granule(str(path))
    doc = _beside(tmp_path / "ours", path, "")
    left = write_dmrpp(refs, str(doc))
    assert all(s.reason for s in left)
    left_out = {s.path for s in left}
    written = [p for p in refs.arrays if p not in left_out]
    counts: Counter[str] = Counter(written=len(written), left_out=len(left_out & set(refs.arrays)))
    back = index_dmrpp(str(doc), str(path))
    assert back.skipped == () and sorted(back.arrays) == sorted(written), back.skipped
    plain = open_plain(write_json(back, tmp_path / "back.json"))
    with h5py.File(path) as h5:
        for p in written:
            dset = h5_dataset(h5, "/" + p)
            rel = "/".join(key_safe_name(part) for part in p.split("/"))
            assert_values_equal(plain[rel][...], h5_read(dset), dset, p)
    audit = check_dmrpp(str(path), str(doc))
    # the audit finds nothing but what the writer left out and said so
    allowed = {("attribute" if "@" in p else "missing from DMR++", p) for p in left_out}
    assert {(f.kind, f.path) for f in audit.findings} <= allowed, audit.findings
    ours = _peer(doc, written)
    theirs = _peer(_beside(tmp_path / "theirs", path), written)
    with h5py.File(path) as h5:
        for p in written:
            got, want = ours[p], np.asarray(h5[p][()])
            counts[f"theirs {_verdict(theirs[p], want)}"] += 1
            if isinstance(got, str):
                counts[f"peer {got}"] += 1
                assert isinstance(theirs[p], str) or not want.shape, (p, "shown from theirs")
                continue
            same = got.shape == want.shape and bool(
                np.array_equal(got, want, equal_nan=want.dtype.kind == "f")
            )
            counts["peer exact" if same else "peer differ"] += 1
            assert same or not want.shape, p  # scalars: the peer's own limit
    COUNTS[entry["name"]] = counts


def test_dmrpp_written_corpus_summary() -> None:
    """The table over the files above (``-rP`` to see it)."""
    if not COUNTS:
        pytest.skip("no DMR++ corpus file was written in this worker")
    total: Counter[str] = Counter()
    for c in COUNTS.values():
        total.update(c)
    print(f"write_dmrpp over {len(COUNTS)} files: {dict(total)}")
