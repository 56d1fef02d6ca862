"""The documentation site: the engine's link lands on its page, the CLI reference covers the parser.

``make docs`` builds the site with warnings as errors (broken links and anchors, docstrings the
API pages cannot render); these checks are the ones a build cannot make, and run without mkdocs.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from h5sidecar.cli import build_parser
from h5sidecar.read import H5SidecarBackend

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _hook(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DOCS / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(src_uri: str) -> SimpleNamespace:
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri))


def test_xarray_engine_links_to_its_page_of_the_site() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    site = project["urls"]["Documentation"]
    assert H5SidecarBackend.url == f"{site}how-to/xarray/"
    assert (DOCS / "how-to" / "xarray.md").is_file()


def test_cli_reference_shows_every_command_and_option() -> None:
    hook = _hook("cli_reference")
    text = hook.on_page_markdown((DOCS / "reference" / "cli.md").read_text(), _page(hook._PAGE))
    assert "<!-- cli-options:" not in text
    parsers = {"h5sidecar": build_parser(), **hook.commands(build_parser())}
    assert {"cache list", "cache prune"} <= set(parsers)  # nested subcommands too
    for name, parser in parsers.items():
        for action in parser._actions:
            for option in action.option_strings:
                if option in ("-h", "--help"):  # every command has it; the page says it once
                    continue
                assert f"`{option}" in text, (name, option)


@pytest.mark.parametrize("command", ["prune", "cache prune"])
def test_cli_reference_refuses_a_command_without_its_section(command: str) -> None:
    hook = _hook("cli_reference")
    marker = f"<!-- cli-options: {command} -->"
    text = (DOCS / "reference" / "cli.md").read_text()
    assert marker in text
    with pytest.raises(ValueError, match=command):
        hook.on_page_markdown(text.replace(marker, ""), _page(hook._PAGE))
