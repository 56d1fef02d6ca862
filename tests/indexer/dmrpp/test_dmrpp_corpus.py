"""Conformance: index every file of the DMR++ corpus from its DMR++ and read it back.

``../shared/corpus-dmrpp`` holds HDF5/netCDF-4 files, each beside the DMR++ that the OPeNDAP
project's ``build_dmrpp`` wrote for it.  For every pair: index from the DMR++ (the data path in
the document resolves to the file beside it), write the Parquet sidecar, and compare every
variable read through h5sidecar's xarray engine and through plain xarray (``engine="zarr"``
over fsspec's ``reference://``) with h5py (raw values) and xarray + h5netcdf (decoded values) on
the same file -- or find it skipped with a reason.  Then compare each array of the DMR++ sidecar
with the HDF5 indexer's sidecar of the same file, and sort every variable into:

* ``exact``: read right, and the same sidecar entry as the HDF5 indexer's;
* ``metadata``: read right, some field differs (listed: attributes the DMR++ flattens, names
  it gives dimensions h5netcdf does not show, ...);
* ``skipped``: recorded in ``GranuleRefs.skipped`` with its reason;
* ``differ``: values that do not match (only where the document does not describe its file,
  pinned in :data:`EXPECTED_DIFFER`);
* ``absent``: variables of the file the DMR++ does not mention, and ``extra``: variables the
  DMR++ describes that the file does not hold (HDF-EOS5 coordinates in another file).

The same files go through VirtualiZarr's DMR++ parser (``DMRPPParser``, one group at a time,
each variable read with ``xr.open_zarr`` on its ``ManifestStore`` and compared with h5py), for
the comparison table.  The last test prints both tables (``-rP`` or ``-s``).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar import index_dmrpp
from h5sidecar.indexer import index_granule, skip_loses_data
from h5sidecar.references import GranuleRefs, key_safe_name, write_json, write_parquet
from tests.conftest import CORPUS
from tests.indexer._compare import assert_values_equal, h5_dataset, h5_read, open_plain
from tests.indexer.dmrpp._sidecar_diff import metadata_differences
from tests.indexer.dmrpp._virtualizarr import open_dmrpp_group

pytestmark = [pytest.mark.corpus, pytest.mark.xdist_group("corpus-dmrpp")]

DMRPP_CORPUS = CORPUS.parent / "corpus-dmrpp"


def _manifest() -> list[dict[str, Any]]:
    path = DMRPP_CORPUS / "MANIFEST.json"
    return json.loads(path.read_text())["files"] if path.exists() else []


FILES = _manifest()
#: Variables whose values do not match, and why: documents that do not describe their file.
EXPECTED_DIFFER = {
    # every offset of this document is 40 bytes before the file's (the file was written again
    # after its DMR++): unfiltered variables read the wrong bytes, and the fletcher32 check
    # catches the filtered one (skipped)
    "FletcherShuffle.nc4": {
        "fvcom_mesh", "varShort", "varFloat", "varInt", "varLong", "X", "varDouble", "varByte",
        "letter",
    },
}  # fmt: skip
#: file -> variable -> (category, detail), for the summary table
RESULTS: dict[str, dict[str, tuple[str, str]]] = {}
#: file -> variable -> what VirtualiZarr's DMR++ parser gives for it
PEER: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def dmrpp_corpus() -> Path:
    if not (DMRPP_CORPUS / "MANIFEST.json").exists():
        pytest.skip(f"DMR++ corpus not found at {DMRPP_CORPUS} (shared/corpus-dmrpp)")
    return DMRPP_CORPUS / "files"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _values_equal(got: Any, want: Any) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype.kind == "S" and got.dtype.kind in "OUT":  # a compact string held as text
        return [w.decode() for w in want.ravel()] == [str(g) for g in got.ravel()]
    if want.dtype.kind == "S" and got.dtype.kind == "S":  # xarray may narrow the width
        return bool(got.tolist() == want.tolist())
    if want.dtype.kind in "OUT" and got.dtype.kind in "OUT":  # text: object, str or StringDType
        return [str(w) for w in want.ravel()] == [str(g) for g in got.ravel()]
    if got.dtype != want.dtype:
        return False
    return bool(np.array_equal(got, want, equal_nan=got.dtype.kind in "fc"))


def _hdf5_path(p: str, hdf5: GranuleRefs) -> str:
    """The HDF5 indexer's name of a DMR++ variable: netCDF-4 stores a variable named like a
    dimension of another length as ``_nc4_non_coord_<name>``, and DMR++ gives its netCDF name."""
    parent, _, name = p.rpartition("/")
    hidden = f"{parent}/_nc4_non_coord_{name}".lstrip("/")
    return hidden if p not in hdf5.arrays and hidden in hdf5.arrays else p


def _decoded_problems(path: Path, parquet: Path, plain: Any, refs: GranuleRefs) -> dict[str, str]:
    """Variable -> what differs from xarray + h5netcdf, per reader (decoded values)."""
    out: dict[str, str] = {}
    by_group: dict[str, list[str]] = {}
    for p in refs.arrays:
        by_group.setdefault(p.rpartition("/")[0], []).append(p)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for group, paths in by_group.items():
            g = group or None
            try:
                want = xr.open_dataset(path, engine="h5netcdf", phony_dims="access", group=g)
            except Exception:  # noqa: BLE001, S112 - no decoded oracle for this group
                continue
            readers = {
                "h5sidecar": lambda g=g: xr.open_dataset(parquet, engine="h5sidecar", group=g),
                "zarr": lambda g=g: xr.open_dataset(
                    plain.store, engine="zarr", group=g, consolidated=True, zarr_format=2
                ),
            }
            for reader, open_group in readers.items():
                ds = open_group()
                for p in paths:
                    name = p.rpartition("/")[2]
                    if name not in want.variables or isinstance(refs.arrays[p].meta.dtype, list):
                        continue  # compound values: compared raw, field by field, with h5py
                    got = ds[key_safe_name(name)]
                    if not _values_equal(got.values, want[name].values):
                        out[p] = f"{reader}: decoded values differ from h5netcdf's"
    return out


@pytest.mark.parametrize("entry", FILES, ids=[e["name"] for e in FILES])
def test_dmrpp_corpus_file(entry: dict[str, Any], dmrpp_corpus: Path, tmp_path: Path) -> None:
    path = dmrpp_corpus / entry["name"]
    doc = dmrpp_corpus / (entry["name"] + ".dmrpp")
    assert _sha256(path) == entry["sha256"] and _sha256(doc) == entry["sha256_dmrpp"]
    refs = index_dmrpp(str(doc), str(path))
    hdf5 = index_granule(str(path))
    assert refs.source == hdf5.source  # the granule's identity, for the freshness guard
    assert refs.extra["from_dmrpp"]["url"] == str(doc)
    parquet = write_parquet(refs, tmp_path / "refs.parq")
    plain = open_plain(write_json(refs, tmp_path / "refs.json"))
    results: dict[str, tuple[str, str]] = {}
    for s in refs.skipped:
        assert s.reason, s
        results[s.path] = ("skipped", f"{s.kind}: {s.reason}")
    decoded = _decoded_problems(path, parquet, plain, refs)
    types_d = refs.extra.get("attribute_dtypes", {})
    types_h = hdf5.extra.get("attribute_dtypes", {})
    with h5py.File(path, "r") as h5:
        for p, arr in refs.arrays.items():
            hp = _hdf5_path(p, hdf5)
            if hp not in h5 or not isinstance(h5[hp], h5py.Dataset):
                results[p] = ("extra", "not a dataset of the file")
                continue
            dset = h5_dataset(h5, "/" + hp)
            want = h5_read(dset)
            rel = "/".join(key_safe_name(part) for part in p.split("/"))
            try:
                assert_values_equal(plain[rel][...], want, dset, f"{p} (plain zarr)")
            except AssertionError as exc:
                results[p] = ("differ", str(exc).splitlines()[0])
                continue
            if p in decoded:
                results[p] = ("differ", decoded[p])
            elif hp not in hdf5.arrays:
                results[p] = ("metadata", "the HDF5 indexer skips it")
            else:
                fields = metadata_differences(
                    arr, hdf5.arrays[hp], (types_d.get(p, {}), types_h.get(hp, {}))
                )
                if hp != p:
                    fields.append("name")
                results[p] = ("metadata", ", ".join(fields)) if fields else ("exact", "")
    mentioned = {_hdf5_path(p, hdf5) for p in refs.arrays} | {s.path for s in refs.skipped}
    for p in [*hdf5.arrays, *(s.path for s in hdf5.skipped if skip_loses_data(s.kind, s.reason))]:
        if p not in mentioned:
            results[p] = ("absent", "not in the DMR++")
    RESULTS[entry["name"]] = results
    PEER[entry["name"]] = _virtualizarr(path, doc, tmp_path, set(results), hdf5)
    differ = {p for p, (c, _) in results.items() if c == "differ"}
    assert differ == EXPECTED_DIFFER.get(entry["name"], set()), results


def _virtualizarr(
    path: Path, doc: Path, tmp_path: Path, variables: set[str], hdf5: GranuleRefs
) -> dict[str, str]:
    """Variable -> ``exact`` / ``differ`` / ``error`` / ``not shown`` through VirtualiZarr's
    DMR++ parser (it reads the data beside the document: both are linked into ``tmp_path``)."""
    from h5sidecar.indexer.dmrpp import parse_dmrpp

    (tmp_path / "vz").mkdir()
    data = tmp_path / "vz" / path.name
    data.symlink_to(path)
    (tmp_path / "vz" / doc.name).symlink_to(doc)
    out = dict.fromkeys(variables, "not shown")
    groups = [g.path for g in parse_dmrpp(doc.read_bytes()).root.walk()]
    with warnings.catch_warnings(), h5py.File(path) as h5:
        warnings.simplefilter("ignore")
        for group in groups:
            try:
                ds = open_dmrpp_group(f"file://{data}.dmrpp", group)
            except Exception:  # noqa: BLE001 - the peer refusing a group is what is counted
                for p in variables:
                    if p.rpartition("/")[0] == group:
                        out[p] = "error"
                continue
            for name in ds.variables:
                p = f"{group}/{name}" if group else str(name)
                hp = _hdf5_path(p, hdf5)
                if hp not in h5 or not isinstance(h5[hp], h5py.Dataset):
                    continue
                try:
                    got = np.asarray(ds[name].values)
                except Exception:  # noqa: BLE001 - counted
                    out[p] = "error"
                    continue
                want = np.asarray(h5[hp][()])
                same = (
                    want.dtype.names is None
                    and got.shape == want.shape
                    and bool(np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))
                )
                out[p] = "exact" if same else "differ"
    return out


def test_dmrpp_corpus_summary() -> None:
    """The table over the files above (run with ``-rP`` to see it)."""
    if not RESULTS:
        pytest.skip("no DMR++ corpus file was checked in this worker")
    total: Counter[str] = Counter()
    fields: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for results in RESULTS.values():
        for category, detail in results.values():
            total[category] += 1
            if category == "metadata":
                fields.update(f for f in detail.split(", ") if f)
            if category == "skipped":
                reasons[detail.split(":")[0] + ": " + detail.split(": ", 1)[1][:60]] += 1
    print(f"DMR++ corpus: {len(RESULTS)} files, {sum(total.values())} variables")
    for category in ("exact", "metadata", "skipped", "differ", "absent", "extra"):
        print(f"  {category}: {total[category]}")
    print("  metadata fields that differ:", dict(fields))
    for reason, n in reasons.most_common():
        print(f"  skipped x{n}: {reason}")
    peer = Counter(c for results in PEER.values() for c in results.values())
    ours = Counter(
        "exact" if c in ("exact", "metadata") else c
        for r in RESULTS.values()
        for c, _ in r.values()
    )
    print("reads equal to h5py, per reader (same variables):")
    print(f"  h5sidecar from DMR++: {dict(ours)}")
    print(f"  VirtualiZarr DMRPPParser: {dict(peer)}")
    for name, results in sorted(RESULTS.items()):
        counts = Counter(c for c, _ in results.values())
        print(f"  {name}: {dict(counts)}; VirtualiZarr {dict(Counter(PEER[name].values()))}")
    assert total["differ"] == sum(len(EXPECTED_DIFFER.get(n, ())) for n in RESULTS)
