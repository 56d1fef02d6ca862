"""Node names a Zarr key space can hold, and the escape that makes any other HDF5 name one.

An array or group name becomes a segment of Zarr keys (``name/.zarray``, ``name/0.0``), of the
kerchunk Parquet directory (``name/refs.0.parq``, beside ``.zmetadata`` and our ``.h5sidecar/``)
and of the gateway's URLs.  Some HDF5 names cannot be such a segment:

* a leading ``.``: ``.`` and ``..`` are path steps (a Parquet writer would leave its directory),
  and ``.zarray``, ``.zattrs``, ``.zgroup``, ``.zmetadata`` and ``.h5sidecar`` are the
  metadata keys themselves (plain readers then read zeros or fail the granule);
* ``zarr.json``: the Zarr v3 metadata key (the gateway's v3 views);
* ``\\``: zarr and fsspec take it for a path separator on some systems;
* ``%``, ``#``, ``?``: HTTP clients that do not percent-encode Zarr keys (fsspec's, under
  zarr-python) send ``#``/``?`` as a fragment or a query and ``%41`` as ``A``, so the
  gateway would get another key (and answer 404, which zarr reads as fill values).

Such a name is written with those characters ``%XX``-escaped (upper-case hex) and every ``%``
of the name written ``%25``, as the indexer escapes a name that is not UTF-8, so
``urllib.parse.unquote(escaped)`` gives the HDF5 name back, and the gateway finds the node
from what any client sends (see :func:`key_safe_name`).  Every other name is kept verbatim:
digits (``0``, ``0.0``), ``c``, ``__x``, spaces and non-ASCII text are valid Zarr node names.
"""

from __future__ import annotations

from h5sidecar.errors import InvalidReferenceError

__all__ = ["MAX_NAME_BYTES", "check_node_path", "key_problem", "key_safe_name"]

#: The longest name (UTF-8 bytes) a sidecar holds: a kerchunk Parquet sidecar makes a directory
#: of each array's name, and local file systems refuse longer names (POSIX ``NAME_MAX``).
MAX_NAME_BYTES = 255

_ZARR_V3_METADATA = "zarr.json"
#: Characters escaped wherever they are in a name that needs escaping ('%' first).
_ESCAPED = {"%": "%25", "\\": "%5C", "#": "%23", "?": "%3F"}


def key_problem(name: str) -> str | None:
    """Why ``name`` is written escaped (see the module docstring), or ``None`` when it is not."""
    problem = _node_problem(name)
    if problem is not None:
        return problem
    for char in "%#?":
        if char in name:
            return f"a name containing {char!r}"
    return None


def _node_problem(name: str) -> str | None:
    """Why ``name`` cannot be a node name of a Zarr key space, or ``None`` when it can."""
    if not name:
        return "an empty name"
    if name.startswith("."):
        return "a name starting with '.' (a path step or a Zarr v2 metadata key)"
    if name == _ZARR_V3_METADATA:
        return "the Zarr v3 metadata key"
    if "\\" in name:
        return "a name containing '\\'"
    return None


def key_safe_name(name: str, *, percent_escaped: bool = False) -> str:
    """``name`` itself, or its escaped form when :func:`key_problem` rejects it.

    The escape writes ``%`` as ``%25``, ``\\`` as ``%5C``, ``#`` as ``%23``, ``?`` as ``%3F``,
    a leading ``.`` and the ``.`` of ``zarr.json`` as ``%2E``; ``urllib.parse.unquote``
    reverses it.

    Parameters
    ----------
    name : str
        A name (an empty one is returned as it is).
    percent_escaped : bool
        ``name`` is already an escaped name (a name that was not UTF-8, its ``%`` written
        ``%25``): only the reserved forms are escaped, not ``%`` again.

    Examples
    --------
    >>> key_safe_name(".zarray"), key_safe_name(".."), key_safe_name("a\\\\b")
    ('%2Ezarray', '%2E.', 'a%5Cb')
    >>> key_safe_name("zarr.json"), key_safe_name("100% ok"), key_safe_name("0.0 c")
    ('zarr%2Ejson', '100%25 ok', '0.0 c')
    """
    if not name or key_problem(name) is None:
        return name
    text = name
    for char, code in _ESCAPED.items():
        if char != "%" or not percent_escaped:
            text = text.replace(char, code)
    if text.startswith("."):
        text = "%2E" + text[1:]
    if text == _ZARR_V3_METADATA:
        text = "zarr%2Ejson"
    return text


def check_node_path(path: str, what: str) -> None:
    """Raise :class:`InvalidReferenceError` unless every name of ``path`` is a Zarr node name.

    Sidecars are untrusted: a planted ``..`` would make a Parquet reader leave the sidecar's
    directory, and a planted ``.zarray`` shadows metadata keys.
    """
    for name in path.split("/"):
        problem = _node_problem(name)
        if problem is not None:
            raise InvalidReferenceError(
                f"{what} {path!r} has {problem}, which a Zarr key space cannot hold; h5sidecar "
                "writes such HDF5 names %-escaped: re-create the sidecar"
            )
