"""HDF5 names a Zarr key space or a URL cannot hold, through every reader (issue 28 item 2).

A dataset named ``.zarray`` read as zeros through plain xarray over a Parquet sidecar, one named
``.zmetadata`` failed the whole granule in Parquet, ``..`` wrote outside the Parquet directory
and made plain zarr raise.  Such names are kept %-escaped (``urllib.parse.unquote`` gives the
HDF5 name back) the same way in every format; ``.``/``..`` and over-long names are skipped
with a reason.  Every reader below must give h5py's values under the escaped name.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

import h5sidecar
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.indexer import index_granule
from h5sidecar.read import H5SidecarFileSystem, SidecarStore
from h5sidecar.references import GranuleRefs, read_refs, write_json, write_parquet

pytestmark = pytest.mark.filterwarnings("ignore:.*:RuntimeWarning")

#: Names a Zarr key space cannot hold, names URLs mangle, and names that must stay verbatim.
ESCAPED = {
    ".zattrs": "%2Ezattrs", ".zarray": "%2Ezarray", ".zgroup": "%2Ezgroup",
    ".zmetadata": "%2Ezmetadata", ".h5sidecar": "%2Eh5sidecar", ".hidden": "%2Ehidden",
    "zarr.json": "zarr%2Ejson", "back\\slash": "back%5Cslash", "hash#x": "hash%23x",
    "q?x": "q%3Fx", "pct%41": "pct%2541",
}  # fmt: skip
VERBATIM = ("0", "0.0", "c", "__dunder", "with space", "é-ünï", "a.zarray", "ok")
SKIPPED = ("..", "L" * 300)
#: The group ``.zgroup`` holds an array ``.zarray`` (nested escapes).
NESTED = "%2Ezgroup_g/%2Ezarray"


def _build(path: Path) -> None:
    with h5py.File(path, "w") as f:
        for i, name in enumerate((*ESCAPED, *VERBATIM, *SKIPPED)):
            f.create_dataset(name, data=np.arange(3, dtype="i4") + 10 * i, chunks=(2,))
        f["ok"].attrs["a/b"] = 1  # '/' in an attribute name is fine for every format
        g = f.create_group(".zgroup_g")
        g.create_dataset(".zarray", data=np.arange(4.0) * 1.5)


def _h5_path(model: str) -> str:
    return unquote(model)  # names kept verbatim hold no '%'; '/' is never escaped


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GranuleRefs]:
    root = tmp_path_factory.mktemp("names")
    (root / "src").mkdir()
    path = root / "src" / "names.h5"
    _build(path)
    return path, index_granule(str(path))


def _sidecars(refs: GranuleRefs, root: Path) -> dict[str, str]:
    return {
        "json": write_json(refs, root / "n.json"),
        "parquet": write_parquet(refs, root / "n.parq"),
        "parquet-compact": write_parquet(refs, root / "c.parq", layout="compact"),
    }


def _check(ds: xr.Dataset, h5: h5py.File, group: str = "") -> None:
    want = {*ESCAPED.values(), *VERBATIM} if not group else {"%2Ezarray"}
    assert want <= set(ds.data_vars), sorted(want - set(ds.data_vars))
    for name in want:
        np.testing.assert_array_equal(
            ds[name].values, h5[_h5_path(f"{group}/{name}" if group else name)][()], err_msg=name
        )


def test_escape_rule_is_reversible_and_minimal() -> None:
    from h5sidecar.references import key_safe_name

    for raw, escaped in ESCAPED.items():
        assert key_safe_name(raw) == escaped and unquote(escaped) == raw
    for raw in VERBATIM:
        assert key_safe_name(raw) == raw


def test_indexer_escapes_or_skips_with_reasons(granule: tuple[Path, GranuleRefs]) -> None:
    _, refs = granule
    assert set(refs.arrays) == {*ESCAPED.values(), *VERBATIM, NESTED}
    skipped = {s.path: s for s in refs.skipped}
    assert "path step" in skipped["%2E."].reason
    assert "300 bytes long" in skipped["L" * 300].reason
    assert all(s.kind == "other" for s in skipped.values())
    links = refs.extra["names_escaped"]["links"]
    assert set(links) == {*ESCAPED.values(), "%2Ezgroup_g", NESTED}


def test_clash_with_an_escaped_form_is_skipped(tmp_path: Path) -> None:
    """``.zarray`` escapes to ``%2Ezarray``: a file holding both keeps the literal one."""
    path = tmp_path / "clash.h5"
    with h5py.File(path, "w") as f:
        f["%2Ezarray"] = np.arange(2)
        f[".zarray"] = np.arange(3)
    refs = index_granule(str(path))
    assert set(refs.arrays) == {"%252Ezarray"}
    (skip,) = refs.skipped
    assert skip.path == "%2Ezarray" and "cannot be a Zarr node name" in skip.reason


@pytest.mark.parametrize("fmt", ["json", "parquet", "parquet-compact"])
def test_every_sidecar_reader(granule: tuple[Path, GranuleRefs], tmp_path: Path, fmt: str) -> None:
    path, refs = granule
    sidecar = _sidecars(refs, tmp_path)[fmt]
    assert not (tmp_path / "refs.0.parq").exists()  # nothing written outside the sidecar
    back = read_refs(sidecar)
    assert set(back.arrays) == set(refs.arrays)
    with h5py.File(path) as h5:
        _check(xr.open_dataset(sidecar, engine="h5sidecar"), h5)
        tree = h5sidecar.open_datatree(sidecar)
        _check(tree.to_dataset(), h5)
        _check(tree["%2Ezgroup_g"].to_dataset(), h5, "%2Ezgroup_g")
        store = SidecarStore(sidecar)
        _check(xr.open_zarr(store, zarr_format=2, chunks=None), h5)
        grp = zarr.open_group(store, mode="r", zarr_format=2)
        np.testing.assert_array_equal(grp[NESTED][...], h5["/.zgroup_g/.zarray"][()])
        if fmt != "parquet-compact":  # plain readers know the kerchunk layouts only
            so: dict[str, Any] = {"fo": sidecar, "remote_protocol": "file"}
            plain = xr.open_dataset("reference://", engine="zarr",
                                    backend_kwargs={"storage_options": so})  # fmt: skip
            _check(plain, h5)
            nested = xr.open_dataset("reference://", engine="zarr", group="%2Ezgroup_g",
                                     backend_kwargs={"storage_options": so})  # fmt: skip
            _check(nested, h5, "%2Ezgroup_g")
        if fmt == "json":
            fs = H5SidecarFileSystem(fo=sidecar)
            _check(xr.open_zarr(fs.get_mapper(""), zarr_format=2, chunks=None), h5)


@pytest.mark.parametrize("view,fmt", [("zarr", 2), ("zarr3", 3), ("zarr3-shard/2", 3)])
def test_gateway(granule: tuple[Path, GranuleRefs], tmp_path: Path, view: str, fmt: int) -> None:
    """zarr over fsspec's HTTP client (no percent-encoding of keys) and a client that
    percent-encodes keys both reach every escaped node; a backslash is refused (400)."""
    import httpx

    from h5sidecar.workflows import index_many
    from tests.gateway._http import gateway

    path, _ = granule
    index_many(str(path.parent), str(tmp_path / "dest"), format="json", executor="serial")
    with gateway(str(tmp_path / "dest")) as (url, _), h5py.File(path) as h5:
        ds = xr.open_zarr(f"{url}/{view}/names.h5/", zarr_format=fmt, chunks=None)
        for name in {*ESCAPED.values(), *VERBATIM} - {"back%5Cslash"}:
            np.testing.assert_array_equal(ds[name].values, h5[_h5_path(name)][()], err_msg=name)
        with pytest.raises(Exception, match="400"):
            ds["back%5Cslash"].values  # noqa: B018 - fsspec sends %5C, which the gateway refuses
        nested = xr.open_zarr(f"{url}/{view}/names.h5/", group="%2Ezgroup_g", zarr_format=fmt,
                              chunks=None)  # fmt: skip
        _check(nested, h5, "%2Ezgroup_g")
        for name in ESCAPED.values():  # the key percent-encoded, as RFC 3986 clients send it
            r = httpx.get(f"{url}/{view}/names.h5/{quote(name, safe='')}/0")  # v3 views keep v2 keys
            assert r.status_code == 200, (name, r.text)


@pytest.mark.parametrize("planted", ["..", ".zarray", "g/../x", "a\\b", "zarr.json"])
def test_planted_names_are_refused(granule: tuple[Path, GranuleRefs], tmp_path: Path,
                                   planted: str) -> None:  # fmt: skip
    """A sidecar naming a node ``..`` (or a metadata key) is refused before any record file is
    read: the Parquet reader would leave the sidecar's directory."""
    import json

    _, refs = granule
    for fmt, sidecar in _sidecars(refs, tmp_path).items():
        meta_file = Path(sidecar) / ".zmetadata" if fmt != "json" else Path(sidecar)
        doc = json.loads(meta_file.read_text())
        meta = doc["metadata"] if fmt != "json" else doc["refs"]
        for key in [k for k in meta if k.startswith("ok/")]:
            meta[planted + key[2:]] = meta.pop(key)
        meta_file.write_text(json.dumps(doc))
        with pytest.raises(InvalidReferenceError, match="Zarr key space cannot hold"):
            read_refs(sidecar)
        shutil.rmtree(sidecar) if fmt != "json" else Path(sidecar).unlink()
