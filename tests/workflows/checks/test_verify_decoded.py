"""``verify`` checks CF-decoded values too: a sidecar whose fill value makes plain xarray mask
real data fails (issue 9: verify passed the broken sidecars)."""

from __future__ import annotations

import json
from pathlib import Path

from h5sidecar.indexer import index_granule
from h5sidecar.references import write_json
from h5sidecar.workflows import verify_refs
from tests.references._h5refs import edit_zarray
from tests.references.test_fill_values import _netcdf_like


def test_verify_passes_a_correct_sidecar(tmp_path: Path) -> None:
    granule = _netcdf_like(tmp_path / "g.h5")
    ref = write_json(index_granule(str(granule)), tmp_path / "g.h5.json")
    report = verify_refs(str(ref), sample=0)
    assert report.ok, [v.to_dict() for v in report.variables if v.status != "ok"]


def test_verify_fails_when_plain_xarray_masks_real_values(tmp_path: Path) -> None:
    granule = _netcdf_like(tmp_path / "g.h5")
    ref = Path(write_json(index_granule(str(granule)), tmp_path / "g.h5.json"))
    # what sidecars held before: .zarray fill_value = the HDF5 storage fill (0), which plain
    # xarray masks, turning real zeros into NaN; the raw bytes are still right
    doc = edit_zarray(json.loads(ref.read_text()), "precip", fill_value=0.0)
    ref.write_text(json.dumps(doc))
    report = verify_refs(str(ref), sample=0)
    checks = {v.path: v for v in report.variables}
    assert not report.ok
    assert checks["precip"].status == "different"
    assert "differ from xarray + h5netcdf" in checks["precip"].message
    assert checks["offset"].status == "ok"


def test_verify_truth_with_frozen_sizes_is_xarray_h5netcdfs(tmp_path: Path) -> None:
    """verify opens xarray + h5netcdf's view of a group with its dimension sizes computed once
    (``_compat.h5netcdf``); that view is identical to plain ``open_dataset``'s, on groups whose
    unlimited dimensions many variables share (the ATL03-like sample) and on variables of
    different lengths on one unlimited dimension."""
    import h5py
    import xarray as xr

    from h5sidecar.sample import write_sample_granules
    from h5sidecar.workflows.checks._cfcheck import open_truth
    from tests.test_compat import _unlimited_file

    (granule,) = write_sample_granules(tmp_path, granules=1, photons=3_000)
    with h5py.File(granule, "r") as f:
        groups = [""]
        f.visititems(lambda name, obj: groups.append(name) if isinstance(obj, h5py.Group)
                     and name.startswith("gt1l") else None)  # fmt: skip
    _unlimited_file(tmp_path / "u.nc")
    cases = [(granule, g) for g in groups] + [(tmp_path / "u.nc", ""), (tmp_path / "u.nc", "g")]
    assert len(cases) > 10
    for path, group in cases:
        plain, frozen = open_truth(path, group), open_truth(path, group, frozen_sizes=True)
        assert plain is not None and frozen is not None, (path, group)
        for want, got in zip(plain, frozen, strict=True):
            xr.testing.assert_identical(got.load(), want.load())
            assert got.sizes == want.sizes
        for ds in (*plain, *frozen):
            ds.close()
