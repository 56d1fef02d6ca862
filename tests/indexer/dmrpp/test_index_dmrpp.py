"""``index_dmrpp`` on small handmade DMR++ documents beside HDF5 files written with h5py.

Each document is written from what the HDF5 indexer finds in the file (offsets, lengths,
filters), then changed the way real documents differ: the data-URL placeholder, a chunk split
into blocks, a chunk left out, values written in the document, a per-chunk ``href``, a filter
list in the wrong order, no byte order.  Values are compared with h5py; bad documents must
raise :class:`InvalidDmrppError` / :class:`ForbiddenSourceError`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar import index_dmrpp
from h5sidecar.errors import ForbiddenSourceError, InvalidDmrppError, UnsupportedFeatureError
from h5sidecar.indexer.dmrpp import resolve_href
from h5sidecar.references import write_json
from h5sidecar.settings import IndexSettings
from tests.indexer._compare import open_plain
from tests.indexer.dmrpp._documents import chunk_rows as _chunk_rows
from tests.indexer.dmrpp._documents import document as _document
from tests.indexer.dmrpp._documents import write_beside as _write


@pytest.fixture
def granule(tmp_path: Path) -> Callable[..., Path]:
    """``granule(**create_dataset_kwargs)``: g.h5 with a float32 "t" of 6 x 8 in 3 x 4 chunks."""

    def make(**kwargs: Any) -> Path:
        path = tmp_path / "g.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset("t", data=np.arange(48, dtype="<f4").reshape(6, 8), chunks=(3, 4),
                             **kwargs)  # fmt: skip
        return path

    return make


def _values(refs: Any, tmp_path: Path, name: str) -> np.ndarray:
    return np.asarray(open_plain(write_json(refs, tmp_path / "refs.json"))[name][...])


def test_placeholder_filters_and_attributes(granule: Callable[..., Path], tmp_path: Path) -> None:
    path = granule(compression="gzip", compression_opts=4, shuffle=True, fletcher32=True)
    doc = _write(path, _document(path, "t", filters="shuffle deflate fletcher32"))
    refs = index_dmrpp(doc)
    arr = refs.arrays["t"]
    assert refs.source.url == str(path) and refs.extra["from_dmrpp"]["url"] == doc
    assert [f["id"] for f in arr.meta.filters] == ["shuffle", "zlib", "fletcher32"]
    assert dict(arr.meta.attrs) == {"units": "K", "scale_factor": 0.5}  # no origname
    assert refs.extra["attribute_dtypes"]["t"] == {"scale_factor": "<f4"}
    assert arr.meta.dimension_names == ("phony_dim_0", "phony_dim_1")
    with h5py.File(path) as f:
        np.testing.assert_array_equal(_values(refs, tmp_path, "t"), f["t"][...])


def test_fletcher32_in_the_wrong_order_is_checked_on_a_chunk(tmp_path: Path) -> None:
    path = tmp_path / "g.h5"
    data = np.arange(48, dtype="<f4").reshape(6, 8)
    with h5py.File(path, "w") as f:  # fletcher32 first, then deflate (as netCDF-C writes)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((3, 4))
        dcpl.set_fletcher32()
        dcpl.set_deflate(4)
        space = h5py.h5s.create_simple((6, 8))
        dsid = h5py.h5d.create(f.id, b"t", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
        dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)
    doc = _write(path, _document(path, "t", filters="deflate fletcher32"))
    refs = index_dmrpp(doc)
    arr = refs.arrays["t"]
    assert [f["id"] for f in arr.meta.filters] == ["fletcher32", "zlib"]
    assert "does not decode its chunks" in arr.note
    np.testing.assert_array_equal(_values(refs, tmp_path, "t"), data)


def test_a_chunk_no_filter_order_decodes_is_skipped(
    granule: Callable[..., Path], tmp_path: Path
) -> None:
    path = granule(fletcher32=True, compression="gzip")
    rows, _ = _chunk_rows(path, "t")
    rows = [r.replace('offset="', 'offset="1') for r in rows]  # every chunk read elsewhere
    with h5py.File(path, "a") as f:  # room for the moved offset inside the file
        f["pad"] = np.zeros(200_000, "u1")
    refs = index_dmrpp(_write(path, _document(path, "t", rows=rows,
                                              filters="deflate fletcher32")))  # fmt: skip
    assert [(s.path, s.kind) for s in refs.skipped] == [("t", "unsupported_filter")]


def test_blocks_missing_chunks_and_compact_values(
    granule: Callable[..., Path], tmp_path: Path
) -> None:
    path = granule(fillvalue=-1.0)
    rows, _ = _chunk_rows(path, "t")
    first = rows[0]
    off = int(first.split('offset="')[1].split('"')[0])
    split = (
        f'<dmrpp:chunk chunkPositionInArray="[0,0]"><dmrpp:block offset="{off}" nBytes="20"/>'
        f'<dmrpp:block offset="{off + 20}" nBytes="28"/></dmrpp:chunk>'
    )
    compact = base64.b64encode(np.array([7, 8], "<i2").tobytes()).decode()
    body = (
        f'<Int16 name="c"><Dim size="2"/><dmrpp:chunks byteOrder="LE"/>'
        f"<dmrpp:compact>{compact}</dmrpp:compact></Int16>"
    )
    doc = _write(path, _document(path, "t", rows=[split, *rows[1:-1]], body=body))
    doc_text = Path(doc).read_text().replace('<dmrpp:chunks byteOrder="LE">',
                                             '<dmrpp:chunks byteOrder="LE" fillValue="-1">')  # fmt: skip
    Path(doc).write_text(doc_text)
    refs = index_dmrpp(doc)
    want = np.arange(48, dtype="<f4").reshape(6, 8)
    want[3:, 4:] = -1.0  # the chunk left out reads as the fill value
    np.testing.assert_array_equal(_values(refs, tmp_path, "t"), want)
    # stored in the sidecar, as the HDF5 indexer does: a .zarray fill_value of -1.0 would be
    # masked by plain xarray, which takes it for the _FillValue
    manifest = refs.arrays["t"].manifest
    assert (manifest.n_missing, manifest.n_inline) == (0, 1)
    assert refs.arrays["c"].status == "inlined"
    np.testing.assert_array_equal(_values(refs, tmp_path, "c"), [7, 8])


def test_compact_values_without_byte_order_are_little_endian(
    granule: Callable[..., Path], tmp_path: Path
) -> None:
    """build_dmrpp writes multi-byte ``dmrpp:compact`` values in its (little-endian) host's
    order with no ``byteOrder``, and Hyrax reads them so: read as written, not skipped."""
    path = granule()
    values = np.array([[1.5, -2.0], [3.25, 1e300]], "<f8")
    minus_two = base64.b64encode(np.array(-2, "<i4").tobytes()).decode()
    body = (
        f'<Float64 name="c"><Dim size="2"/><Dim size="2"/><dmrpp:compact>'
        f"{base64.b64encode(values.tobytes()).decode()}</dmrpp:compact></Float64>"
        f'<Int32 name="s"><dmrpp:compact>{minus_two}</dmrpp:compact></Int32>'
    )
    refs = index_dmrpp(_write(path, _document(path, "t", body=body)))
    assert not refs.skipped, refs.skipped
    np.testing.assert_array_equal(_values(refs, tmp_path, "c"), values)
    assert _values(refs, tmp_path, "s") == -2


def test_scattered_blocks_are_read_into_the_sidecar(
    granule: Callable[..., Path], tmp_path: Path
) -> None:
    path = granule()
    rows, _ = _chunk_rows(path, "t")
    off = int(rows[0].split('offset="')[1].split('"')[0])
    end = path.stat().st_size
    with path.open("r+b") as fh:  # the chunk's last 28 bytes again, after the end of the file
        fh.seek(off + 20)
        tail = fh.read(28)
        fh.seek(end)
        fh.write(tail)
    split = (
        f'<dmrpp:chunk chunkPositionInArray="[0,0]"><dmrpp:block offset="{off}" nBytes="20"/>'
        f'<dmrpp:block offset="{end}" nBytes="28"/></dmrpp:chunk>'
    )
    refs = index_dmrpp(_write(path, _document(path, "t", rows=[split, *rows[1:]])))
    arr = refs.arrays["t"]
    assert arr.manifest.n_inline == 1 and "scattered blocks" in arr.note
    np.testing.assert_array_equal(_values(refs, tmp_path, "t"), np.arange(48).reshape(6, 8))


def test_byte_order_is_never_guessed(granule: Callable[..., Path], tmp_path: Path) -> None:
    path = granule()
    doc = _write(path, _document(path, "t", byte_order=None))
    (skip,) = index_dmrpp(doc).skipped
    assert "byte order" in skip.reason
    with pytest.raises(UnsupportedFeatureError, match="byte order"):
        index_dmrpp(doc, settings=IndexSettings(on_unsupported="raise"))
    refs = index_dmrpp(doc, byte_order="LE")
    np.testing.assert_array_equal(_values(refs, tmp_path, "t"), np.arange(48).reshape(6, 8))


def test_per_chunk_href_resolves_beside_the_granule(
    granule: Callable[..., Path], tmp_path: Path
) -> None:
    path = granule()
    (tmp_path / "copy.h5").write_bytes(path.read_bytes())
    rows, _ = _chunk_rows(path, "t")
    rows[0] = rows[0].replace("/>", ' href="data/copy.h5"/>')
    refs = index_dmrpp(_write(path, _document(path, "t", href="data/g.h5", rows=rows)))
    assert set(refs.arrays["t"].manifest.urls) == {str(path), str(tmp_path / "copy.h5")}
    np.testing.assert_array_equal(_values(refs, tmp_path, "t"), np.arange(48).reshape(6, 8))


# -- bad input ------------------------------------------------------------------------------------
def test_not_xml(granule: Callable[..., Path]) -> None:
    doc = _write(granule(), "this is not { xml")
    with pytest.raises(InvalidDmrppError, match="is not XML"):
        index_dmrpp(doc)


def test_entities_are_refused(granule: Callable[..., Path]) -> None:
    path = granule()
    text = '<?xml version="1.0"?>\n<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
    doc = _write(path, text + _document(path, "t").split("\n", 1)[1].replace("K", "&x;"))
    with pytest.raises(InvalidDmrppError, match="DTD"):
        index_dmrpp(doc)


def test_chunk_past_the_end_of_the_file(granule: Callable[..., Path]) -> None:
    path = granule()
    size = path.stat().st_size
    row = f'<dmrpp:chunk offset="{size - 10}" nBytes="48" chunkPositionInArray="[0,0]"/>'
    with pytest.raises(InvalidDmrppError, match="past the end"):
        index_dmrpp(_write(path, _document(path, "t", rows=[row])))


@pytest.mark.parametrize(
    "row",
    [
        '<dmrpp:chunk offset="2048" nBytes="48" chunkPositionInArray="[1,0]"/>',  # off the grid
        '<dmrpp:chunk offset="2048" nBytes="48" chunkPositionInArray="[6,0]"/>',  # outside
        '<dmrpp:chunk offset="2048" nBytes="48" chunkPositionInArray="[0]"/>',  # wrong rank
    ],
)
def test_chunk_grid_does_not_cover_the_shape(granule: Callable[..., Path], row: str) -> None:
    path = granule()
    with pytest.raises(InvalidDmrppError, match="does not cover the shape"):
        index_dmrpp(_write(path, _document(path, "t", rows=[row])))


@pytest.mark.parametrize("href", ["s3://another-bucket/g.h5", "https://elsewhere.invalid/g.h5"])
def test_data_url_outside_the_allowed_sources(granule: Callable[..., Path], href: str) -> None:
    path = granule()  # refused by the allow-list before any request is made
    with pytest.raises(ForbiddenSourceError):
        index_dmrpp(_write(path, _document(path, "t", href=href)))


def test_chunk_href_outside_the_allowed_sources(granule: Callable[..., Path]) -> None:
    path = granule()
    rows, _ = _chunk_rows(path, "t")
    rows[0] = rows[0].replace("/>", ' href="/etc/passwd"/>')
    with pytest.raises(ForbiddenSourceError):
        index_dmrpp(_write(path, _document(path, "t", href="data/g.h5", rows=rows)))


@pytest.mark.parametrize(
    ("href", "doc_href", "want"),
    [
        ("", "data/dmrpp/g.h5", "s3://b/p/g.h5"),
        ("OPeNDAP_DMRpp_DATA_ACCESS_URL", "data/g.h5", "s3://b/p/g.h5"),
        ("data/dmrpp/g.h5", "data/dmrpp/g.h5", "s3://b/p/g.h5"),
        ("data/dmrpp/g.h5_mvs.h5", "data/dmrpp/g.h5", "s3://b/p/g.h5_mvs.h5"),
        ("/data/dmrpp/y.h5", "/data/dmrpp/g.h5", "s3://b/p/y.h5"),
        ("sub/y.h5", "OPeNDAP_DMRpp_DATA_ACCESS_URL", "s3://b/p/sub/y.h5"),
        ("y.h5", "/data/dmrpp/g.h5", "s3://b/p/y.h5"),
        ("s3://other/y.h5", "data/g.h5", "s3://other/y.h5"),  # then refused by the allow-list
        ("/etc/passwd", "data/g.h5", "s3://b/p/../etc/passwd"),  # likewise
    ],
)
def test_resolve_href(href: str, doc_href: str, want: str) -> None:
    assert resolve_href(href, doc_href, "s3://b/p/g.h5") == want
