"""s3fs's private names: ``S3FileSystem._call_s3`` and ``S3FileSystem._iterdir``.

- :func:`s3_get_object` answers one whole-object GET with the ETag and size of the very
  response that carried the bytes (``_call_s3("get_object", ...)``): opening a sidecar then
  needs no HEAD beside its GETs, and the identity cannot disagree with the bytes.  Public
  alternative: ``_info`` (a HEAD) beside ``_cat_file`` (a GET), which callers use where
  :func:`get_object_available` is False.
- :func:`list_objects_pages` pages through ``ListObjectsV2`` in s3fs's asynchronous generator
  ``_iterdir(bucket, delimiter=, prefix=)``: a listing is consumed a page at a time.  Public
  alternative: ``find(..., detail=True)``, which collects every page into one dict first
  (callers fall back to it where this returns None).

:data:`CHECKED` runs from the floor ``pyproject.toml`` declares to the newest release both
were checked on (2026.9, with ``tests/test_compat.py``).  The version is read from the
installed distribution, not by importing s3fs (aiobotocore): these are asked about
filesystems that exist already, and asking must not load s3fs where there is none.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator
from typing import Any

from packaging.specifiers import SpecifierSet

from h5sidecar._compat._installed import installed_in

__all__ = ["CHECKED", "get_object_available", "in_checked", "list_objects_pages", "s3_get_object"]

#: The s3fs versions these uses are known to work on (checked: 2026.9).
CHECKED = SpecifierSet(">=2024.10,<2026.10")


@functools.cache
def in_checked() -> bool:
    """Whether the installed s3fs is one of :data:`CHECKED`."""
    return installed_in("s3fs", CHECKED)


def _is_s3fs(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "s3" in protocols and in_checked()


def get_object_available(fs: Any) -> bool:
    """True when ``fs`` is an s3fs filesystem :func:`s3_get_object` can use."""
    return _is_s3fs(fs) and all(
        callable(getattr(fs, name, None)) for name in ("_call_s3", "split_path")
    )


async def s3_get_object(fs: Any, path: str) -> dict[str, Any]:
    """botocore's answer to ``GetObject`` of ``path`` (``Body``, ``ETag``, ``ContentLength``,
    ...), through s3fs's client, retries and credentials; close ``resp["Body"]`` after use."""
    bucket, key, version_id = fs.split_path(path)
    return await fs._call_s3(  # type: ignore[no-any-return]
        "get_object", Bucket=bucket, Key=key, **({"VersionId": version_id} if version_id else {})
    )


def list_objects_pages(fs: Any, bucket: str, *, delimiter: str,
                       prefix: str) -> AsyncGenerator[dict[str, Any], None] | None:
    """s3fs's asynchronous iterator over the info dictionaries of a ``ListObjectsV2`` listing
    (objects and, with a delimiter, common prefixes as directories), or None where ``fs``
    has none (another filesystem, an s3fs outside :data:`CHECKED`)."""
    iterdir = getattr(fs, "_iterdir", None)
    if not (_is_s3fs(fs) and inspect.isasyncgenfunction(iterdir)
            and getattr(fs, "async_impl", False)):
        return None
    return iterdir(bucket, delimiter=delimiter, prefix=prefix)  # type: ignore[misc,no-any-return]
