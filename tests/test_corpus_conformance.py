"""Conformance: index every HDF5 file of the corpus and read it back with *plain* fsspec + zarr.

For each file of ``MANIFEST.json`` (``hdf5: true``): check its sha256, index it, write both
sidecar formats (kerchunk JSON and kerchunk Parquet) into ``tmp_path``, open each with fsspec's
``ReferenceFileSystem`` + zarr 3 (no h5sidecar reader), and compare every dataset of
``profile.datasets`` with what h5py reads from the same file: numbers with
``array_equal(equal_nan=True)``, strings as ``str``, compound types field by field, references
by target object.  Datasets with more than 2**31 elements are compared on slices.  Every
dataset h5sidecar's own batch reader decodes (``SidecarStore.native``, what the xarray engine
reads through) is compared with h5py too, from the Parquet sidecar.  Each result
must also open as an xarray ``DataTree`` (dimension names consistent along every path), and
give every variable the dimension names, coordinate and index status of
``xr.open_dataset(file, engine="h5netcdf", phony_dims="access", group=g)`` (see
:mod:`h5sidecar.workflows.checks._dimcheck` for the one renaming xarray forces).

What we skip is pinned by :data:`EXPECTED_SKIPS` (path -> kind and reason), so a regression or
an improvement shows up as a failure to update deliberately.  Each file must also do at least
as well as the best of kerchunk and VirtualiZarr (``peer_baseline``).  The last test prints a
summary (run with ``-rP`` or ``-s`` to see it).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path
from typing import Any

import h5py
import pytest
import xarray as xr

from h5sidecar.indexer import index_granule
from h5sidecar.read import SidecarStore
from h5sidecar.references import key_safe_name, write_json, write_parquet
from h5sidecar.workflows.checks._dimcheck import sidecar_dimension_differences
from tests._matrix import attributes_differ, iter_truth, reference_resolver
from tests.conftest import CORPUS
from tests.indexer._compare import assert_values_equal, h5_dataset, h5_read, open_plain

pytestmark = [pytest.mark.corpus, pytest.mark.xdist_group("corpus")]

# -- why we skip what we skip (kind, phrase that must appear in the recorded reason) -------------
#: netCDF-C's dimension-only datasets: no values in HDF5; netCDF readers hide them too.
DIM_ONLY = ("other", "netCDF-4 dimension without a variable")
#: H5S_NULL dataspace: no shape, no values.
NULL_SPACE = ("other", "null dataspace")
#: Compound types with variable-length string members: Zarr structured dtypes are fixed-size.
VLEN_STR_MEMBER = ("unsupported_dtype", "variable-length strings inside compound")
#: Ragged arrays (H5T_VLEN of numbers / compounds): no Zarr v2 dtype zarr 3.1 reads.
VLEN_SEQ = ("unsupported_dtype", "variable-length sequences")
#: 80/96/128-bit floats and complex numbers built on them: no Zarr dtype.
LONG_DOUBLE = ("unsupported_dtype", "long double")
#: Region references select part of a dataset: nothing in Zarr says that.
REGION_REF = ("unsupported_dtype", "region references")
#: Soft links to groups and second hard links to groups (cycles): contents indexed once.
SOFT_GROUP = ("other", "soft link to the group")
HARD_GROUP = ("other", "second hard link to the group")
#: Links into other files are not followed.
EXTERNAL_LINK = ("external_link", "external link to")
DANGLING = ("soft_link_dangling", "which does not exist")
UD_LINK = ("other", "user-defined link")
#: HDF5 2.0 refuses to open the object ("unusually large # of unused bits").
HDF5_REFUSES = ("unreadable", "HDF5 cannot open the object")
#: New-style (H5R_ref_t) references h5py cannot map.
H5PY_TYPE = ("unsupported_dtype", "h5py cannot map the datatype")
#: H5Pset_external raw data file absent from the corpus.
EXT_FILE_MISSING = ("external_storage", "does not exist (named")
#: A filter no codec implements (HDF5's test filter 405).
NO_CODEC = ("unsupported_filter", "no codec decodes")
#: Virtual datasets whose source files are not in the corpus (HDF5 gives them extent 0).
VDS_NO_SOURCE = ("virtual_dataset", "none of its")

EXPECTED_SKIPS: dict[str, dict[str, tuple[str, str]]] = {
    "JuliaIO__HDF5.jl/test_files/h5ex_t_stringatt.h5": {"DS1": NULL_SPACE},
    "JuliaIO__HDF5.jl/test_files/h5ex_t_vlen.h5": {"DS1": VLEN_SEQ},
    "NCAS-CMS__pyfive/data/h5netcdf_test.hdf5": {
        "x": DIM_ONLY,
        "empty": DIM_ONLY,
        "unlimited": DIM_ONLY,
        "string3": DIM_ONLY,
        "subgroup/y": DIM_ONLY,
        "mismatched_dim": DIM_ONLY,
    },
    "NCAS-CMS__pyfive/data/issue23_A_contiguous.nc": {"bounds2": DIM_ONLY},
    "NCAS-CMS__pyfive/data/noy_AERmonZ_UKESM1-0-LL_piControl_r1i1p1f2_gnz_200001-200012.nc": {
        "bnds": DIM_ONLY,
    },
    "Unidata__netcdf-c/h5_test/ref_tst_compounds.nc": {"n": DIM_ONLY},
    "Unidata__netcdf-c/ncdump/ref_tst_compounds2.nc": {"phony_dim": DIM_ONLY},
    "Unidata__netcdf-c/ncdump/ref_tst_irish_rover.nc": {"dim": DIM_ONLY},
    "Unidata__netcdf4-python/test/issue1152.nc": {"x": DIM_ONLY},
    "Unidata__netcdf4-python/test/issue671.nc": {"numRows": DIM_ONLY, "numCells": DIM_ONLY},
    "jamesmudd__jhdf/hdf5/compound_datasets_latest.hdf5": {
        "array_vlen_chunked_compound": VLEN_STR_MEMBER,
        "array_vlen_contiguous_compound": VLEN_STR_MEMBER,
        "chunked_compound": VLEN_STR_MEMBER,
        "contiguous_compound": VLEN_STR_MEMBER,
        "vlen_chunked_compound": VLEN_SEQ,
        "vlen_contiguous_compound": VLEN_SEQ,
    },
    "jamesmudd__jhdf/hdf5/test_file.hdf5": {
        "links_group/broken_soft_link": DANGLING,
        "links_group/external_link": EXTERNAL_LINK,
        "links_group/external_link_to_missing_file": EXTERNAL_LINK,
        "links_group/soft_link_to_group": SOFT_GROUP,
    },
    "jamesmudd__jhdf/hdf5/test_odd_datasets_latest.hdf5": {"contiguous_no_storage": NULL_SPACE},
    "nasa__harmony-opendap-subsetter/data/ABoVE_TVPRM_bbox.nc4": {"nv": DIM_ONLY},
    "nasa__harmony-opendap-subsetter/data/ATL16_prefetch_group.nc4": {
        "dim1": DIM_ONLY,
        "dog_dim": DIM_ONLY,
    },
    "nasa__harmony-opendap-subsetter/data/GPM_3IMERGHH_bounds.nc4": {
        "Grid/latv": DIM_ONLY,
        "Grid/lonv": DIM_ONLY,
        "Grid/nv": DIM_ONLY,
    },
    "nasa__harmony-opendap-subsetter/data/SC_SPL3SMP_009_prefetch.nc4": {
        "Soil_Moisture_Retrieval_Data_AM/dim1": DIM_ONLY,
        "Soil_Moisture_Retrieval_Data_AM/dim2": DIM_ONLY,
        "Soil_Moisture_Retrieval_Data_AM/dim3": DIM_ONLY,
        "Soil_Moisture_Retrieval_Data_AM/dim4": DIM_ONLY,
        "Soil_Moisture_Retrieval_Data_PM/dim5": DIM_ONLY,
        "Soil_Moisture_Retrieval_Data_PM/dim6": DIM_ONLY,
        "Soil_Moisture_Retrieval_Data_PM/dim7": DIM_ONLY,
        "Soil_Moisture_Retrieval_Data_PM/dim8": DIM_ONLY,
    },
    "nasa__harmony-swath-projector/data/africa.nc": {"ni": DIM_ONLY, "nj": DIM_ONLY},
    "podaac__l2ss-py/cut/SS_VIIRS_NPP-NAVO-L2P-v3.0.nc": {"nj": DIM_ONLY, "ni": DIM_ONLY},
    "podaac__l2ss-py/uncut/SS_AMSR2-L2B_v08_r38622-v02.0-fv01.0.nc": {
        "nj": DIM_ONLY,
        "ni": DIM_ONLY,
    },
    "scigolib__hdf5/hdf5_official/compounds_array_vlen1.h5": {
        "dset2": VLEN_SEQ,
        "dset3": VLEN_SEQ,
        "dset4": VLEN_SEQ,
    },
    "scigolib__hdf5/hdf5_official/h5diff_dset2.h5": {
        "g1/vlen": VLEN_SEQ,
        "g1/vlen2D": VLEN_SEQ,
        "g1/vlen3D": VLEN_SEQ,
        "refreg": REGION_REF,
    },
    "scigolib__hdf5/hdf5_official/tcomplex.h5": {
        "DatasetLongDoubleComplex": LONG_DOUBLE,
        "VariableLengthDatasetFloatComplex": VLEN_SEQ,
    },
    "scigolib__hdf5/hdf5_official/tfloatsattrs.h5": {"DS128BITS": LONG_DOUBLE},
    "scigolib__hdf5/hdf5_official/tmisc38a.h5": {"Fletcher_float_data_be": HDF5_REFUSES},
    "scigolib__hdf5/hdf5_official/trefer_attr.h5": {"Dataset3": H5PY_TYPE},
    "scigolib__hdf5/hdf5_official/trefer_param.h5": {"Dataset3": H5PY_TYPE},
    "wrwilliams__hdf5/test/test_ld.h5": {"DSET_NULL": NULL_SPACE},
    "wrwilliams__hdf5/testfiles/h5copytst.h5": {
        "dset_attr": NULL_SPACE,
        "grp_dsets/named_vl": VLEN_SEQ,
        "grp_dsets/nested_vl": VLEN_SEQ,
        "grp_nested/grp_dsets/named_vl": VLEN_SEQ,
        "grp_nested/grp_dsets/nested_vl": VLEN_SEQ,
        "named_vl": VLEN_SEQ,
        "nested_vl": VLEN_SEQ,
    },
    "wrwilliams__hdf5/testfiles/h5diff_basic1.h5": {"g1/ld": LONG_DOUBLE},
    "wrwilliams__hdf5/vds/3_1_vds.h5": {"vds_dset": VDS_NO_SOURCE},
    "wrwilliams__hdf5/vds/3_2_vds.h5": {"vds_dset": VDS_NO_SOURCE},
    "wrwilliams__hdf5/testfiles/h5diff_comp_vl_strs.h5": {
        "group/Compound_dset1": VLEN_STR_MEMBER,
        "group/Compound_dset2": VLEN_STR_MEMBER,
        "group/Compound_dset3": VLEN_STR_MEMBER,
        "group/Compound_dset4": VLEN_STR_MEMBER,
        "group/Compound_dset5": VLEN_STR_MEMBER,
        "group/Compound_dset6": VLEN_STR_MEMBER,
        "group/Compound_dset7": VLEN_STR_MEMBER,
        "group/Compound_dset8": VLEN_STR_MEMBER,
        "group/Compound_dset9": VLEN_STR_MEMBER,
        "group_copy/Compound_dset1": VLEN_STR_MEMBER,
        "group_copy/Compound_dset2": VLEN_STR_MEMBER,
        "group_copy/Compound_dset3": VLEN_STR_MEMBER,
        "group_copy/Compound_dset4": VLEN_STR_MEMBER,
        "group_copy/Compound_dset5": VLEN_STR_MEMBER,
        "group_copy/Compound_dset6": VLEN_STR_MEMBER,
        "group_copy/Compound_dset7": VLEN_STR_MEMBER,
        "group_copy/Compound_dset8": VLEN_STR_MEMBER,
        "group_copy/Compound_dset9": VLEN_STR_MEMBER,
    },
    "wrwilliams__hdf5/testfiles/h5repack_refs.h5": {"Dset_REGREF": REGION_REF},
    "wrwilliams__hdf5/testfiles/tall.h5": {
        "g1/g1.2/extlink": EXTERNAL_LINK,
        "g1/g1.2/g1.2.1/slink": DANGLING,
        "g2/udlink": UD_LINK,
    },
    "wrwilliams__hdf5/testfiles/tattrreg.h5": {"Dataset1": NULL_SPACE},
    "wrwilliams__hdf5/testfiles/textlinksrc.h5": {
        "ext2soft_link1": EXTERNAL_LINK,
        "ext2softdangle_link1": EXTERNAL_LINK,
        "ext_link1": EXTERNAL_LINK,
        "ext_link2": EXTERNAL_LINK,
        "ext_link3": EXTERNAL_LINK,
        "ext_link4": EXTERNAL_LINK,
        "ext_link5": EXTERNAL_LINK,
    },
    "wrwilliams__hdf5/testfiles/textlinktar.h5": {
        "group/elink_t1": EXTERNAL_LINK,
        "group/elink_t2": EXTERNAL_LINK,
        "group/subgroup/link_to_group": HARD_GROUP,
    },
    "wrwilliams__hdf5/testfiles/tfilters.h5": {
        "nbit": HDF5_REFUSES,
        "external": EXT_FILE_MISSING,
        "myfilter": NO_CODEC,
    },
    "wrwilliams__hdf5/testfiles/tsoftlinks.h5": {
        "group1/soft_dangle": DANGLING,
        "group1/soft_empty_grp": SOFT_GROUP,
        "soft_dangle": DANGLING,
        "soft_empty_grp": SOFT_GROUP,
        "soft_group1": SOFT_GROUP,
    },
    "wrwilliams__hdf5/testfiles/twithub513.h5": {
        "g1/g1.2/extlink": EXTERNAL_LINK,
        "g1/g1.2/g1.2.1/slink": DANGLING,
        "g2/udlink": UD_LINK,
    },
}


def _manifest() -> dict[str, Any]:
    path = CORPUS / "MANIFEST.json"
    return json.loads(path.read_text()) if path.exists() else {"files": []}


MANIFEST = _manifest()
HDF5_FILES = [e for e in MANIFEST["files"] if e["hdf5"]]

#: Per-file results for the summary: name -> counts.
RESULTS: dict[str, dict[str, int]] = {}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _selections(shape: tuple[int, ...]) -> list[Any]:
    """Whole array, or head/tail/middle slices of arrays over 2**31 elements."""
    if math.prod(shape) <= 2**31:
        return [()]
    n = shape[0]
    return [(slice(0, 4096),), (slice(n // 2, n // 2 + 4096),), (slice(max(n - 4096, 0), n),)]


def _h5py_skips(entry: dict[str, Any]) -> set[str]:
    """Datasets h5py itself cannot read (compared on slices instead when merely too large)."""
    return {u["name"] for u in entry["profile"]["h5py_unreadable"] if "too_large" not in u["why"]}


def _best_peer(entry: dict[str, Any]) -> int:
    return max(
        (int(p.get("datasets", {}).get("ok", 0)) for p in entry.get("peer_baseline", {}).values()),
        default=0,
    )


@pytest.mark.parametrize("entry", HDF5_FILES, ids=[e["name"] for e in HDF5_FILES])
def test_corpus_file(entry: dict[str, Any], corpus_dir: Path, tmp_path: Path) -> None:
    path = corpus_dir / "files" / entry["name"]
    assert _sha256(path) == entry["sha256"], f"{entry['name']} changed: update the test"
    refs = index_granule(str(path))

    got = {s.path: s for s in refs.skipped}
    want = EXPECTED_SKIPS.get(entry["name"], {})
    assert set(got) == set(want), f"skipped {sorted(got)}, expected {sorted(want)}"
    for p, (kind, phrase) in want.items():
        assert got[p].kind == kind, f"{p}: kind {got[p].kind!r}, expected {kind!r}"
        assert phrase in got[p].reason, f"{p}: reason {got[p].reason!r} lacks {phrase!r}"

    groups = {
        "json": open_plain(write_json(refs, tmp_path / "refs.json")),
        "parquet": open_plain(write_parquet(refs, tmp_path / "refs.parq")),
    }
    native = SidecarStore(tmp_path / "refs.parq").native
    counts = {
        "datasets": 0, "ok": 0, "inlined": 0, "skipped": 0, "h5py_unreadable": 0, "native": 0
    }
    unreadable = _h5py_skips(entry)
    with h5py.File(path, "r") as h5:
        for ds in entry["profile"]["datasets"]:
            counts["datasets"] += 1
            name = ds["name"]
            # the sidecar's path: names a Zarr key space cannot hold are %XX-escaped
            rel = "/".join(key_safe_name(part) for part in name.lstrip("/").split("/"))
            if name in unreadable:
                counts["h5py_unreadable"] += 1
                continue
            if rel in got:
                counts["skipped"] += 1
                continue
            dset = h5_dataset(h5, name)  # external raw files resolved beside the file
            for selection in _selections(tuple(dset.shape or ())):
                expected = h5_read(dset, selection)
                for fmt, group in groups.items():
                    values = group[rel][selection if selection else ...]
                    assert_values_equal(values, expected, dset, f"{rel} ({fmt}) {selection}")
                if native.supports(rel):
                    ndim = len(refs.arrays[rel].meta.shape)  # H5T_ARRAY types add axes
                    key = (*selection, *(slice(None),) * (ndim - len(selection)))
                    (values,) = native.read_sync([(rel, key)])
                    assert_values_equal(values, expected, dset, f"{rel} (native) {selection}")
            counts["ok"] += 1
            counts["native"] += native.supports(rel)
            counts["inlined"] += refs.arrays[rel].status == "inlined"
    # xarray's DataTree accepts the dimension names (one size per name along every path)
    tree = xr.open_datatree(
        groups["json"].store, engine="zarr", consolidated=True, zarr_format=2, decode_cf=False
    )
    assert {node.path.strip("/") for node in tree.subtree} >= set(refs.groups)
    # and every variable has h5netcdf's dimension names, coordinates and indexes
    differences = sidecar_dimension_differences(groups["json"].store, path, list(refs.groups))
    assert differences == {}, differences
    differ = _attribute_differences(path, tmp_path / "refs.parq", groups)
    assert not differ, "attributes differ from h5netcdf's:\n" + "\n".join(differ)
    RESULTS[entry["name"]] = counts
    assert counts["ok"] >= _best_peer(entry), (
        f"{counts['ok']} datasets right, kerchunk/VirtualiZarr got {_best_peer(entry)}"
    )


@pytest.mark.parametrize("entry", HDF5_FILES, ids=[e["name"] for e in HDF5_FILES])
def test_the_truth_with_frozen_sizes_is_h5netcdfs(entry: dict[str, Any], corpus_dir: Path) -> None:
    """The tests' truth (``tests/_matrix.py``) and ``verify`` open each group with xarray +
    h5netcdf with its dimension sizes computed once (``_compat.h5netcdf``); on every group of
    every corpus file that view has plain ``open_dataset``'s variables, dimensions, shapes,
    dtypes and attributes (values are read by the same h5netcdf calls on the same shapes; the
    ATL03-like sample's values are compared too, in ``test_verify_decoded.py``)."""
    from h5sidecar.workflows.checks._cfcheck import open_truth
    from tests._matrix import groups_of

    path = corpus_dir / "files" / entry["name"]
    for group in groups_of(path):
        plain, frozen = open_truth(path, group), open_truth(path, group, frozen_sizes=True)
        assert (plain is None) == (frozen is None), (entry["name"], group)
        for want, got in zip(plain or (), frozen or (), strict=True):
            assert dict(got.sizes) == dict(want.sizes), (entry["name"], group)
            assert list(got.variables) == list(want.variables), (entry["name"], group)
            for name, w in want.variables.items():
                g = got.variables[name]
                assert (g.dims, g.shape, g.dtype) == (w.dims, w.shape, w.dtype), (group, name)
                assert g.attrs.keys() == w.attrs.keys(), (group, name)
        for ds in {id(d): d for d in (*(plain or ()), *(frozen or ()))}.values():
            ds.close()


def _attribute_differences(path: Path, parquet: Path, plain: dict[str, Any]) -> list[str]:
    """Attributes of every group and variable against xarray + h5netcdf's: h5sidecar's engine
    value and type, plain zarr over both sidecars in JSON form (see tests/_attrs_equal.py).
    Groups a reader refuses to open are the reader matrix's to judge."""
    out: list[str] = []
    with h5py.File(path, "r") as h5, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resolve = reference_resolver(h5)
        for group, (want, _) in iter_truth(path):
            g = group or None
            readers: list[tuple[str, Any, Any]] = [
                ("h5sidecar", lambda g=g: xr.open_dataset(parquet, engine="h5sidecar", group=g),
                 "exact"),
                *((fmt, lambda g=g, z=z: xr.open_dataset(z.store, engine="zarr", group=g,
                                                          consolidated=True, zarr_format=2), "json")
                  for fmt, z in plain.items()),
            ]  # fmt: skip
            for name, open_group, strength in readers:
                try:
                    ds = open_group()
                except Exception:  # noqa: BLE001, S112 - a refusal, judged by the reader matrix
                    continue
                out += attributes_differ(ds, want, f"[{name}] /{group}", strength, resolve)
    return out


def test_corpus_summary() -> None:
    """Totals over the files above (runs last in this module; see ``-rP`` for the table)."""
    if not RESULTS:
        pytest.skip("no corpus file was checked in this worker")
    total = {k: sum(c[k] for c in RESULTS.values()) for k in next(iter(RESULTS.values()))}
    peers = sum(_best_peer(e) for e in HDF5_FILES if e["name"] in RESULTS)
    print(
        f"corpus: {len(RESULTS)} files, {total['datasets']} datasets: {total['ok']} ok "
        f"({total['inlined']} inlined, {total['native']} also by the batch reader), "
        f"{total['skipped']} skipped with reasons, "
        f"{total['h5py_unreadable']} unreadable by h5py; best peer per file: {peers} ok"
    )
    for name, c in sorted(RESULTS.items()):
        print(
            f"  {name}: {c['ok']}/{c['datasets']} ok, {c['inlined']} inlined, "
            f"{c['skipped']} skipped"
        )
    assert total["ok"] + total["skipped"] + total["h5py_unreadable"] == total["datasets"]
