"""Links: soft, hard (twice, and cycles), external, dangling, user-defined."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.indexer import index_granule
from tests.indexer._compare import assert_refs_match_h5py


def test_links_of_every_kind(make_h5, tmp_path: Path) -> None:
    def build(f: h5py.File) -> None:
        f["data/x"] = np.arange(5)
        f["data/nested/y"] = np.arange(3.0)
        f["alias_hard"] = f["data/x"]  # a second hard link to the dataset
        f["alias_soft"] = h5py.SoftLink("/data/x")
        f["group_soft"] = h5py.SoftLink("/data")
        f["dangling"] = h5py.SoftLink("/nowhere")
        f["elsewhere"] = h5py.ExternalLink("other.h5", "/thing")
        f["data/nested/loop"] = f["data"]  # hard link to an ancestor: a cycle

    path = make_h5(build)
    refs = index_granule(str(path))
    assert set(refs.arrays) == {"data/x", "data/nested/y", "alias_hard", "alias_soft"}
    assert refs.arrays["alias_hard"].manifest == refs.arrays["data/x"].manifest
    # names are taken in link order: "alias_hard" comes first, "data/x" is its second name
    assert "hard link to the dataset indexed as 'alias_hard'" in refs.arrays["data/x"].note
    assert "soft link to '/data/x'" in refs.arrays["alias_soft"].note
    kinds = {s.path: s.kind for s in refs.skipped}
    assert kinds == {
        "group_soft": "other",
        "dangling": "soft_link_dangling",
        "elsewhere": "external_link",
        "data/nested/loop": "other",
    }
    reasons = {s.path: s.reason for s in refs.skipped}
    assert "other.h5:/thing" in reasons["elsewhere"]
    assert "cycles" in reasons["data/nested/loop"]
    assert_refs_match_h5py(refs, path)


def test_the_walk_opens_members_without_a_file_object_each(
    make_h5, monkeypatch: pytest.MonkeyPatch
) -> None:
    """h5py's ``group[name]`` makes an ``h5py.File`` per dataset to learn the file's mode
    (~13 us each on a granule of 1,000 arrays): the walk asks the mode once."""
    def build(f: h5py.File) -> None:
        for g in range(3):
            for v in range(4):
                f.create_dataset(f"g{g}/v{v}", data=np.arange(8, dtype="i4") + v)
        f["g0/hard"] = f["g1/v1"]
        f["soft"] = h5py.SoftLink("/g2/v3")

    path = make_h5(build)
    made = [0]
    init = h5py.File.__init__

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(h5py.File, "__init__", counting)
    refs = index_granule(str(path))
    monkeypatch.undo()
    assert made[0] <= 3, made[0]  # the granule itself, not one per dataset (12 + 2 links)
    assert len(refs.arrays) == 14
    assert_refs_match_h5py(refs, path)
