"""Planted sidecars are refused with ``InvalidReferenceError`` by every reader (issue 28 item 8).

A ``fill_value`` that is no value of the dtype raised zarr's bare ``TypeError`` (``"AAAA"``) or
``OverflowError`` (int32 ``2147483648``), an unknown codec numcodecs' ``UnknownCodecError``, and
an uncompressed chunk declared at 4.29 GB but stored in 384 bytes made ``read_arrays`` allocate
the 4 GB output before noticing.  The gateway answers 422 (never 500).
"""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

import h5sidecar
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.read import SidecarStore, read_arrays
from h5sidecar.references import read_refs, write_json
from tests.references._h5refs import edit_zarray

VAR = "values"

PLANTED_FILLS = {
    "text_fill_float": {"fill_value": "AAAA", "dtype": "<f4"},
    "text_fill_datetime": {"fill_value": "AAAA", "dtype": "<M8[s]"},
    "int32_overflow": {"fill_value": 2147483648},
    "bool_fill_number": {"fill_value": 7, "dtype": "|b1", "chunks": [4000]},
}  # fmt: skip


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("planted")
    with h5py.File(root / "g.h5", "w") as f:
        f.create_dataset(VAR, data=np.arange(4000, dtype="<i4"), chunks=(1000,))
    write_json(h5sidecar.index_granule(str(root / "g.h5")), root / "g.h5.json")
    return root, json.loads((root / "g.h5.json").read_text())


def _plant(root: Path, name: str, doc: dict[str, Any]) -> Path:
    (root / name).mkdir(exist_ok=True)
    path = root / name / "g.h5.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("name", PLANTED_FILLS)
def test_fill_values_outside_the_dtype_are_invalid(base: tuple[Path, dict[str, Any]],
                                                   name: str) -> None:  # fmt: skip
    root, doc = base
    path = _plant(root, name, edit_zarray(doc, VAR, **PLANTED_FILLS[name]))
    with pytest.raises(InvalidReferenceError, match="fill_value"):
        read_refs(path)
    with pytest.raises(InvalidReferenceError, match="fill_value"):
        read_arrays(str(path), [VAR])
    with pytest.raises(InvalidReferenceError, match="fill_value"):
        xr.open_dataset(path, engine="h5sidecar")
    with pytest.raises(InvalidReferenceError, match="fill_value"):
        zarr.open_array(SidecarStore(str(path)), path=VAR, mode="r")


def test_unknown_codec_is_invalid(base: tuple[Path, dict[str, Any]]) -> None:
    root, doc = base
    path = _plant(root, "codec", edit_zarray(doc, VAR, compressor={"id": "no-such-codec"}))
    with pytest.raises(InvalidReferenceError, match="no-such-codec"):
        read_arrays(str(path), [VAR])
    with pytest.raises(InvalidReferenceError, match="no-such-codec"):
        xr.open_dataset(path, engine="h5sidecar")[VAR].values  # noqa: B018


def _huge_chunk(doc: dict[str, Any]) -> dict[str, Any]:
    """One uncompressed int32 chunk of 2**30 values (4.29 GB) whose reference is 384 bytes."""
    n = 2**30
    doc = edit_zarray(doc, VAR, shape=[n], chunks=[n])
    refs = doc["refs"]
    url, offset, _ = refs[f"{VAR}/0"]
    for k in range(1, 4):
        refs.pop(f"{VAR}/{k}")
    refs[f"{VAR}/0"] = [url, offset, 384]
    doc["h5sidecar"]["arrays"][VAR].pop("checksums", None)
    return doc


def test_declared_chunk_size_is_checked_before_allocating(
    base: tuple[Path, dict[str, Any]],
) -> None:
    root, doc = base
    path = _plant(root, "huge", _huge_chunk(doc))
    assert read_refs(path).arrays[VAR].manifest.lengths[0] == 384
    tracemalloc.start()
    try:
        with pytest.raises(InvalidReferenceError, match="stored in 384 bytes"):
            read_arrays(str(path), [VAR])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak  # nothing near the 4.29 GB output
    with pytest.raises(InvalidReferenceError, match="stored in 384 bytes"):
        xr.open_dataset(path, engine="h5sidecar")[VAR][:10].values  # noqa: B018


def test_gateway_answers_422(base: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    import httpx

    from tests.gateway._http import gateway

    root, doc = base
    dest = tmp_path / "dest"
    dest.mkdir()
    shutil.copy(_plant(root, "int32_overflow", edit_zarray(doc, VAR, fill_value=2**31)),
                dest / "fill.h5.json")  # fmt: skip
    shutil.copy(_plant(root, "huge", _huge_chunk(doc)), dest / "huge.h5.json")
    with gateway(str(dest), allow=(f"{root}/",)) as (url, _):
        for key in ("/zarr/fill.h5/.zmetadata", "/zarr/fill.h5/values/0",
                    "/zarr3/fill.h5/zarr.json"):  # fmt: skip
            r = httpx.get(url + key)
            assert r.status_code == 422, (key, r.status_code, r.text)
            assert r.json()["error"] == "invalid_reference"
        # the quick look refuses chunks this large before reading anything (501)
        r = httpx.get(f"{url}/quicklook.png?granule=huge.h5&variable=values")
        assert r.status_code < 500 or r.status_code == 501, r.text
