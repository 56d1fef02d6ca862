"""Where h5sidecar's documentation is published: the one base every pointer to it starts from
(the xarray engine's ``url``, messages that send the user to a page)."""

from __future__ import annotations

__all__ = ["DOCS_URL", "docs_page"]

#: The documentation site's base URL (the latest release).
DOCS_URL = "https://h5sidecar.readthedocs.io/en/latest/"


def docs_page(page: str) -> str:
    """The URL of ``page`` (``"how-to/xarray/"``, optionally ``#anchor``) on the site."""
    return DOCS_URL + page.lstrip("/")
