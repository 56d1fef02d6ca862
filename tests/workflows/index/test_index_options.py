"""Truthful reports: a sidecar is up to date only for the index options it was made with.

Re-running ``index --checksums`` over sidecars made without checksums reported
``checksums: true`` while those granules, found up to date, had none.
"""

from __future__ import annotations

from pathlib import Path

from h5sidecar.references import read_refs
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows import index_many


def _has_checksums(sidecar: str) -> bool:
    refs = read_refs(sidecar)
    return all(a.checksums is not None for a in refs.arrays.values())


def test_a_change_of_index_options_reindexes(granule_dir: Path, tmp_path: Path) -> None:
    dest = str(tmp_path / "out")
    first = index_many(str(granule_dir), dest, executor="serial")
    assert first.counts == {"ok": 3, "failed": 0, "up_to_date": 0}
    assert not any(_has_checksums(g.sidecar) for g in first.granules)

    again = index_many(str(granule_dir), dest, executor="serial")
    assert again.counts == {"ok": 0, "failed": 0, "up_to_date": 3}

    # --checksums: every granule is indexed again, so the report's option is true of all
    with_sums = index_many(str(granule_dir), dest, executor="serial", checksums=True)
    assert with_sums.counts == {"ok": 3, "failed": 0, "up_to_date": 0}
    assert with_sums.options["checksums"] is True
    assert all(_has_checksums(g.sidecar) for g in with_sums.granules)
    assert index_many(str(granule_dir), dest, executor="serial", checksums=True).counts == {
        "ok": 0, "failed": 0, "up_to_date": 3
    }
    # not asking for checksums is served by sidecars that have them (nothing is dropped)
    assert index_many(str(granule_dir), dest, executor="serial").counts["up_to_date"] == 3

    # a setting that changes the sidecar's content, and one that does not
    inlined = IndexSettings(checksums=True, inline_threshold=1 << 20)
    report = index_many(str(granule_dir), dest, executor="serial", settings=inlined)
    assert report.counts["ok"] == 3
    assert all(g.n_inlined == g.n_virtual + g.n_inlined for g in report.granules)
    faster = IndexSettings(checksums=True, inline_threshold=1 << 20, metadata_block_size=1 << 16)
    report = index_many(str(granule_dir), dest, executor="process", workers=2, settings=faster)
    assert report.counts["up_to_date"] == 3
