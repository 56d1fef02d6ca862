"""The allow-list of source URLs: which objects the read path may fetch at all.

Sidecars are untrusted input: a reference may name any URL (``file:///etc/passwd``, another
bucket, an internal HTTP service).  Every URL is parsed by the package's one parser
(``parse_url(url, untrusted=True)``, :mod:`h5sidecar.sources.stores._urls`) and its normalised form
compared with the allowed prefixes *before* any I/O; local paths are compared after resolving
symlinks and ``..`` so a path cannot climb out of an allowed root.

A datacube's reader allows exactly its member granules' URLs: up to millions of them, of
which a read touches a few.  Normalising them all up front cost ~20 us each (0.2 s of a
cube's open at 10,000 members), so a list built with ``lazy=True`` normalises its prefixes
only when a URL is not found among them as given (see :meth:`AllowList.check`); and a cube's
reader does not list them at all: :class:`MemberAllowList` and :class:`MemberSourceIndex` look
a URL up in the cube's :class:`~h5sidecar.references.MemberTable` (its columns, read when first
needed), so opening a cube costs nothing per member and reading one makes one member's
identity.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from h5sidecar.errors import ForbiddenSourceError, InvalidReferenceError
from h5sidecar.references import MemberTable, SourceInfo
from h5sidecar.sources.stores._urls import S3_SCHEMES, SourceLocation, parse_url

__all__ = ["AllowList", "MemberAllowList", "MemberSourceIndex", "SourceIndex"]

log = logging.getLogger("h5sidecar.fetch")


def _normalized_prefix(prefix: str) -> str:
    """Normalised form of an allowed prefix, without a trailing slash."""
    stripped = prefix.rstrip("/")
    scheme, sep, rest = stripped.partition("://")
    if sep and scheme.lower() in S3_SCHEMES and "/" not in rest:
        return f"s3://{rest}"  # a whole bucket
    return parse_url(stripped or "/", untrusted=True).url.rstrip("/")


class AllowList:
    """Prefixes a fetcher may read from.

    A URL is allowed when its normalised form equals a prefix, or lies below it (the prefix
    followed by ``/``): ``s3://bucket/dir`` allows ``s3://bucket/dir/x.h5`` but not
    ``s3://bucket/dir2/x.h5``.  A bare bucket (``s3://bucket``) allows the whole bucket.

    Parameters
    ----------
    prefixes : iterable of str
        Allowed URL prefixes or exact source URLs.
    lazy : bool
        Normalise the prefixes on first need instead of now (a prefix that does not parse is
        then never allowed, instead of refused here): for the many exact URLs of a cube's
        members, of which a read asks for a few.
    """

    def __init__(self, prefixes: Iterable[str], *, lazy: bool = False) -> None:
        self.prefixes: tuple[str, ...] = tuple(dict.fromkeys(prefixes))
        self._given = frozenset(self.prefixes)
        self._canon: tuple[str, ...] | None = None
        self._exact: frozenset[str] = frozenset()
        self._lazy = lazy
        if not lazy:
            self._normalize()

    def _normalize(self) -> tuple[str, ...]:
        if self._canon is None:
            canon = []
            for p in self.prefixes:
                try:
                    canon.append(_normalized_prefix(p))
                except (ForbiddenSourceError, InvalidReferenceError):
                    if not self._lazy:
                        raise  # a prefix the caller gave: refused at once, as it is wrong
                    # a member's URL: allows nothing (a read of it is refused by check)
            self._exact = frozenset(canon)  # O(1) for exact source URLs (a cube's members)
            self._canon = tuple(canon)
        return self._canon

    def _allowed(self, canon: str) -> bool:
        # fast path: the normalised URL is one of the prefixes as given, and normalising that
        # prefix gives it back, so it is also among the normalised prefixes
        if canon in self._given and _normalized_prefix(canon) == canon:
            return True
        prefixes = self._normalize()
        return canon in self._exact or any(canon.startswith(p + "/") for p in prefixes)

    def allows(self, url: str) -> bool:
        """True when ``url`` parses and lies under an allowed prefix."""
        try:
            return self._allowed(parse_url(url, untrusted=True).url)
        except (ForbiddenSourceError, InvalidReferenceError):
            return False

    def check(self, url: str) -> SourceLocation:
        """The parsed location of ``url``, or :class:`ForbiddenSourceError` (no I/O is done)."""
        loc = parse_url(url, untrusted=True)
        if self._allowed(loc.url):
            return loc
        raise ForbiddenSourceError(
            f"refusing to read {url!r}: it is outside the allowed source prefixes "
            f"[{self._described()}]. "
            "If this source is trusted, add its prefix to ReadSettings.allowed_prefixes "
            "(H5SIDECAR_ALLOWED_PREFIXES) or pass it in `sources`."
        )

    def _described(self) -> str:
        """The allowed prefixes, as an error message names them."""
        return ", ".join(self.prefixes) or "(none)"

    def __repr__(self) -> str:
        return f"AllowList({list(self.prefixes)!r})"


class MemberAllowList(AllowList):
    """The allow-list of a datacube: its members' URLs and companion files beside them.

    Allows what ``AllowList([*member URLs, *companions], lazy=True)`` allows, without listing
    the members: a URL is looked up in the member table (whose URL column is indexed on the
    first lookup, loading a lazy table then).  A companion is one of ``candidates`` (the chunk
    URLs of the cube's arrays that are not the members' own) that is no member but lies in a
    member's folder (HDF5 external storage beside a granule); which candidates are is decided
    on the first URL that is not a member.  Only a URL found neither way normalises every
    member's URL (once), for a member recorded in another spelling.

    Parameters
    ----------
    members : MemberTable
        The cube's members.
    candidates : iterable of str
        Chunk URLs of the cube besides its members' (few: arrays held once, not per member).
    """

    def __init__(self, members: MemberTable, candidates: Iterable[str] = ()) -> None:
        super().__init__((), lazy=True)
        self.members = members
        self.candidates = tuple(dict.fromkeys(candidates))
        self._companions: AllowList | None = None
        self._members_canon: frozenset[str] | None = None

    def companions(self) -> AllowList:
        """The companion files allowed (decided on first use)."""
        if self._companions is None:
            dirs: set[str] | None = None
            found = []
            for url in self.candidates:
                if self.members.row_of(url) is not None:
                    continue
                if dirs is None:  # only a cube with a non-member chunk URL pays for this
                    dirs = {u.rpartition("/")[0] for u in self.members.urls.to_pylist()}
                if url.rpartition("/")[0] in dirs:
                    found.append(url)
            self._companions = AllowList(found, lazy=True)
        return self._companions

    def _allowed(self, canon: str) -> bool:
        # as AllowList's fast path: a member's URL as recorded, which normalises to itself
        if self.members.row_of(canon) is not None and _normalized_prefix(canon) == canon:
            return True
        if self.companions()._allowed(canon):
            return True
        if self._members_canon is None:
            self._members_canon = frozenset(_each_normalized(self.members.urls.to_pylist()))
        # equal to a member's normalised URL, or below one (as a prefix allows), by its parents
        parents = (canon[:i] for i, c in enumerate(canon) if c == "/")
        return canon in self._members_canon or any(p in self._members_canon for p in parents)

    def _described(self) -> str:
        extra = self.companions().prefixes
        return f"the {len(self.members)} members of the cube" + "".join(
            f", {u}" for u in extra)

    def __repr__(self) -> str:
        return f"MemberAllowList({self.members!r}, {list(self.candidates)!r})"


class SourceIndex:
    """Normalised URL -> the identity recorded for it, for the freshness guard.

    Looked up by the normalised URL of what is read.  A source whose URL as recorded is
    already that normalised form (every URL an indexer writes) is found without normalising
    the others; only a miss normalises them all, once.  A source whose URL does not parse is
    left out (reading it is refused by the allow-list anyway).
    """

    def __init__(self, sources: Iterable[SourceInfo]) -> None:
        self._sources = tuple(sources)
        self._given = {s.url: s for s in self._sources}
        self._all: dict[str, SourceInfo] | None = None

    def get(self, canon: str) -> SourceInfo | None:
        """The identity of the source at normalised URL ``canon``, or None."""
        info = self._given.get(canon)
        if info is not None and _canonical(canon) == canon:
            return info
        if self._all is None:
            known = {}
            for s in self._sources:
                try:
                    known[parse_url(s.url, untrusted=True).url] = s
                except (ForbiddenSourceError, InvalidReferenceError) as exc:
                    log.debug("source %r cannot be read: %s", s.url, exc)
            self._all = known
        return self._all.get(canon)

    def __contains__(self, canon: object) -> bool:
        return isinstance(canon, str) and self.get(canon) is not None


class MemberSourceIndex(SourceIndex):
    """:class:`SourceIndex` of a datacube's members, looked up in their table: the identity
    of a member is made when a chunk of it is first read (shared with every other reader of
    the table: :meth:`~h5sidecar.references.MemberTable.lookup`), no other member's.

    A member of unknown identity (size -1: a sidecar written by plain kerchunk) is not
    described (not freshness-checked), as :class:`SourceIndex` leaves it out.
    """

    def __init__(self, members: MemberTable) -> None:
        super().__init__(())
        self.members = members
        self._recorded: dict[str, str] | None = None

    def get(self, canon: str) -> SourceInfo | None:
        """The identity of the member at normalised URL ``canon``, or None."""
        by_url = self.members.lookup()
        info = by_url.get(canon)
        if info is None or _canonical(canon) != canon:
            if self._recorded is None:  # a member recorded in another spelling: normalise all
                self._recorded = {}
                for url in self.members.urls.to_pylist():
                    found = _canonical(url)
                    if found is not None:
                        self._recorded[found] = url
            recorded = self._recorded.get(canon)
            info = None if recorded is None else by_url.get(recorded)
        return info if info is not None and info.size >= 0 else None


def _each_normalized(prefixes: Iterable[str]) -> Iterable[str]:
    """The normalised form of each of ``prefixes`` that parses (a member's that does not
    allows nothing: reading it is refused)."""
    for p in prefixes:
        try:
            yield _normalized_prefix(p)
        except (ForbiddenSourceError, InvalidReferenceError):
            continue


def _canonical(url: str) -> str | None:
    try:
        return parse_url(url, untrusted=True).url
    except (ForbiddenSourceError, InvalidReferenceError):
        return None
