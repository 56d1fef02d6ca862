"""Walk the link graph of an HDF5 file: groups, datasets, and every kind of link.

HDF5 is a graph, not a tree: an object can have several hard links (names), soft links point at
paths, external links into other files, user-defined links at anything, and a hard link can
point back at an ancestor group (a cycle).  The walk visits every link once, in the file's link
order, and decides:

* a group reached again (second hard link, or a cycle) is not descended again: recorded as
  skipped with the path where its contents are;
* a dataset reached again through a hard or soft link is indexed again under the new name
  (same references) with a note naming the first one;
* soft links to groups are not followed (their contents are indexed under the target);
* dangling soft links, external links and user-defined links are recorded as skipped;
* a name a Zarr key space or a URL cannot hold (``.zarray``, ``a\\b``, ``a#b``, see
  :mod:`h5sidecar.references`' ``key_safe_name``) is kept %-escaped; the names ``.`` and
  ``..``, and a name longer than a file name can be, are skipped with what they hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import h5py

from h5sidecar._compat.h5py import open_member
from h5sidecar.errors import ErrorKind, NotHDF5Error
from h5sidecar.indexer._failures import H5PY_ERRORS, describe_h5_error, reraise_io_failure
from h5sidecar.references import MAX_NAME_BYTES, SkipKind, Skipped, key_safe_name

__all__ = [
    "DatasetEntry",
    "Hierarchy",
    "ObjectKey",
    "escape_name",
    "link_name",
    "model_path",
    "object_key",
    "walk",
]

#: Identity of an HDF5 object inside one file: (file number, object header address).
ObjectKey = tuple[int, int]


def escape_name(name: str | bytes) -> str:
    """The model name of an HDF5 link or attribute name (UTF-8 names are kept verbatim).

    HDF5 names are bytes; Zarr keys and JSON need text.  A name that is not valid UTF-8 (h5py
    hands it over as ``bytes``) is decoded as UTF-8 where it can be, with every other byte
    written ``%XX`` (upper-case hex) and every ``%`` written ``%25``, so
    ``urllib.parse.unquote_to_bytes(escaped)`` gives the exact bytes back.  Only such names are
    escaped; the granule's extras list them (``names_escaped``).
    """
    if isinstance(name, str):
        return name
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = name.decode("utf-8", "surrogateescape")  # undecodable bytes -> U+DC80..U+DCFF
    return "".join(
        f"%{ord(c) - 0xDC00:02X}" if "\udc80" <= c <= "\udcff" else "%25" if c == "%" else c
        for c in text
    )


def link_name(name: str | bytes) -> str:
    """The model name of an HDF5 link name: :func:`escape_name`, then the Zarr key escape.

    ``.zarray``, ``..``, ``zarr.json`` or ``a\\b`` cannot be a node of a Zarr key space: they
    are kept %-escaped the same way (``%2Ezarray``), so ``urllib.parse.unquote_to_bytes``
    still gives the HDF5 name's bytes back.
    """
    text = escape_name(name)
    # a name that was not UTF-8 has its '%' written '%25' already
    return key_safe_name(text, percent_escaped=isinstance(name, bytes) and not _is_utf8(name))


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def model_path(name: str | bytes) -> str:
    """The model path of an absolute HDF5 path (``/a/b``): each name as :func:`link_name`."""
    parts: list[str] | list[bytes] = name.split(b"/") if isinstance(name, bytes) else name.split("/")
    return "/".join(link_name(part) if part else "" for part in parts)


def object_key(obj: h5py.HLObject) -> ObjectKey:
    """The identity of ``obj`` (equal for every name of the same object)."""
    info = h5py.h5o.get_info(obj.id)
    return (int(info.fileno), int(info.addr))


@dataclass
class DatasetEntry:
    """One name of a dataset.

    Attributes
    ----------
    path : str
        Model path (no leading slash).
    dset : h5py.Dataset
    key : ObjectKey
    alias_of : str or None
        Set when this name is a second hard link or a soft link to a dataset indexed first
        under ``alias_of``.
    link : str
        ``"hard"`` or ``"soft"``.
    target : str
        For a soft link, the path it points to (as written in the file).
    """

    path: str
    dset: h5py.Dataset
    key: ObjectKey
    alias_of: str | None = None
    link: str = "hard"
    target: str = ""


@dataclass
class Hierarchy:
    """Result of :func:`walk`."""

    groups: list[tuple[str, h5py.Group]] = field(default_factory=list)
    datasets: list[DatasetEntry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    #: first (canonical) path of every object seen
    canonical: dict[ObjectKey, str] = field(default_factory=dict)
    #: paths whose last name was escaped (not valid UTF-8, see :func:`escape_name`)
    escaped: list[str] = field(default_factory=list)
    #: group path -> the paths of its dataset links (hard and soft), in the file's link order
    members: dict[str, list[str]] = field(default_factory=dict)
    #: ``id(obj)`` -> ``(obj, H5Oget_info)`` of every object the walk opened: the attribute
    #: reader needs the same info (~7 us to ask HDF5 again per object)
    infos: dict[int, tuple[h5py.HLObject, Any]] = field(default_factory=dict)


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _names(group: h5py.Group, path: str) -> list[str | bytes]:
    try:
        return list(group)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        if not path:
            raise NotHDF5Error(
                f"the root group's links cannot be read ({describe_h5_error(exc)}): the file "
                "is corrupt or truncated; check it with h5dump -H or fetch it again"
            ) from exc
        raise


def _escape_clash(name: str | bytes, model: str) -> str:
    """The reason a name is skipped whose escaped form another link of its group has."""
    why = (
        "is not UTF-8" if isinstance(name, bytes) and not _is_utf8(name)
        else "cannot be a Zarr node name"
    )
    return (
        f"the HDF5 name {name!r} {why} and its escaped form {model!r} is the name of another "
        "link of the group"
    )


def _raw(name: str | bytes) -> bytes:
    return name if isinstance(name, bytes) else name.encode("utf-8")


def _link_type(group: h5py.Group, name: str | bytes) -> int:
    return int(group.id.links.get_info(_raw(name)).type)


class _Walker:
    def __init__(self, readonly: bool) -> None:
        self.readonly = readonly  # the file's mode, asked once (see open_member)
        self.out = Hierarchy()
        self.soft_datasets: list[tuple[str, str, h5py.Dataset]] = []

    def key(self, obj: h5py.HLObject) -> ObjectKey:
        """:func:`object_key` of ``obj``, its info kept in :attr:`Hierarchy.infos`."""
        info = h5py.h5o.get_info(obj.id)
        self.out.infos[id(obj)] = (obj, info)
        return (int(info.fileno), int(info.addr))

    def skip(self, path: str, kind: SkipKind, reason: str) -> None:
        self.out.skipped.append(Skipped(path, kind, reason))

    def children(self, group: h5py.Group, gpath: str) -> Iterator[tuple[str, h5py.Group]]:
        """Handle every link of ``group``; yield the subgroups to descend into."""
        try:
            names = _names(group, gpath)
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)  # includes NotHDF5Error for the root group
            self.skip(
                gpath, ErrorKind.UNREADABLE,
                f"the group's links cannot be read: {describe_h5_error(exc)}"
            )
            return
        # an escaped name equal to another HDF5 name of the group is skipped: the gateway finds
        # a node from its HDF5 name too (what clients that do not percent-encode send)
        taken = {n for n in names if isinstance(n, str)}
        models: set[str] = set()
        for name in names:
            model = link_name(name)
            path = _join(gpath, model)
            if name in (".", ".."):
                # escaped it would still be decoded to a path step by URL parsers (yarl turns
                # 'g/%2E./0' into '0'): no reader over HTTP could name it
                self.skip(path, ErrorKind.OTHER, f"the name {name!r} is a path step: URLs and "
                          "file systems take it for this group or its parent, so it is not "
                          "indexed, nor anything under it: rename it in the file")  # fmt: skip
                continue
            if model != name:
                if model in taken or model in models:
                    self.skip(path, ErrorKind.OTHER, _escape_clash(name, model))
                    continue
                self.out.escaped.append(path)
            models.add(model)
            if len(model.encode("utf-8")) > MAX_NAME_BYTES:
                self.skip(
                    path,
                    ErrorKind.OTHER,
                    f"the name is {len(model.encode('utf-8'))} bytes long; sidecars hold names "
                    f"of at most {MAX_NAME_BYTES} bytes (a Parquet sidecar makes a directory of "
                    "each, and file systems refuse longer names), so it is not indexed, nor "
                    "anything under it: give it a shorter name",
                )
                continue
            try:
                ltype = _link_type(group, name)
            except H5PY_ERRORS as exc:
                reraise_io_failure(exc)
                self.skip(
                    path, ErrorKind.UNREADABLE, f"the link cannot be read: {describe_h5_error(exc)}"
                )
                continue
            if ltype == h5py.h5l.TYPE_HARD:
                yield from self.hard(group, name, path)
            elif ltype == h5py.h5l.TYPE_SOFT:
                self.soft(group, name, path)
            elif ltype == h5py.h5l.TYPE_EXTERNAL:
                self.external(group, name, path)
            else:
                self.skip(
                    path,
                    ErrorKind.OTHER,
                    f"user-defined link (type {ltype}) cannot be followed; "
                    "only hard, soft and external links are understood",
                )

    def hard(self, group: h5py.Group, name: str | bytes, path: str) -> Iterator[tuple[str, h5py.Group]]:
        try:
            obj = open_member(group, _raw(name), self.readonly)
            key = self.key(obj)
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            self.skip(
                path, ErrorKind.UNREADABLE, f"HDF5 cannot open the object: {describe_h5_error(exc)}"
            )
            return
        first = self.out.canonical.setdefault(key, path)
        if isinstance(obj, h5py.Group):
            if first != path:
                self.skip(
                    path,
                    ErrorKind.OTHER,
                    f"second hard link to the group {first!r} (indexed "
                    "there); not descended again, which also stops link cycles",
                )
                return
            self.out.groups.append((path, obj))
            yield path, obj
        elif isinstance(obj, h5py.Dataset):
            alias = None if first == path else first
            self.out.datasets.append(DatasetEntry(path, obj, key, alias, "hard"))
            self.out.members.setdefault(path.rpartition("/")[0], []).append(path)
        # committed datatypes are types, not variables: nothing to index

    def soft(self, group: h5py.Group, name: str | bytes, path: str) -> None:
        try:
            target = escape_name(group.id.links.get_val(_raw(name)))
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            self.skip(
                path, ErrorKind.UNREADABLE,
                f"the soft link cannot be read: {describe_h5_error(exc)}",
            )
            return
        try:
            obj = group[name]
        except KeyError:
            self.skip(
                path, ErrorKind.SOFT_LINK_DANGLING, f"soft link to {target!r}, which does not exist"
            )
            return
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            self.skip(
                path,
                ErrorKind.UNREADABLE,
                f"soft link to {target!r} cannot be resolved: {describe_h5_error(exc)}",
            )
            return
        if isinstance(obj, h5py.Dataset):
            self.soft_datasets.append((path, target, obj))
            self.out.members.setdefault(path.rpartition("/")[0], []).append(path)
        elif isinstance(obj, h5py.Group):
            self.skip(
                path,
                ErrorKind.OTHER,
                f"soft link to the group {target!r}; its contents are "
                "indexed under the target, not repeated here",
            )

    def external(self, group: h5py.Group, name: str | bytes, path: str) -> None:
        try:
            filename, target = group.id.links.get_val(_raw(name))
            where = f"{escape_name(filename)}:{escape_name(target)}"
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            where = f"(unreadable link value: {describe_h5_error(exc)})"
        self.skip(
            path,
            ErrorKind.EXTERNAL_LINK,
            f"external link to {where}; links into other files "
            "are not followed: index that file separately",
        )

    def finish(self) -> Hierarchy:
        for path, target, obj in self.soft_datasets:
            key = self.key(obj)
            first = self.out.canonical.setdefault(key, path)
            alias = None if first == path else first
            self.out.datasets.append(DatasetEntry(path, obj, key, alias, "soft", target))
        return self.out


def walk(root: h5py.File) -> Hierarchy:
    """Visit every link reachable from the root group (see the module docstring).

    Raises
    ------
    NotHDF5Error
        When the root group's links cannot be read.
    """
    walker = _Walker(readonly=root.mode == "r")
    walker.out.canonical[walker.key(root)] = ""
    walker.out.groups.append(("", root))
    # depth-first with an explicit stack: deep hierarchies must not hit the recursion limit
    stack = [walker.children(root, "")]
    while stack:
        try:
            gpath, group = next(stack[-1])
        except StopIteration:
            stack.pop()
            continue
        stack.append(walker.children(group, gpath))
    return walker.finish()
