"""The Icechunk repository side of :func:`~h5sidecar.workflows.write_icechunk`.

Where the repository lives (a local directory, ``s3://bucket/prefix``, or Icechunk's own
``Storage`` / ``Repository``), which virtual chunk containers it declares (one per source
prefix, saved in its config) and which credentials authorize reading them.  S3 options are the
ones the rest of h5sidecar takes (``endpoint_url``, ``key``, ``secret``, ``token``, ``anon``,
``client_kwargs={"region_name": ...}``); ``http://`` endpoints are allowed.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from h5sidecar.errors import require_extra
from h5sidecar.sources import normalize_url

if TYPE_CHECKING:
    import icechunk

__all__ = ["container_prefixes", "open_icechunk", "open_repository"]


def open_icechunk(
    repo: str | os.PathLike[str] | icechunk.Storage,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> icechunk.Repository:
    """Open a repository written by :func:`~h5sidecar.workflows.write_icechunk`, authorized to read its containers.

    Authorizes exactly the virtual chunk containers the repository declares (credentials from
    ``storage_options`` for S3 ones); references outside them stay unreadable.

    Examples
    --------
    >>> repo = open_icechunk("cube.icechunk")                                 # doctest: +SKIP
    >>> ds = xr.open_zarr(repo.readonly_session("main").store, consolidated=False)  # doctest: +SKIP
    """
    require_extra("icechunk", "icechunk", feature="open_icechunk")
    import icechunk as ic

    storage = _storage(repo, storage_options)
    config = ic.Repository.fetch_config(storage)
    containers = (config.virtual_chunk_containers or {}) if config else {}
    creds = _credentials(list(containers), storage_options)
    return ic.Repository.open(storage, authorize_virtual_chunk_access=creds)


def container_prefixes(urls: Iterable[str]) -> list[str]:
    """The virtual chunk container prefixes covering ``urls`` (Icechunk locations).

    One per S3 bucket and one for local files: the tightest common directory of the URLs
    there, ending in ``/`` (``s3://bucket/data/2024/``, ``file:///data/granules/``).
    """
    by_root: dict[str, list[str]] = {}
    for url in urls:
        scheme, _, rest = url.partition("://")
        root, _, key = rest.partition("/") if scheme == "s3" else ("", "", rest.lstrip("/"))
        by_root.setdefault(f"{scheme}://{root}/", []).append(posixpath.dirname(key))
    out = []
    for root, dirs in sorted(by_root.items()):
        common = posixpath.commonpath(["/" + d for d in dirs]).strip("/")
        out.append(root + (common + "/" if common else ""))
    return out

# -- repository, containers and credentials ---------------------------------------------------------
def _s3_options(storage_options: Mapping[str, Any] | None) -> Any:
    from h5sidecar.sources import _resolve_s3_options

    return _resolve_s3_options(storage_options, os.environ)


def _storage(repo: Any, storage_options: Mapping[str, Any] | None) -> icechunk.Storage:
    import icechunk as ic

    if isinstance(repo, ic.Storage):
        return repo
    text = os.fspath(repo)
    if not normalize_url(text).startswith("s3://"):
        return ic.local_filesystem_storage(normalize_url(text))
    bucket, _, prefix = normalize_url(text)[len("s3://"):].partition("/")
    o = _s3_options(storage_options)
    return ic.s3_storage(
        bucket=bucket, prefix=prefix.strip("/") or None, region=o.region,
        endpoint_url=o.endpoint, allow_http=bool(o.endpoint and o.endpoint.startswith("http:")),
        access_key_id=o.key, secret_access_key=o.secret, session_token=o.token,
        anonymous=o.anon or None, force_path_style=bool(o.endpoint),
        requester_pays=o.requester_pays,
    )  # fmt: skip


def _container(prefix: str, storage_options: Mapping[str, Any] | None) -> Any:
    import icechunk as ic

    if prefix.startswith("file://"):
        return ic.VirtualChunkContainer(prefix, ic.local_filesystem_store(prefix[len("file://"):]))
    o = _s3_options(storage_options)
    store = ic.s3_store(
        region=o.region, endpoint_url=o.endpoint, anonymous=o.anon,
        allow_http=bool(o.endpoint and o.endpoint.startswith("http:")),
        s3_compatible=bool(o.endpoint), force_path_style=bool(o.endpoint),
        requester_pays=o.requester_pays,
    )  # fmt: skip
    return ic.VirtualChunkContainer(prefix, store)


def _credentials(prefixes: list[str], storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    import icechunk as ic

    creds: dict[str, Any] = {}
    for p in prefixes:
        if not p.startswith("s3://"):
            creds[p] = None
            continue
        o = _s3_options(storage_options)
        creds[p] = (
            ic.s3_credentials(anonymous=True) if o.anon
            else ic.s3_credentials(access_key_id=o.key, secret_access_key=o.secret,
                                   session_token=o.token) if o.key
            else ic.s3_credentials(from_env=True)
        )  # fmt: skip
    return ic.containers_credentials(creds)


def open_repository(
    repo: Any, prefixes: list[str], storage_options: Mapping[str, Any] | None
) -> icechunk.Repository:
    """Open or create the repository with a container (saved in its config) per prefix."""
    import icechunk as ic

    existing = repo if isinstance(repo, ic.Repository) else None
    if existing is not None:
        config = existing.config
    else:
        storage = _storage(repo, storage_options)
        if not ic.Repository.exists(storage):
            config = ic.RepositoryConfig.default()
            for p in prefixes:
                config.set_virtual_chunk_container(_container(p, storage_options))
            return ic.Repository.create(
                storage, config=config,
                authorize_virtual_chunk_access=_credentials(prefixes, storage_options),
            )  # fmt: skip
        config = ic.Repository.fetch_config(storage) or ic.RepositoryConfig.default()
    have = set((config.virtual_chunk_containers or {}).keys())
    missing = [p for p in prefixes if not any(p.startswith(h) for h in have)]
    for p in missing:
        config.set_virtual_chunk_container(_container(p, storage_options))
    creds = _credentials(sorted(have | set(missing)), storage_options)
    if existing is not None:
        out = existing.reopen(config=config, authorize_virtual_chunk_access=creds)
    else:
        out = ic.Repository.open(storage, config=config, authorize_virtual_chunk_access=creds)
    if missing:
        out.save_config()
    return out
