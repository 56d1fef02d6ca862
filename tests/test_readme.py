"""What the README and the documentation tell users to import exists and is public.

(No private modules as API.)  The examples themselves run in tests/test_doc_examples.py.
"""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
_FROM = re.compile(r"^\s*from (h5sidecar[\w.]*) import \(?([\w, \n]+?)\)?\s*$", re.MULTILINE)
_IMPORT = re.compile(r"^\s*import (h5sidecar[\w.]*)", re.MULTILINE)


def _code_blocks() -> list[str]:
    return [block for page in PAGES
            for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL)]


def _imports() -> list[tuple[str, tuple[str, ...]]]:
    found: list[tuple[str, tuple[str, ...]]] = []
    for block in _code_blocks():
        for m in _FROM.finditer(block):
            names = tuple(n.strip() for n in m.group(2).replace("\n", ",").split(",") if n.strip())
            found.append((m.group(1), names))
        found.extend((m.group(1), ()) for m in _IMPORT.finditer(block))
    return found


def test_readme_has_imports_to_check() -> None:
    assert len(_imports()) > 10


@pytest.mark.parametrize(("module", "names"), _imports(), ids=lambda v: str(v))
def test_readme_imports_are_public_and_exist(module: str, names: tuple[str, ...]) -> None:
    private = [part for part in module.split(".") if part.startswith("_")]
    assert not private, f"README imports the private module {module}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the README shows no moved path
        imported = importlib.import_module(module)
        for name in names:
            assert not name.startswith("_"), f"README imports private {module}.{name}"
            assert hasattr(imported, name), f"{module} has no {name}"
