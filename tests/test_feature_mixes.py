"""Files nobody designed the suite on, through every reader a user might pick.

The files (:mod:`tests._feature_mixes`, :mod:`tests._feature_mixes_more`) combine features the corpus and the other tests keep
apart.  Each is indexed to JSON and Parquet (``index_many``) and also rebuilt from the DMR++
our writer makes of it (``write_dmrpp`` then ``index_dmrpp``).  Every group and variable is
judged against xarray + h5netcdf on the file as the reader matrix judges the corpus
(:func:`tests._matrix.compare_group`: values, dtype, dimension names, coordinates, attributes),
and every array's raw values against h5py (``read_arrays``).  A datacube of granules that
combine packing, ``_Unsigned``, fill values, a noleap calendar and never-written chunks is
read against ``xr.open_mfdataset(engine="h5netcdf")``.

A variable may only differ or be refused where :data:`EXPECTED` says so, with why; an expected
outcome that no longer happens fails too, so an improvement is recorded deliberately.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.references import key_safe_name
from h5sidecar.workflows.checks._cfcheck import open_truth, same_values
from h5sidecar.workflows.checks._dimcheck import outer_lengths
from tests._feature_mixes import BUILDERS as MIXES
from tests._feature_mixes_more import BUILDERS as MORE
from tests._matrix import Tally, compare_group, iter_truth, reference_resolver
from tests.test_reader_matrix import Indexed, opener

BUILDERS = {**MIXES, **MORE}

#: readers of :func:`tests.test_reader_matrix.opener`, and those defined here (:func:`_opener`)
READERS = (
    "zarr-json", "zarr-parquet", "zarr-dmrpp", "h5sidecar", "h5sidecar-json", "h5sidecar-dask",
    "datatree", "load", "store", "fsspec", "gateway-v2", "gateway-v3", "gateway-sharded",
)  # fmt: skip

#: h5sidecar's engine and its openers give attributes' values and types exactly
EXACT = ("h5sidecar", "h5sidecar-json", "h5sidecar-dask", "datatree", "load")

#: (reader or "*", file) -> {variable path: phrase of the verdict line}: the documented
#: refusals and differences.  "*" also covers the truth itself where xarray cannot decode.
EXPECTED: dict[tuple[str, str], dict[str, str]] = {
    # xarray cannot cast a compound with an array member to its own view of it: h5netcdf on
    # the file refuses alike (raw values are compared with h5py below)
    ("*", "enum_compound.nc"): {"/comp": "Cannot cast", "/scomp": "Cannot cast"},
    # left out of load() by this test (see UNDECODABLE)
    ("load", "enum_compound.nc"): {"/comp": "absent", "/scomp": "absent"},
    # the v3 views leave out structured types with big-endian fields (reader-matrix.md)
    ("gateway-v3", "enum_compound.nc"): {"/comp": "absent", "/scomp": "absent"},
    ("gateway-sharded", "enum_compound.nc"): {"/comp": "absent", "/scomp": "absent"},
    # xarray decodes a Zarr v3 _FillValue attribute of a string array with no string rule
    # ("Failed to decode fill_value. Unsupported dtype StringDType()"): upstream
    ("gateway-v3", "string_fills.nc"): {"/vlen/vfill": "Failed to decode fill_value"},
    ("gateway-sharded", "string_fills.nc"): {"/vlen/vfill": "Failed to decode fill_value"},
    # h5netcdf gives /g/u2 (3 values, on the root's scale "time") the group's own dimension
    # "time" of length 4 and reads a fourth value the file does not hold; every reader gives
    # h5py's 3 values (test_raw_values_equal_h5py)
    ("*", "scales_across_groups.nc"): {"/g/u2": "int64 vs int64"},
    # DMR++ has no float16: the attribute is left out (write_dmrpp lists it as skipped)
    ("zarr-dmrpp", "nan_fill.nc"): {"/hp": "float32 vs float16"},
}

#: variables whose truth xarray cannot decode (left out of ``load``, which loads all at once)
UNDECODABLE = {"enum_compound.nc": ("comp", "scomp")}


class Mixes(Indexed):
    """The files built, indexed to JSON and Parquet, and rebuilt from their DMR++."""

    def __init__(self, root: Path) -> None:
        from h5sidecar import index_dmrpp, index_granule, write_dmrpp, write_json
        from h5sidecar.workflows import index_many

        self.src = root / "files"
        self.src.mkdir()
        for name, build in BUILDERS.items():
            build(self.src / name)
        self.json_dest, self.parq_dest = root / "json", root / "parq"
        for dest, fmt in ((self.json_dest, "json"), (self.parq_dest, "parquet")):
            index_many(str(self.src), str(dest), format=fmt, executor="serial",  # type: ignore[arg-type]
                       patterns=("*.nc",))  # fmt: skip
        self.dmrpp_dest = root / "dmrpp"
        self.dmrpp_dest.mkdir()
        #: file -> what the DMR++ leaves out (paths, ``path@attribute`` for attributes)
        self.dmrpp_skipped: dict[str, set[str]] = {}
        for name in BUILDERS:
            doc = self.src / f"{name}.dmrpp"
            left = write_dmrpp(index_granule(str(self.src / name)), str(doc))
            self.dmrpp_skipped[name] = {s.path for s in left}
            refs = index_dmrpp(str(doc), str(self.src / name), allowed_prefixes=[str(self.src)])
            write_json(refs, self.dmrpp_dest / f"{name}.json")
        self._gateway: Any = None
        self.url = ""


@pytest.fixture(scope="module")
def mixes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixes]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ix = Mixes(tmp_path_factory.mktemp("mixes"))
    yield ix
    ix.close()


def _opener(reader: str, ix: Mixes, name: str, tmp: Path) -> Callable[[str], xr.Dataset]:
    import h5sidecar
    from h5sidecar.read import SidecarStore

    parq = ix.sidecar(name, "parquet")
    if reader == "zarr-dmrpp":
        so = {"fo": str(ix.dmrpp_dest / f"{name}.json"), "remote_protocol": "file"}
        return lambda g: xr.open_dataset("reference://", engine="zarr", group=g or None,
                                         backend_kwargs={"storage_options": so})  # fmt: skip
    if reader == "h5sidecar-json":
        return lambda g: xr.open_dataset(ix.sidecar(name, "json"), engine="h5sidecar",
                                         group=g or None)  # fmt: skip
    if reader == "h5sidecar-dask":
        return lambda g: xr.open_dataset(parq, engine="h5sidecar", group=g or None, chunks={})
    if reader == "datatree":
        def subtree(g: str) -> xr.Dataset:
            tree = xr.open_datatree(parq, engine="h5sidecar")
            return (tree[g] if g else tree).to_dataset()

        return subtree
    if reader == "load":
        skip = list(UNDECODABLE.get(name, ()))

        def loaded(g: str) -> xr.Dataset:
            ds = xr.open_dataset(parq, engine="h5sidecar", group=g or None)
            return h5sidecar.load(ds.drop_vars([v for v in skip if v in ds.variables]))

        return loaded
    if reader == "store":
        return lambda g: xr.open_zarr(SidecarStore(parq), group=g or None, zarr_format=2,
                                      chunks=None)  # fmt: skip
    return opener(reader, ix, name, tmp)


def _escaped(truth: tuple[xr.Dataset, xr.Dataset]) -> tuple[xr.Dataset, xr.Dataset]:
    """The truth with the names a Zarr key space cannot hold %XX-escaped, as every reader
    shows them (docs/explanation/hdf5-support.md, "Names")."""
    return tuple(  # type: ignore[return-value]
        ds.rename({n: key_safe_name(str(n)) for n in ds.variables if key_safe_name(str(n)) != n})
        for ds in truth
    )


def _expected(reader: str, name: str, ix: Mixes) -> dict[str, str]:
    out = {**EXPECTED.get(("*", name), {}), **EXPECTED.get((reader, name), {})}
    if reader == "zarr-dmrpp":  # what the DMR++ leaves out, each with its reason
        out.update({f"/{p}": "absent" for p in ix.dmrpp_skipped[name] if "@" not in p})
    return out


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_reader_reads_what_h5netcdf_reads(mixes: Mixes, name: str, reader: str,
                                                tmp_path: Path) -> None:  # fmt: skip
    path = mixes.src / name
    refs = mixes.refs(name)
    skipped = {s.path for s in refs.skipped}
    tally = Tally()
    open_group = _opener(reader, mixes, name, tmp_path)
    with h5py.File(path, "r") as h5, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray warns of an axis named twice, as on the file
        truths = [(g, _escaped(pair)) for g, pair in iter_truth(path)]
        resolve = reference_resolver(h5)
        for group, pair in truths:
            prefix = f"{group}/" if group else ""
            names = {p[len(prefix):] for p in skipped if p.startswith(prefix)}
            key = "/".join(key_safe_name(part) for part in group.split("/")) if group else ""
            compare_group(lambda k=key: open_group(k), pair, f"/{group}" if group else "", tally, names,
                          resolve, outer_lengths({g: p[0] for g, p in truths}, group),
                          "exact" if reader in EXACT else "json")  # fmt: skip
    expected = _expected(reader, name, mixes)
    lines = tally.differ + tally.refused + [f"attribute {a}" for a in tally.attrs_differ]
    unexpected, seen = [], set()
    # h5netcdf numbers anonymous axes over every dataset of the file, those the DMR++ leaves
    # out included: the numbers of the others can only follow the document
    renumbered = reader == "zarr-dmrpp" and any("@" not in p for p in mixes.dmrpp_skipped[name])
    for line in lines:
        where = line.split(": ", 1)[0].removeprefix("attribute ")
        hit = next((v for v, phrase in expected.items() if where == v and phrase in line), None)
        if hit is not None:
            seen.add(hit)
        elif not (renumbered and "where h5netcdf has ('phony_dim_" in line):
            unexpected.append(line)
    if reader == "zarr-dmrpp":  # a variable left out of the document need not be refused
        seen |= {v for v, phrase in expected.items() if phrase == "absent"}
    assert not unexpected, f"[{reader}] {name}:\n" + "\n".join(unexpected)
    assert seen == set(expected), f"expected but not seen: {set(expected) - seen}"


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_raw_values_equal_h5py(mixes: Mixes, name: str) -> None:
    """``read_arrays`` (the batch reader, no zarr, no xarray) gives h5py's values: numbers in
    native byte order, strings as text, compounds field by field."""
    from h5sidecar import read_arrays
    from tests.indexer._compare import h5_padded

    refs = mixes.refs(name)
    got = read_arrays(mixes.sidecar(name, "parquet"), list(refs.arrays))
    with h5py.File(mixes.src / name, "r") as h5:
        resolve = reference_resolver(h5)
        for path, values in got.items():
            want = h5_padded(h5["/".join(unquote(part) for part in path.split("/"))], values.shape)
            assert same_values(values, want, resolve), f"{path}: {values!r} != {want!r}"
            w = np.asarray(want).dtype
            if w.kind in "biufc":
                assert values.dtype == w.newbyteorder("="), f"{path}: {values.dtype} != {w}"


@pytest.mark.parametrize("via", ["json", "parquet", "dmrpp", "gateway-v2"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_raw_values_through_zarr_equal_h5py(mixes: Mixes, name: str, via: str) -> None:
    """zarr-python with no h5sidecar reader (fsspec ``reference://`` over each sidecar, the
    gateway's Zarr v2 view over HTTP) reads h5py's raw values, compounds field by field."""
    import zarr

    from tests.indexer._compare import assert_values_equal, h5_dataset, h5_padded, open_plain

    if via == "gateway-v2":
        group = zarr.open_group(f"{mixes.gateway_url()}/zarr/{name}/", mode="r", zarr_format=2)
    else:
        fo = mixes.dmrpp_dest / f"{name}.json" if via == "dmrpp" else mixes.sidecar(name, via)
        group = open_plain(str(fo))
    left_out = mixes.dmrpp_skipped[name] if via == "dmrpp" else set()
    with h5py.File(mixes.src / name, "r") as h5, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in mixes.refs(name).arrays:
            if path in left_out:
                continue
            dset = h5_dataset(h5, "/".join(unquote(part) for part in path.split("/")))
            got = group[path][...]
            assert_values_equal(got, h5_padded(dset, np.shape(got)), dset, f"{path} ({via})")


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_cube_of_mixed_granules(tmp_path: Path, fmt: str) -> None:
    """A datacube of granules combining packing, ``_Unsigned``, fill values, a noleap time
    with ``_FillValue``, big-endian storage and never-written chunks reads, through
    h5sidecar's engine and plain xarray, what h5netcdf reads from the files."""
    from h5sidecar import read_arrays
    from h5sidecar.workflows import build_cube, index_many
    from tests._feature_mixes import cube_member

    files = [tmp_path / "src" / f"day{d}.nc" for d in (2, 0, 1)]
    files[0].parent.mkdir()
    for d, f in zip((2, 0, 1), files, strict=True):
        cube_member(f, d)
    files.sort()
    index_many(str(tmp_path / "src"), str(tmp_path / "sidecars"), format=fmt, executor="serial")
    cube = tmp_path / ("cube.json" if fmt == "json" else "cube.parq")
    build_cube(str(tmp_path / "sidecars"), str(cube), format=fmt)
    kw: dict[str, Any] = {"engine": "h5netcdf", "combine": "nested", "concat_dim": "time",
                          "data_vars": "minimal", "coords": "minimal", "compat": "override"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_mfdataset(files, **kw).load()
        wide = xr.concat([open_truth(f, "")[1] for f in files], "time", data_vars="minimal",
                         coords="minimal", compat="override").load()  # fmt: skip
    so = {"fo": str(cube), "remote_protocol": "file"}
    readers: dict[str, Callable[[], xr.Dataset]] = {
        "h5sidecar": lambda: xr.open_dataset(cube, engine="h5sidecar"),
        "h5sidecar-dask": lambda: xr.open_dataset(cube, engine="h5sidecar", chunks={}),
        "zarr": lambda: xr.open_dataset("reference://", engine="zarr",
                                        backend_kwargs={"storage_options": so}),
    }  # fmt: skip
    for reader, open_cube in readers.items():
        tally = Tally()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compare_group(open_cube, (want, wide), reader, tally, set(),
                          attrs="exact" if reader.startswith("h5sidecar") else "json")  # fmt: skip
        assert not tally.differ + tally.refused, (reader, tally.differ + tally.refused)
        assert tally.counts["equal"] + tally.counts["widened"] == len(want.variables)
    raw = read_arrays(str(cube), ["tas", "flag", "be", "time"])
    for name, got in raw.items():
        parts = []
        for f in files:
            with h5py.File(f, "r") as h5:
                parts.append(h5[name][()])
        expected = np.concatenate(parts)
        assert same_values(got, expected) and got.dtype == expected.dtype.newbyteorder("="), name


@pytest.mark.parametrize("name", ["cfill", "s_storefill"])
def test_sidecars_that_keep_never_written_chunks_missing(mixes: Mixes, name: str,
                                                         tmp_path: Path) -> None:  # fmt: skip
    """Sidecars written before such chunks were stored (missing, the storage fill value in
    ``.zarray``) still read as h5py through the batch reader, compounds and byte strings
    included."""
    import dataclasses

    from h5sidecar import read_arrays
    from h5sidecar.references import INLINE, MISSING, ChunkManifest, write_parquet

    source = "enum_compound.nc" if name == "cfill" else "string_fills.nc"
    refs = mixes.refs(source)
    arr = refs.arrays[name]
    m = arr.manifest
    codes = np.array(m.codes)
    assert (codes == INLINE).any(), "the indexer stores the never-written chunks"
    codes[codes == INLINE] = MISSING
    manifest = ChunkManifest.from_arrays(urls=m.urls, codes=codes, offsets=m.offsets,
                                         lengths=np.where(codes == MISSING, 0, m.lengths))  # fmt: skip
    arrays = {**refs.arrays, name: dataclasses.replace(arr, manifest=manifest)}
    refs = dataclasses.replace(refs, arrays=arrays)
    assert refs.arrays[name].zarray_fill_value() is not None
    sidecar = write_parquet(refs, tmp_path / "old.parq")
    with h5py.File(mixes.src / source, "r") as h5:
        want = h5[name][()]
    got = read_arrays(sidecar, [name])[name]
    assert same_values(got, want), (got, want)
    with xr.open_dataset(sidecar, engine="h5sidecar") as ds:
        assert same_values(ds[name].values, want)


@pytest.mark.parametrize("reader", ["h5sidecar", "zarr-json"])
def test_variable_shorter_than_its_unlimited_dimension(tmp_path: Path, reader: str) -> None:
    """``t`` has 3 records (``t`` and ``label`` wrote them), ``val(t, n)`` only 2: h5netcdf
    shows ``val`` as (3, 4), its third record the fill value (NaN once masked)."""
    import netCDF4

    from h5sidecar import index_granule, write_json, write_parquet

    path = tmp_path / "short.nc"
    with netCDF4.Dataset(path, "w") as f:
        f.createDimension("t", None)
        f.createDimension("n", 4)
        f.createVariable("t", "f8", ("t",))[:3] = [0.0, 1.0, 2.0]
        val = f.createVariable("val", "u2", ("t", "n"), fill_value=np.uint16(65535),
                               chunksizes=(2, 3))  # fmt: skip
        val[:2, :] = np.arange(8).reshape(2, 4)
    refs = index_granule(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pair = open_truth(path, "")
        assert pair is not None and pair[0]["val"].shape == (3, 4)
        if reader == "h5sidecar":
            ds = xr.open_dataset(write_parquet(refs, tmp_path / "s.parq"), engine="h5sidecar")
        else:
            so = {"fo": str(write_json(refs, tmp_path / "s.json")), "remote_protocol": "file"}
            ds = xr.open_dataset("reference://", engine="zarr",
                                 backend_kwargs={"storage_options": so})  # fmt: skip
        tally = Tally()
        compare_group(lambda: ds, pair, "", tally, {"n"})
    assert not tally.differ + tally.refused, tally.differ + tally.refused
