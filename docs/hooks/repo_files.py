"""mkdocs hook: the repository's own Markdown files included in pages, their links made to work.

A line ``<!-- include: PATH -->`` (``<!-- include: PATH without-title -->`` drops the file's
first ``# `` heading) is replaced by the file at PATH, relative to the repository root, so that
``benchmarks/README.md`` and ``CHANGELOG.md`` stay where their editors keep them.  Those files
keep their links as GitHub shows them: ``../README.md#anchor`` and ``README.md#anchor``.  The sections
those anchors named now live on the site's pages, so each such link is pointed at the page that
holds a heading with that anchor (found in the site's own Markdown before the build), and a link
to an anchor no page holds fails the build.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pymdownx.slugs import slugify

_SLUG = slugify(case="lower")
_HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\]\((?:\.\./)?README\.md#([^)\s]+)\)")
_INCLUDE = re.compile(r"^<!-- include: (\S+)( without-title)? -->$", re.MULTILINE)
_ROOT = Path(__file__).resolve().parents[2]
_anchors: dict[str, str] = {}


def _include(m: re.Match[str]) -> str:
    text = (_ROOT / m.group(1)).read_text(encoding="utf-8")
    if m.group(2):
        text = re.sub(r"\A# .*\n", "", text, count=1)
    return text


def _plain(heading: str) -> str:
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    return heading.replace("`", "")


def on_files(files: Any, config: Any, **_: Any) -> Any:
    _anchors.clear()
    for f in files.documentation_pages():
        text = _FENCE.sub("", Path(f.abs_src_path).read_text(encoding="utf-8"))
        for heading in _HEADING.findall(text):
            _anchors.setdefault(_SLUG(_plain(heading), "-"), f.src_uri)
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def point(m: re.Match[str]) -> str:
        anchor = m.group(1)
        target = _anchors.get(anchor)
        if target is None:
            raise ValueError(f"{page.file.src_uri}: README.md#{anchor} names no heading of the site")
        rel = os.path.relpath(target, os.path.dirname(page.file.src_uri) or ".")
        return f"]({rel}#{anchor})"

    return _LINK.sub(point, _INCLUDE.sub(_include, markdown))
