"""Which sizes each dimension name has been given, and in which groups: xarray's rule.

xarray (and its DataTree) require that one name never has two sizes in a group and its
ancestors/descendants.  :class:`~._dim_names.DimensionNamer` asks :meth:`NameClaims.fits`
before it gives a name and records it with :meth:`NameClaims.claim`; a name that does not fit
falls through to a fallback phony name.
"""

from __future__ import annotations

__all__ = ["NameClaims"]


class NameClaims:
    """The sizes dimension names were claimed with in one file, and by which groups."""

    def __init__(self) -> None:
        # name -> size -> (groups that claimed it with that size, those and their ancestors)
        self._sizes: dict[str, dict[int, tuple[set[str], set[str]]]] = {}
        self._lineage: dict[str, tuple[str, ...]] = {}  # group -> it and its ancestors

    def lineage(self, group: str) -> tuple[str, ...]:
        """``group`` and its ancestors, the root (``""``) first."""
        found = self._lineage.get(group)
        if found is None:
            parts = group.split("/") if group else []
            found = ("", *("/".join(parts[: i + 1]) for i in range(len(parts))))
            self._lineage[group] = found
        return found

    def fits(self, name: str, size: int, group: str) -> bool:
        """No group related to ``group`` (it, an ancestor or a descendant) claimed ``name``
        with another size.  Looked up in sets, not compared group by group: a name claimed in
        hundreds of groups with different sizes (phony names, the beams' ``delta_time``) made
        ~17,000 comparisons a file."""
        seen = self._sizes.get(name)
        if not seen or (len(seen) == 1 and size in seen):  # the usual case
            return True
        lineage = self.lineage(group)
        for other, (claimed, covered) in seen.items():
            # a descendant (or the group itself) claimed it: the group is in ``covered``;
            # an ancestor (or the root) did: one of the lineage is in ``claimed``
            if other != size and (group in covered or not claimed.isdisjoint(lineage)):
                return False
        return True

    def claim(self, name: str, size: int, group: str) -> None:
        """Record that ``group`` gives ``name`` the size ``size``."""
        claimed, covered = self._sizes.setdefault(name, {}).setdefault(size, (set(), set()))
        if group not in claimed:
            claimed.add(group)
            covered.update(self.lineage(group))
