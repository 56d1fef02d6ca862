"""Fixtures of the workflow tests: small synthetic granules (good and bad) and an h5py oracle."""

from __future__ import annotations

import shutil
from pathlib import Path

import fsspec
import h5py
import hdf5plugin  # noqa: F401  (filters for the h5py oracle)
import numpy as np
import pytest
import zarr
from zarr.storage import FsspecStore

from h5sidecar.references import gc_paused

# every dataset of a test granule, as (path, chunked?) - the oracle compares each one
DATASETS = ("gt1l/heights/h_ph", "gt1l/heights/delta_time", "gt1l/heights/quality",
            "grid", "ancillary/scalar", "ancillary/label")


def write_granule(path: Path, *, seed: int = 0, n: int = 4000) -> Path:
    """A small HDF5 granule: gzip+shuffle chunks, a 2-d grid, a scalar, a string, groups."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = f"test granule {seed}"
        g = f.create_group("gt1l/heights")
        g.create_dataset("h_ph", data=rng.normal(100, 5, n).astype("f4"), chunks=(1000,),
                         compression="gzip", shuffle=True)
        g.create_dataset("delta_time", data=np.cumsum(rng.random(n)) + seed * 1e4,
                         chunks=(1000,), compression="gzip")
        g.create_dataset("quality", data=rng.integers(0, 5, n, dtype="i1"), chunks=(1000,))
        f.create_dataset("grid", data=rng.random((30, 40)), chunks=(10, 16), compression="gzip")
        f.create_dataset("ancillary/scalar", data=np.float64(seed + 0.5))
        f.create_dataset("ancillary/label", data=np.bytes_(f"granule-{seed}"))
    return path


def write_bad_granules(folder: Path, good: Path) -> dict[str, Path]:
    """Three bad inputs beside good ones: not HDF5, truncated, corrupt superblock."""
    folder.mkdir(parents=True, exist_ok=True)
    not_hdf5 = folder / "b_not_hdf5.h5"
    not_hdf5.write_text("this is a text file, not an HDF5 granule\n" * 20)
    truncated = folder / "b_truncated.h5"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    corrupt = folder / "b_corrupt.h5"
    data = bytearray(good.read_bytes())
    data[8:48] = b"\xff" * 40  # superblock fields after the signature: addresses now garbage
    corrupt.write_bytes(bytes(data))
    return {"not_hdf5": not_hdf5, "truncated": truncated, "corrupt": corrupt}


@pytest.fixture
def granule_dir(tmp_path: Path) -> Path:
    """A folder with three good granules (and a non-granule file the listing must ignore)."""
    src = tmp_path / "granules"
    for i in range(3):
        write_granule(src / f"G{i}.h5", seed=i)
    (src / "README.txt").write_text("not a granule")
    return src


def open_plain(sidecar: str, storage_options: dict | None = None,
               remote_protocol: str = "file") -> zarr.Group:
    """A sidecar opened with plain fsspec reference:// + zarr (no h5sidecar reader)."""
    remote_options = dict(storage_options or {})
    if remote_protocol == "s3":
        remote_options["asynchronous"] = True
    so: dict = {"fo": sidecar, "remote_protocol": remote_protocol,
                "remote_options": remote_options}
    if sidecar.startswith("s3://"):
        so["target_options"] = dict(storage_options or {})
    store = FsspecStore.from_url("reference://", storage_options=so, read_only=True)
    return zarr.open_group(store, mode="r", zarr_format=2)


def assert_matches_h5py(sidecar: str, h5file, storage_options: dict | None = None,
                        remote_protocol: str = "file") -> None:
    """Every test dataset read through the sidecar equals h5py's values."""
    group = open_plain(sidecar, storage_options, remote_protocol)
    local = isinstance(h5file, (str, Path)) and not str(h5file).startswith("s3://")
    # the collector paused, as the indexer reads: a collection on fsspec's I/O thread that
    # frees an h5py object would wait for the lock h5py holds while it reads a remote file
    with gc_paused(), (h5py.File(h5file, "r") if local else h5py.File(
            fsspec.open(str(h5file), "rb", **(storage_options or {})).open(), "r")) as f:
        for name in DATASETS:
            expected = f[name][()]
            actual = group[name][()]
            if isinstance(expected, bytes):
                assert bytes(np.asarray(actual).item()) == expected, name
            else:
                np.testing.assert_array_equal(np.asarray(actual), expected, err_msg=name)


def copy_tree(src: Path, dst: Path) -> Path:
    """Copy a folder (keeps mtimes)."""
    shutil.copytree(src, dst)
    return dst


def observe_calls(monkeypatch: pytest.MonkeyPatch, targets) -> list:  # type: ignore[no-untyped-def]
    """The first argument (a path) of every call of ``targets`` (``(class, method name)``
    pairs) from now on, observed only: the methods still do what they do."""
    calls: list = []
    for cls, method in targets:
        real = getattr(cls, method)

        def counting(self, path, *args, _real=real, **kw):  # type: ignore[no-untyped-def]
            calls.append(path)
            return _real(self, path, *args, **kw)

        monkeypatch.setattr(cls, method, counting)
    return calls
