"""``read_refs(..., arrays=PATTERNS)``: a sidecar opened for a few named arrays holds only
those, decodes only their metadata, equals the full open on them, and reads h5py's values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.read import read_arrays
from h5sidecar.references import GranuleRefs, read_refs, write_json, write_parquet
from h5sidecar.references._keys import _parse_few, _parse_many, parse_chunk_names
from h5sidecar.references._lazy_refs import LazyArrayRefs
from h5sidecar.references._select import array_matcher
from h5sidecar.references.parquet_sidecar._manifests_file import MANIFESTS_FILE
from tests._granules import read_h5
from tests.references._h5refs import edit_zarray

PATTERNS = ["*/heights/h_ph", "gt1l/heights/lat_ph"]
WANT = {f"{b}/heights/h_ph" for b in ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")} | {
    "gt1l/heights/lat_ph"}


@pytest.fixture(scope="module")
def sidecars(atl03_refs: GranuleRefs, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("select")
    return {"json": Path(write_json(atl03_refs, d / "g.h5.json")),
            "parquet": Path(write_parquet(atl03_refs, d / "g.h5.parq")),
            "compact": Path(write_parquet(atl03_refs, d / "c.h5.parq", layout="compact"))}


@pytest.mark.parametrize("kind", ["json", "parquet", "compact"])
def test_holds_the_named_arrays_equal_to_a_full_open(kind: str, sidecars: dict[str, Path],
                                                     atl03_refs: GranuleRefs,
                                                     atl03_h5: Path) -> None:
    refs = read_refs(sidecars[kind], arrays=PATTERNS)
    assert set(refs.arrays) == WANT
    assert all(isinstance(a, LazyArrayRefs) for a in refs.arrays.values())
    assert refs.groups == atl03_refs.groups and refs.source == atl03_refs.source
    for path in WANT:
        full = atl03_refs.arrays[path]
        assert refs.arrays[path] == full, path
        assert refs.arrays[path].zarray_fill_value() == full.zarray_fill_value()
    got = read_arrays(refs, sorted(WANT), mask_and_scale=False)
    for path in WANT:
        np.testing.assert_array_equal(got[path], read_h5(atl03_h5, path))


def test_eager_and_kerchunk_sidecars_are_selected_after_a_full_read(
        sidecars: dict[str, Path], atl03_refs: GranuleRefs, tmp_path: Path) -> None:
    eager = read_refs(sidecars["json"], lazy=False, arrays=PATTERNS)
    assert set(eager.arrays) == WANT
    assert not any(isinstance(a, LazyArrayRefs) for a in eager.arrays.values())
    # without h5sidecar's extras (as kerchunk writes it) the sidecar is read whole, then cut
    doc = json.loads(sidecars["json"].read_text())
    del doc["h5sidecar"]
    (tmp_path / "k.json").write_text(json.dumps(doc))
    plain = read_refs(tmp_path / "k.json", arrays=PATTERNS)
    assert set(plain.arrays) == WANT
    for path in WANT:
        assert plain.arrays[path].manifest == atl03_refs.arrays[path].manifest


def test_only_named_metadata_is_decoded(sidecars: dict[str, Path], tmp_path: Path) -> None:
    doc = json.loads(sidecars["json"].read_text())
    bad = edit_zarray(doc, "gt2r/heights/signal_conf_ph", shape=[4, -6])
    (tmp_path / "bad.h5.json").write_text(json.dumps(bad))
    with pytest.raises(InvalidReferenceError, match="non-negative"):
        read_refs(tmp_path / "bad.h5.json")  # a full (lazy) open validates every .zarray
    refs = read_refs(tmp_path / "bad.h5.json", arrays=PATTERNS)  # not named: never decoded
    assert set(refs.arrays) == WANT
    with pytest.raises(InvalidReferenceError, match="non-negative"):
        read_refs(tmp_path / "bad.h5.json", arrays=["*/signal_conf_ph"])


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d["refs"].update({"no/such/array/0": ["x", 0, 1]}), "belongs to no array"),
        (lambda d: d["refs"].update({"gt1l/heights/h_ph/.zgroup": '{"zarr_format": 2}'}),
         "both a group and an array"),
        (lambda d: d["refs"].update({"gt1l/oops/.zattrs": "{}"}), "no .zgroup or .zarray"),
        (lambda d: d["refs"].update({"gt1l/heights/x.zarray": "{}"}), "unexpected metadata key"),
        (lambda d: d["h5sidecar"]["arrays"].update({"ghost": {"status": "virtual"}}),
         "has no .zarray"),
        (lambda d: d["h5sidecar"].update({"version": 99}), "extras version 99"),
    ],
)
def test_whole_sidecar_checks_still_apply(sidecars: dict[str, Path], tmp_path: Path,
                                          edit: object, match: str) -> None:
    doc = json.loads(sidecars["json"].read_text())
    edit(doc)  # type: ignore[operator]
    (tmp_path / "x.h5.json").write_text(json.dumps(doc))
    with pytest.raises(InvalidReferenceError, match=match):
        read_refs(tmp_path / "x.h5.json", arrays=PATTERNS)


def test_parquet_manifests_file_comes_with_the_metadata(sidecars: dict[str, Path],
                                                        tmp_path: Path, atl03_h5: Path) -> None:
    """Opened for named arrays, a Parquet sidecar's manifests file is fetched at open (with
    ``.zmetadata``), so the first manifest needs no further read: removing the file after the
    open changes nothing."""
    copy = tmp_path / "g.h5.parq"
    shutil.copytree(sidecars["parquet"], copy)
    refs = read_refs(copy, arrays=PATTERNS)
    (copy / MANIFESTS_FILE).unlink()
    got = read_arrays(refs, ["gt3r/heights/h_ph"])
    np.testing.assert_array_equal(got["gt3r/heights/h_ph"], read_h5(atl03_h5, "gt3r/heights/h_ph"))
    # a plain lazy open fetches it on first use: now missing, the sidecar is reported broken
    with pytest.raises(InvalidReferenceError, match="missing"):
        read_refs(copy).arrays["gt3r/heights/h_ph"].manifest  # noqa: B018


def test_patterns() -> None:
    m = array_matcher(["*/h_ph", "top"])
    assert m("gt1l/heights/h_ph") and m("top") and not m("gt1l/heights/h_ph2")
    assert not m("x/top") and not m("h_ph")
    assert array_matcher("a/[bc]")("a/c")
    with pytest.raises(ValueError, match="at least one"):
        array_matcher([])


@pytest.mark.parametrize(
    ("names", "grid"),
    [(["0", "3", "1"], (4,)), (["0.0", "1.2", "0.2"], (2, 3)), (["0"], ()),
     (["1.x"], (2, 2)), (["1"], (2, 2)), (["²"], (3,)), (["4"], (3,)), (["01", "1"], (3,)),
     (["99999999999999999999999"], (3,)), ([""], (3,))],
)
def test_few_chunk_names_parse_as_many_do(names: list[str], grid: tuple[int, ...]) -> None:
    """Arrays of a few chunks parse their names in Python, larger ones with Arrow: same indices,
    same errors."""
    rank = max(len(grid), 1)
    outcomes = []
    for parse in (_parse_few, _parse_many):
        try:
            outcomes.append(parse(names, rank, "v").tolist())
        except InvalidReferenceError as exc:
            outcomes.append(str(exc).split(",")[0].split("(")[0])
    assert outcomes[0] == outcomes[1]
    many = names * 40  # past the Python path: duplicates, so both paths must refuse them
    with pytest.raises(InvalidReferenceError):
        parse_chunk_names(many, grid, "v")


def test_the_garbage_collector_is_paused_while_parsing_and_restored(
        sidecars: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from h5sidecar.references.json_sidecar import _kerchunk_json as _json

    seen = []
    real = _json.ujson.loads

    def spy(data: object) -> object:  # what the collector's state is while the text is parsed
        seen.append(gc.isenabled())
        return real(data)

    assert gc.isenabled()
    with monkeypatch.context() as m:
        m.setattr(_json.ujson, "loads", spy)
        read_refs(sidecars["json"], arrays=PATTERNS)
        read_refs(sidecars["json"])
    assert seen and not any(seen) and gc.isenabled()
    (tmp_path / "bad.h5.json").write_text("{not json")
    with pytest.raises(InvalidReferenceError):
        read_refs(tmp_path / "bad.h5.json")
    assert gc.isenabled()
    gc.disable()  # a caller that turned it off keeps it off
    try:
        read_refs(sidecars["json"], arrays=PATTERNS)
        assert not gc.isenabled()
    finally:
        gc.enable()
