"""Datacubes (combined references) as readers and servers see them: names, identity, summary.

A cube is a reference set whose ``GranuleRefs.members`` lists every member granule's source
identity (written by :func:`h5sidecar.workflows.build_cube`).  The gateway serves a cube under a
name, beside the granules, and the STAC catalog links it from its collection; both name a cube
the same way (:func:`cube_names`), so the catalog's gateway URL of a cube is the URL the gateway
serves it at.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from h5sidecar.errors import InvalidRequestError
from h5sidecar.references import GranuleRefs, MemberTable

__all__ = ["cube_name", "cube_names", "cube_summary", "is_cube", "source_key"]

#: Suffixes of a cube written by ``h5sidecar cube`` (dropped to form its name).
CUBE_SUFFIXES = (".parq", ".json")
#: Characters a cube name may hold: a name is one URL path segment of the gateway.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def is_cube(refs: GranuleRefs) -> bool:
    """True for combined references (a datacube): they record their member granules."""
    return bool(refs.members)


def cube_name(url: str | os.PathLike[str]) -> str:
    """The default name of the cube at ``url``: its file name without ``.parq``/``.json``.

    >>> cube_name("s3://bucket/cubes/tas-daily.parq/")
    'tas-daily'
    """
    base = posixpath.basename(os.fspath(url).rstrip("/"))
    for suffix in CUBE_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return base


def _split_spec(spec: str) -> tuple[str | None, str]:
    """``"NAME=PATH"`` -> ``(NAME, PATH)``; a plain path (even with ``=`` in it) -> ``(None, PATH)``."""
    name, sep, path = spec.partition("=")
    if sep and _NAME.match(name) and path:
        return name, path
    return None, spec


def cube_names(cubes: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    """Name -> URL of each cube: a mapping as given, or ``"[NAME=]PATH"`` strings.

    Without ``NAME=``, a cube is named by :func:`cube_name`.

    Raises
    ------
    InvalidRequestError
        A name is not one URL path segment (letters, digits, ``._-``), or two cubes have the
        same name.
    """
    if cubes is None:
        return {}
    if isinstance(cubes, Mapping):
        pairs = [(str(n), os.fspath(u)) for n, u in cubes.items()]
    else:
        pairs = []
        for spec in cubes:
            name, path = _split_spec(os.fspath(spec))
            pairs.append((name or cube_name(path), path))
    out: dict[str, str] = {}
    for name, url in pairs:
        if not _NAME.match(name):
            raise InvalidRequestError(
                f"cube name {name!r} (of {url}) is not one URL path segment: name it with "
                "NAME=PATH, NAME of letters, digits, '.', '_' and '-'"
            )
        if name in out:
            raise InvalidRequestError(
                f"two cubes are named {name!r} ({out[name]} and {url}): name one with NAME=PATH"
            )
        out[name] = url
    return out


def cube_summary(refs: GranuleRefs) -> dict[str, Any]:
    """What a listing says of a cube: its member count and concat dimension (from its extras)."""
    info = refs.extra.get("cube") if isinstance(refs.extra, Mapping) else None
    info = info if isinstance(info, Mapping) else {}
    dim = info.get("concat_dim")
    return {"members": len(refs.members), "concat_dim": dim if isinstance(dim, str) else None}


def source_key(refs: GranuleRefs) -> str:
    """A key that changes whenever any object the references read changes identity.

    A granule's is its source's identity (URL, size, ETag, mtime; a file's inode and change
    time).  A cube's is a digest of every member's: chunk caches and ETags keyed by it never
    serve a member replaced since (a cube rebuilt after one member was re-indexed keeps the
    first member as its ``source``).
    """
    src = refs.source
    if not refs.members:
        # (the file fields only when recorded: the keys, and the gateway's ETags, of other
        # sources stay what they were)
        files = tuple(v for v in (src.inode, src.ctime_ns) if v is not None)
        return "|".join(map(str, (src.url, src.size, src.etag, src.mtime, *files)))
    if isinstance(refs.members, MemberTable):  # in columns: its digest (a lazy one's recorded)
        return f"cube:{refs.members.digest()}"
    digest = hashlib.blake2b(digest_size=16)
    for m in refs.members:
        ident = "|".join(map(str, m.key))
        digest.update(ident.encode("utf-8", "surrogatepass") + b"\0")
    return f"cube:{digest.hexdigest()}"
