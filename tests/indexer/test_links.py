"""Links: soft, hard (twice, and cycles), external, dangling, user-defined."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

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
