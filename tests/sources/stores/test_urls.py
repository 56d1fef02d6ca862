"""One URL parser: the batch listing, the store resolver and the allow-list agree on every URL."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from h5sidecar.errors import ForbiddenSourceError, SourceReadError
from h5sidecar.sources._allow import AllowList
from h5sidecar.sources.stores._store_cache import resolve_store
from h5sidecar.sources.stores._urls import normalize_url, parse_url
from h5sidecar.workflows.listing._listing import list_granules

#: S3 options that need no environment and reach nothing (resolve_store does no I/O).
_NO_IO = {"anon": True, "endpoint_url": "http://127.0.0.1:1"}


def _views(url: str) -> dict[str, Any]:
    """What each consumer makes of ``url``: the normalised URL, or the error class it raises."""
    out: dict[str, Any] = {}
    for name, view in (
        ("listing", normalize_url),
        ("resolver", lambda u: resolve_store(u, _NO_IO, env={})[1].url),
        ("allow-list", lambda u: AllowList([normalize_url(u)]).check(u).url),
    ):
        try:
            out[name] = view(url)
        except (ForbiddenSourceError, SourceReadError) as exc:
            out[name] = type(exc)
    return out


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """A folder without symlinks on its path, so resolved and lexical paths coincide."""
    root = Path(os.path.realpath(tmp_path))
    (root / "data").mkdir()
    return root


def test_s3a_is_spelled_s3_everywhere() -> None:
    url = "s3a://my-bucket/dir/x.h5"
    want = "s3://my-bucket/dir/x.h5"
    assert _views(url) == {"listing": want, "resolver": want, "allow-list": want}
    assert _views("S3A://my-bucket/dir/x.h5")["resolver"] == want
    assert AllowList(["s3a://my-bucket/dir"]).allows(want)
    assert AllowList(["s3://my-bucket/dir"]).allows(url)
    assert not AllowList(["s3a://my-bucket/dir"]).allows("s3://my-bucket/dir2/x.h5")
    assert normalize_url("s3a://my-bucket/dir/") == "s3://my-bucket/dir/"  # a listing prefix


def test_file_urls_are_plain_absolute_paths(base: Path) -> None:
    target = str(base / "data" / "g x.h5")
    for url in ("file://" + target.replace(" ", "%20"), "file://localhost" + target, target):
        assert _views(url) == {"listing": target, "resolver": target, "allow-list": target}


def test_relative_paths_resolve_against_the_working_directory(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(base)
    target = str(base / "data" / "g.h5")
    assert normalize_url("data/g.h5") == parse_url("data/g.h5").url == target
    # a sidecar never records a relative path: the allow-list refuses one, and accepts the
    # normalised form the listing and the resolver agree on
    allow = AllowList([str(base)])
    with pytest.raises(ForbiddenSourceError, match="absolute"):
        allow.check("data/g.h5")
    assert allow.check(normalize_url("data/g.h5")).url == target


def test_dot_dot_segments(base: Path) -> None:
    local = str(base / "data" / ".." / "g.h5")
    want = str(base / "g.h5")
    assert _views(local) == {"listing": want, "resolver": want, "allow-list": want}
    assert not AllowList([str(base / "data")]).allows(local)  # it climbs out of data/
    # no object store resolves '..' in a key: every consumer refuses it
    for s3 in ("s3://b/dir/../x.h5", "s3a://b/./x.h5"):
        with pytest.raises(SourceReadError, match="segments"):
            normalize_url(s3)
        with pytest.raises(SourceReadError, match="does not name an object"):
            parse_url(s3)
        with pytest.raises(ForbiddenSourceError, match="refusing"):
            AllowList(["s3://b"]).check(s3)


def test_trailing_slashes(base: Path) -> None:
    folder = str(base / "data")
    assert _views(folder + "/") == {"listing": folder, "resolver": folder, "allow-list": folder}
    # an S3 URL ending in '/' is a prefix to the listing, and names no object to the others
    assert _views("s3://b/dir/") == {
        "listing": "s3://b/dir/",
        "resolver": SourceReadError,
        "allow-list": ForbiddenSourceError,
    }
    for prefix in ("s3://b/dir/", "s3://b/dir", "s3a://b/dir/"):
        allow = AllowList([prefix])
        assert allow.allows("s3://b/dir/x.h5") and allow.allows("s3a://b/dir/sub/x.h5")
        assert not allow.allows("s3://b/dir2/x.h5")


def test_listed_local_granules_are_what_resolver_and_allow_list_see(base: Path) -> None:
    (base / "data" / "sub").mkdir()
    for name in ("a.h5", "sub/b.h5"):
        (base / "data" / name).write_bytes(b"x")
    for source in ("file://" + str(base / "data") + "/", str(base / "data" / "sub" / ".." / "")):
        granules = list_granules(source)
        assert [g.name for g in granules] == ["a.h5", "sub/b.h5"]
        allow = AllowList([normalize_url(source)])
        for g in granules:
            assert g.url == parse_url(g.url).url == allow.check(g.url).url
            assert g.identity.url == g.url


def test_listed_s3a_granules_are_s3_urls(s3: Any, s3_bucket: str, s3_storage_options) -> None:
    s3.pipe(f"{s3_bucket}/in/a.h5", b"x")
    granules = list_granules(f"s3a://{s3_bucket}/in/", storage_options=s3_storage_options)
    assert [(g.name, g.url) for g in granules] == [("a.h5", f"s3://{s3_bucket}/in/a.h5")]
    url = granules[0].url
    assert resolve_store(f"s3a://{s3_bucket}/in/a.h5", s3_storage_options)[1].url == url
    assert AllowList([f"s3a://{s3_bucket}/in"]).check(url).url == url
