"""The error tree and its kind codes: every code h5sidecar writes is an :class:`ErrorKind`
member, the codes never change (append-only), and writers emit them as the plain strings."""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import h5sidecar
from h5sidecar import errors
from h5sidecar.catalog import validate_document
from h5sidecar.dest._report import error_record
from h5sidecar.errors import ErrorKind, H5SidecarError, NotHDF5Error, STACValidationError
from h5sidecar.indexer import index_granule
from h5sidecar.references import GranuleRefs, Skipped, write_refs
from h5sidecar.workflows import index_many, read_report

#: Every value of ErrorKind, in order.  Run reports, sidecars, catalog results and HTTP error
#: bodies carry them: never change or remove one; new codes go at the end (here too).
PINNED = [
    "error",
    "unsupported",
    "invalid_reference",
    "not_hdf5",
    "corrupt",
    "limit_exceeded",
    "timeout",
    "source_read",
    "stale_reference",
    "forbidden_source",
    "not_indexed",
    "source_not_found",
    "incompatible_granules",
    "invalid_request",
    "chunk_decode",
    "invalid_stac",
    "bad_request",
    "key_too_long",
    "range_not_satisfiable",
    "response_too_large",
    "saturated",
    "method_not_allowed",
    "unauthorized",
    "http",
    "internal",
    "os_error",
    "memory",
    "worker_crashed",
    "bug",
    "no_time",
    "unsupported_filter",
    "unsupported_dtype",
    "unsupported_layout",
    "external_link",
    "soft_link_dangling",
    "virtual_dataset",
    "external_storage",
    "unreadable",
    "too_large_to_materialize",
    "other",
    "internal_error",
    "no_credentials",
    "source_auth",
    "record_busy",
    "invalid_dmrpp",
    "missing_extra",
    "unguarded_main",
    "warming",
    "record_unavailable",
]


def test_error_kind_values_are_pinned() -> None:
    values = [k.value for k in ErrorKind]
    assert values[: len(PINNED)] == PINNED, "an ErrorKind value changed or was removed"
    assert values == PINNED, "a new ErrorKind value: append it to PINNED as well"
    assert all(k.name == k.value.upper() for k in ErrorKind)


def _error_classes() -> set[type[H5SidecarError]]:
    """Every H5SidecarError subclass defined anywhere in the package (all modules imported)."""
    for info in pkgutil.walk_packages(h5sidecar.__path__, "h5sidecar."):
        if not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
    found: set[type[H5SidecarError]] = set()
    todo: list[type[H5SidecarError]] = [H5SidecarError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("h5sidecar") and cls not in found:
            found.add(cls)
            todo.extend(cls.__subclasses__())
    return found


def test_every_error_class_has_its_own_kind_from_error_kind() -> None:
    from h5sidecar.gateway._http_rules import KeyTooLongError, SaturatedError

    classes = _error_classes()
    assert {KeyTooLongError, SaturatedError, STACValidationError, NotHDF5Error} <= classes
    for cls in classes:
        assert "kind" in vars(cls), f"{cls.__name__} inherits its kind"
        assert isinstance(cls.kind, ErrorKind), f"{cls.__name__}.kind = {cls.kind!r}"
    by_kind: dict[str, list[str]] = {}
    for cls in classes:
        by_kind.setdefault(cls.kind, []).append(cls.__name__)
    assert all(len(names) == 1 for names in by_kind.values()), by_kind


def test_errors_module_holds_no_http_status() -> None:
    assert not hasattr(errors, "HTTP_STATUS") and "HTTP_STATUS" not in errors.__all__


def test_stac_validation_error_is_in_the_tree() -> None:
    import h5sidecar.catalog

    assert h5sidecar.catalog.STACValidationError is STACValidationError
    assert issubclass(STACValidationError, H5SidecarError)
    assert issubclass(STACValidationError, ValueError)
    with pytest.raises(H5SidecarError) as caught:
        validate_document({"type": "Nothing"})
    assert isinstance(caught.value, STACValidationError) and caught.value.kind == "invalid_stac"


# -- what is written --------------------------------------------------------------------------
def _granule_with_skips(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f["data/x"] = np.arange(5)
        f["dangling"] = h5py.SoftLink("/nowhere")  # soft_link_dangling
        f["elsewhere"] = h5py.ExternalLink("other.h5", "/thing")  # external_link
        f["group_soft"] = h5py.SoftLink("/data")  # other
    return path


def _kinds(doc: Any) -> Iterator[Any]:
    """Every value under a "kind" key, at any depth."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "kind":
                yield value
            else:
                yield from _kinds(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _kinds(value)


def test_written_reports_and_sidecars_carry_only_error_kinds(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _granule_with_skips(src / "good.h5")
    (src / "bad.h5").write_bytes(b"not an HDF5 file at all\n" * 40)
    for fmt in ("json", "parquet"):
        dest = tmp_path / f"out-{fmt}"
        index_many(str(src), str(dest), format=fmt, executor="serial")
        report = read_report(str(dest)).to_dict()
        sidecar = (
            dest / "good.h5.json" if fmt == "json" else dest / "good.h5.parq" / ".zmetadata"
        )
        written = [*_kinds(report), *_kinds(json.loads(sidecar.read_text()))]
        assert {"not_hdf5", "soft_link_dangling", "external_link", "other"} <= set(written)
        assert set(written) <= set(PINNED), set(written) - set(PINNED)


def _plain(refs: GranuleRefs) -> GranuleRefs:
    """``refs`` with its skip kinds as plain ``str`` (what a release before ErrorKind held)."""
    skipped = tuple(Skipped(s.path, str(s.kind), s.reason) for s in refs.skipped)  # type: ignore[arg-type]
    assert all(type(s.kind) is str for s in skipped)
    return dataclasses.replace(refs, skipped=skipped)


def test_kinds_are_written_byte_for_byte_as_plain_strings(tmp_path: Path) -> None:
    refs = index_granule(str(_granule_with_skips(tmp_path / "g.h5")))
    assert refs.skipped and all(isinstance(s.kind, ErrorKind) for s in refs.skipped)
    plain = _plain(refs)
    assert plain == refs and hash(plain.skipped) == hash(refs.skipped)
    assert plain.__dask_tokenize__() == refs.__dask_tokenize__()
    for name in ("a.json", "a.parq"):
        write_refs(refs, str(tmp_path / "enum" / name))
        write_refs(plain, str(tmp_path / "str" / name))
    for path in sorted((tmp_path / "enum").rglob("*")):
        if path.is_file():
            twin = tmp_path / "str" / path.relative_to(tmp_path / "enum")
            assert path.read_bytes() == twin.read_bytes(), path.name
    # read back: the kinds are members again
    from h5sidecar.references import read_refs

    back = read_refs(str(tmp_path / "str" / "a.json"))
    assert back == refs and all(isinstance(s.kind, ErrorKind) for s in back.skipped)
    # a run-report record
    record = error_record(NotHDF5Error("no signature"))
    assert isinstance(record.kind, ErrorKind)
    as_str = dataclasses.replace(record, kind=str(record.kind))
    assert json.dumps(record.to_dict()) == json.dumps(as_str.to_dict())
    kind = ErrorKind.NOT_HDF5
    assert (f"{kind}", str(kind), "{}".format(kind), format(kind, ">9")) == (  # noqa: UP032
        "not_hdf5", "not_hdf5", "not_hdf5", " not_hdf5"
    )
