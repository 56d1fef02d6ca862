"""build_cube in batches: what a build holds does not grow with whole granules' references.

Batches of one or two granules stand in for the 2,000 of a real build: the granules are folded
into pieces batch by batch, the pieces joined at the end (a second pass in coordinate order
when the listing is not), and the cube must be the one a single batch writes, its values those
of h5py and xarray + h5netcdf.
"""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.read._shared_caches import SIDECARS
from h5sidecar.sample import write_daily_collection
from h5sidecar.workflows import build_cube
from h5sidecar.workflows.cube import _cube_batches
from tests.workflows.cube.test_cube import (
    _assert_raw_matches_h5py,
    _assert_same,
    _index,
    _reference,
)

DAYS = 5
#: file names that list the days out of order (the second pass's case)
SHUFFLED = ["e.nc", "b.nc", "d.nc", "a.nc", "c.nc", "f_repacked.nc"]


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory) -> tuple[list[Path], Path]:
    """Daily granules (+ the repacked one, last in time) named out of time order, indexed."""
    root = tmp_path_factory.mktemp("batches")
    files = write_daily_collection(root / "nc", days=DAYS, mixed_packing=True)
    (root / "src").mkdir()
    for name, f in zip(SHUFFLED, files, strict=True):
        shutil.copy(f, root / "src" / name)
    return files, _index(root / "src", root / "sidecars")


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


# one granule a batch: pieces never interleave; two: (a, b) holds days 1-3 and (c, d) 2-4
@pytest.mark.parametrize(("batch", "passes"), [(1, 1), (2, 2)])
def test_batched_split_build_equals_one_batch(shuffled, tmp_path: Path, monkeypatch,
                                              batch: int, passes: int) -> None:
    files, sidecars = shuffled
    whole = build_cube(str(sidecars), str(tmp_path / "whole.parq"), on_mismatch="split")
    monkeypatch.setattr(_cube_batches, "BATCH", batch)
    calls = []
    scan = _cube_batches.scan
    monkeypatch.setattr("h5sidecar.workflows.cube._cube_build.scan",
                        lambda *a, **k: calls.append(1) or scan(*a, **k))
    parts = build_cube(str(sidecars), str(tmp_path / "parts.parq"), on_mismatch="split")
    assert len(calls) == passes
    assert [c.granules for c in parts.cubes] == [c.granules for c in whole.cubes]
    for a, b in zip(whole.cubes, parts.cubes, strict=True):
        assert _tree(Path(b.path)) == _tree(Path(a.path))
    regular = [f for f in files if "repacked" not in f.name]
    with xr.open_dataset(parts.cubes[0].path, engine="h5sidecar", chunks=None) as ds:
        assert ds.sizes["time"] == DAYS
        _assert_same(ds, _reference(regular))
    _assert_raw_matches_h5py(parts.cubes[0].path, regular)
    with xr.open_dataset(parts.cubes[1].path, engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference(files[-1:]))


def test_mismatch_in_a_later_batch_names_both_encodings(shuffled, tmp_path: Path,
                                                        monkeypatch) -> None:
    _, sidecars = shuffled
    monkeypatch.setattr(_cube_batches, "BATCH", 2)
    with pytest.raises(IncompatibleGranulesError) as info:
        build_cube(str(sidecars), str(tmp_path / "refused.parq"))
    text = str(info.value)
    assert "tas.scale_factor differs" in text and "f_repacked.nc" in text
    assert "0.019999" in text and "0.0099999" in text
    assert not (tmp_path / "refused.parq").exists()


def test_overlap_across_batches_is_refused(tmp_path: Path, monkeypatch) -> None:
    files = write_daily_collection(tmp_path / "nc", days=3)
    shutil.copy(files[0], tmp_path / "nc" / "zz_copy_of_day1.nc")  # the last batch
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    monkeypatch.setattr(_cube_batches, "BATCH", 1)
    with pytest.raises(IncompatibleGranulesError, match=r"zz_copy_of_day1.nc.*overlap along"):
        build_cube(str(sidecars), str(tmp_path / "cube.json"), format="json")


def test_build_leaves_the_shared_sidecar_cache_alone(shuffled, tmp_path: Path) -> None:
    """A build reads each sidecar once: parking them in the process-wide cache (256 MB by
    default) made its memory grow with the granules up to that bound, for nothing."""
    _, sidecars = shuffled
    SIDECARS.clear()
    build_cube(str(sidecars), str(tmp_path / "cube.parq"), on_mismatch="split")
    assert len(SIDECARS) == 0


def _traced_peak(dest: Path, out: Path) -> int:
    """Peak bytes of Python objects allocated while building a cube of ``dest``."""
    tracemalloc.start()
    try:
        build_cube(str(dest), str(out))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_memory_of_a_build_grows_by_little_per_member(tmp_path: Path, monkeypatch) -> None:
    """A build held every member's whole references (~40 KB each, 40 GB at a million); then
    one batch of them and ~1,200 bytes of Python objects a member at its peak (names, stamps,
    identities, chunk URLs, the members' JSON at the write); then ~650, the identities in
    columns (:class:`~h5sidecar.references.MemberTable`), one URL string a member; then ~410
    (the listing in Arrow, the pieces staged on disk); now ~270: the members' names held in
    Arrow until the write, and the manifests file codes the members' URL tuple without a
    ``str -> int`` mapping of it."""
    from benchmarks._scale_data import make_dest

    monkeypatch.setattr(_cube_batches, "BATCH", 200)
    small, large = 400, 1600
    dests = {n: make_dest(tmp_path / str(n), n)[1] for n in (small, large)}
    # a first build pays for what any build allocates once (imports, caches)
    _traced_peak(dests[small], tmp_path / "warm.parq")
    peaks = [_traced_peak(dests[n], tmp_path / f"cube{n}.parq") for n in (small, large)]
    per_member = (peaks[1] - peaks[0]) / (large - small)
    print(f"traced peaks {peaks}, {per_member:.0f} bytes a member")  # shown with -s
    assert per_member < 330, f"{per_member:.0f} bytes a member"
    with xr.open_dataset(tmp_path / f"cube{large}.parq", engine="h5sidecar", chunks=None) as ds:
        assert ds.sizes["time"] == large  # every member, in order (one day each)
        assert (np.diff(ds["time"].values) > np.timedelta64(0)).all()


#: A build in a child process (its own peak RSS), in batches of 200 sidecars so that what
#: grows with the members, not the batch, is what differs between two sizes.  It prints its
#: peak RSS (kB) when the cube is assembled, before the write begins, and at its end: the
#: process's own high-water mark (``VmHWM``), not ``ru_maxrss``, which a child inherits from
#: the process it was forked from (here the test runner, whatever it ran before).
_CHILD_BUILD = (
    "import sys\n"
    "from h5sidecar.workflows import build_cube\n"
    "from h5sidecar.workflows.cube import _cube_batches, _cube_build\n"
    "def peak():\n"
    "    with open('/proc/self/status') as f:\n"
    "        print(next(l for l in f if l.startswith('VmHWM:')).split()[1], flush=True)\n"
    "_cube_batches.BATCH = 200\n"
    "write = _cube_build.write_cube\n"
    "def measured(*args, **kwargs):\n"
    "    peak()\n"
    "    return write(*args, **kwargs)\n"
    "_cube_build.write_cube = measured\n"
    "build_cube(sys.argv[1], sys.argv[2])\n"
    "peak()\n"
)


def _child_peak_rss(dest: Path, out: Path) -> tuple[int, int]:
    """Peak RSS (bytes) of a child process that builds a cube of ``dest``: before its write,
    and in all."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]  # this checkout's h5sidecar, not an installed one
    out_text = subprocess.run([sys.executable, "-c", _CHILD_BUILD, str(dest), str(out)],
                              cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                              stdout=subprocess.PIPE, check=True).stdout
    before_write, whole = (int(v) * 1024 for v in out_text.split())
    return before_write, whole


@pytest.mark.slow
def test_build_memory_does_not_grow_with_the_members(tmp_path: Path) -> None:
    """Peak RSS of whole builds of 4,000 and 24,000 members, 200 sidecars a batch.

    Earlier: 213 and 281 MB at 2,000 and 10,000 (~8.8 KB more a member: each member's
    identity and record as JSON in .zmetadata), then ~2.2 KB a member at 10,000 vs 30,000
    (DEST's listing held as objects, the pieces' joined manifests and their concatenation,
    Arrow's hash of every member URL, twice).  Those peaks were the child's ``ru_maxrss``,
    inherited from the forked test runner (its low sizes floored at the runner's RSS); read
    as the child's own ``VmHWM``: main's code 207 / 241 MB before the write (~1.8 KB a member)
    and 223 / 267 MB in all (~2.3 KB), now 198 / 228 and 223 / 259 (~1.55 and ~1.9 KB).
    RSS at these sizes varies by 10-20 MB between runs (the loader threads' malloc arenas)
    and the write's Parquet and zstd state for an array's record file grows with the file up
    to its 100,000 rows (``record_size``, ~30 MB, flat beyond): the bound is loose, the
    traced test above is the tight one.  Below 2,000 members a build's own first batches
    dominate, so the sizes are larger than the members' share alone needs."""
    from benchmarks._scale_data import make_dest

    sizes = (4_000, 24_000)  # 20,000 apart: RSS noise (10-20 MB) is < 1 KB a member
    peaks = [_child_peak_rss(make_dest(tmp_path / str(n), n)[1], tmp_path / f"cube{n}.parq")
             for n in sizes]
    before, whole = ((peaks[1][i] - peaks[0][i]) / (sizes[1] - sizes[0]) for i in (0, 1))
    print(f"peaks {[(a >> 20, b >> 20) for a, b in peaks]} MB, {before:.0f} bytes a member "
          f"before the write, {whole:.0f} in all")  # with -s
    assert before < 2500, f"{before:.0f} bytes a member before the write"
    assert whole < 3000, f"{whole:.0f} bytes a member"
    with xr.open_dataset(tmp_path / "cube24000.parq", engine="h5sidecar", chunks=None) as ds:
        assert ds.sizes["time"] == sizes[1]
        assert (np.diff(ds["time"].values) > np.timedelta64(0)).all()
