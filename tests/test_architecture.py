"""The house's shape, held by tests: imports point one way between layers, no cycles, siblings
meet only at package fronts, every lazily exported name resolves, module names are unique, and
references/ loads neither h5py nor a web framework (DESIGN rules 3, 14, 15, 16)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import h5sidecar

PACKAGE = Path(h5sidecar.__file__).parent
#: Every top-level module or package of h5sidecar and its rank (DESIGN: imports point one way).
#: A module may import modules of a lower rank only; two packages of one rank never import each
#: other.  ``""`` is the package root, which re-exports names lazily from the layers below it.
LAYERS: dict[str, float] = {
    "errors": 0,
    "settings": 0,
    "references": 1,
    "codecs": 1,
    "sources": 2,
    "indexer": 3,
    "read": 3,
    "sample": 3,
    "dest": 3.5,  # the DEST and its record: written by workflows, read by gateway and catalog
    "gateway": 4,
    "catalog": 4,
    "examples": 4.5,  # science built on read/ and catalog/; re-exported by the workflows front
    "workflows": 5,
    "cli": 6,
    "_version": 0,
    "_lazy": 0,
    "_compat": 0,  # other libraries' private APIs and the sync bridge: imports no layer
    "_modes": 0,
    "_pids": 0,
    "_memory": 0,  # freed memory given back (Arrow's pool, glibc's heap): imports no layer
    "_docs": 0,
    "credentials": 0.5,  # above errors, below references (which reads sidecars on S3)
    "": 8,
}
#: ``references/`` is the model and its formats: no HDF5, no web framework.
NOT_IN_REFERENCES = {
    "h5py",
    "hdf5plugin",
    "starlette",
    "uvicorn",
    "fastapi",
    "flask",
    "aiohttp",
    "httpx",
    "tornado",
    "sanic",
    "django",
}
#: ``sources/`` moves bytes: no HDF5, no Zarr, no xarray, no web framework.
NOT_IN_SOURCES = NOT_IN_REFERENCES | {"zarr", "xarray", "h5netcdf", "netCDF4"}
#: ``read/`` serves Zarr to libraries, not HTTP.
NOT_IN_READ = NOT_IN_REFERENCES - {"httpx", "aiohttp"}


def _imports(path: Path) -> Iterator[str]:
    module = ".".join(("h5sidecar", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _layer(module: str) -> str:
    """``h5sidecar.read.zarr.filesystem`` -> ``read``; ``h5sidecar`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("h5sidecar", *parts))


def test_every_package_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    tops = {t for t in tops if not t.startswith((".", "__pycache__")) and t != "py"}
    tops = {t for t in tops if (PACKAGE / t).is_dir() or (PACKAGE / f"{t}.py").is_file()}
    tops = (tops - {"__init__"}) | {""}
    assert tops <= set(LAYERS), f"modules without a layer: {sorted(tops - set(LAYERS))}"


def test_import_graph_points_one_way() -> None:
    problems: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_of(path)
        own = _layer(module)
        where = path.relative_to(PACKAGE.parent).as_posix()
        for target in sorted(set(_imports(path))):
            top, dep = target.split(".")[0], _layer(target)
            if own == "references" and top in NOT_IN_REFERENCES:
                problems.add(f"{where} imports {top}")
            if own == "sources" and top in NOT_IN_SOURCES:
                problems.add(f"{where} imports {top}: sources/ knows nothing of HDF5 or Zarr")
            if own == "read" and top in NOT_IN_READ:
                problems.add(f"{where} imports {top}: read/ knows nothing of HTTP serving")
            if top != "h5sidecar":
                continue
            if target == "h5sidecar" or (dep == "" and own != ""):
                if own != "":
                    problems.add(f"{where} imports the package root: import the layer instead")
                continue
            if dep == own:
                continue
            if LAYERS[dep] >= LAYERS[own]:
                problems.add(f"{where} ({own}) imports h5sidecar.{dep}")
    assert not problems, "imports against the layering:\n" + "\n".join(sorted(problems))


def test_no_import_cycles_between_modules() -> None:
    """No two modules import each other, even inside functions (DESIGN: no circular imports)."""
    modules = {_module_of(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps = set()
        for target in _imports(path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # a module importing its own package's __init__ (or the root) is not a cycle edge:
            # package __init__ modules re-export lazily
            if target and not module.startswith(target + ".") and target != module:
                deps.add(target)
        graph[module] = deps
    cycles = [c for c in _strongly_connected(graph) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(sorted(c)) for c in cycles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            out.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_lazy_public_name_resolves() -> None:
    """Each package's exported names import, the public ones (``__all__``) and those its front
    serves to sibling packages (``_LAZY``): a moved module would otherwise surface only when a
    user, or a sibling, first touches the name."""
    import importlib

    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = importlib.import_module(_module_of(init))
        for name in sorted({*getattr(package, "__all__", ()), *getattr(package, "_LAZY", ())}):
            try:
                getattr(package, name)
            except (AttributeError, ImportError) as exc:
                missing.append(f"{package.__name__}.{name}: {exc}")
    assert not missing, "\n".join(missing)


def test_references_import_no_h5py_at_runtime() -> None:
    code = (
        "import sys, h5sidecar.references\n"
        f"bad = sorted(m for m in {sorted(NOT_IN_REFERENCES)!r} if m in sys.modules)\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


#: Root modules every layer may import: the kernel under all layers (lazy fronts, the version,
#: file modes, the one compat module per library, the one sync bridge, the documentation's URL,
#: the memory give-back).
KERNEL = {"_lazy", "_version", "_modes", "_compat", "_pids", "_docs", "_memory"}


def test_siblings_import_only_fronts() -> None:
    """DESIGN rule 14: a package reaches another only through its front (``__init__``), never
    through one of its ``_private`` modules, so each package's modules can move freely."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _layer(_module_of(path))
        for target in sorted(set(_imports(path))):
            parts = target.split(".")
            if parts[0] != "h5sidecar" or len(parts) < 2:
                continue
            dep = parts[1]
            root_private = dep.startswith("_") and dep not in KERNEL and own != ""
            if root_private and not own.startswith("_") and (PACKAGE / f"{dep}.py").is_file():
                problems.append(f"{path.relative_to(PACKAGE.parent)} imports the root's {target}")
                continue
            if dep == own or dep in KERNEL or not (PACKAGE / dep).is_dir():
                continue
            private = [
                i for i in range(2, len(parts))
                if parts[i].startswith("_")
                and (PACKAGE.joinpath(*parts[1 : i + 1]).with_suffix(".py").is_file()
                     or PACKAGE.joinpath(*parts[1 : i + 1]).is_dir())
            ]
            if private:
                problems.append(f"{path.relative_to(PACKAGE.parent)} imports {target}")
    assert not problems, "imports past another package's front:\n" + "\n".join(problems)


def test_module_names_are_unique() -> None:
    """DESIGN rule 16: no two modules share a name (a newcomer greps for one and finds one)."""
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.stem.lstrip("_"), []).append(str(path.relative_to(PACKAGE)))
    dupes = {k: v for k, v in seen.items() if len(v) > 1}
    assert not dupes, f"modules sharing a name: {dupes}"


#: ``xarray.core.indexing``'s names that xarray documents for backends ("How to add a new
#: backend"; ``BackendArray.async_getitem`` uses the async adapter): the one part of
#: ``xarray.core`` used outside ``h5sidecar/_compat/``.
XARRAY_BACKEND_INDEXING = {
    "explicit_indexing_adapter",
    "async_explicit_indexing_adapter",
    "IndexingSupport",
    "LazilyIndexedArray",
    "ExplicitIndexer",
    "BasicIndexer",
    "OuterIndexer",
    "VectorizedIndexer",
}
#: Underscored names of the standard library that its documentation names as API.
DOCUMENTED_UNDERSCORED = {"os._exit", "sys._getframe"}


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _private_uses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, what)`` of each use of another library's private API in a module: an import
    of an underscored module or name, of ``zarr.core``, ``xarray.coding`` or ``xarray.core``
    (but for the backend indexing names), and an underscored attribute read on an imported
    library's module or name (``xr.Dataset._construct_direct``)."""
    bound: dict[str, str] = {}  # local name -> the library path it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # ``import a.b`` binds ``a``; ``import a.b as c`` binds ``c`` to ``a.b``
                local = alias.asname or alias.name.split(".")[0]
                bound[local] = alias.name if alias.asname else local
                if _private_path(alias.name):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                path = f"{node.module}.{alias.name}"
                bound[alias.asname or alias.name] = path
                if _private_path(path):
                    yield node.lineno, f"from {node.module} import {alias.name}"
    # the outermost attribute of a chain only (``xr.coding.times.f`` once, not per prefix)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        chain = [node.attr]
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        path = ".".join([bound[value.id], *reversed(chain)])
        if path.split(".")[0] != "h5sidecar" and _private_path(path):
            yield node.lineno, path


def _private_path(path: str) -> bool:
    parts = path.split(".")
    if parts[0] in ("h5sidecar", "__future__") or path in DOCUMENTED_UNDERSCORED:
        return False
    if any(_is_private(p) for p in parts):
        return True
    if parts[:2] in (["zarr", "core"], ["xarray", "coding"]):  # public: xarray.coders
        return True
    if parts[:2] == ["xarray", "core"]:
        return not (parts[:3] == ["xarray", "core", "indexing"]
                    and (len(parts) == 3 or parts[3] in XARRAY_BACKEND_INDEXING))
    return False


def test_other_libraries_private_apis_only_in_compat() -> None:
    """DESIGN rule 15: another library's private API (underscored modules and names,
    ``zarr.core``, ``xarray.coding``, ``xarray.core`` but for its documented backend indexing
    names) is used in ``h5sidecar/_compat/<library>.py`` only, where each use is named,
    version-gated and tested (``tests/test_compat.py``)."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if _layer(_module_of(path)) == "_compat":
            continue
        tree = ast.parse(path.read_text(), str(path))
        problems += [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
                     for line, what in sorted(set(_private_uses(tree)))]
    assert not problems, "private APIs of other libraries outside _compat/:\n" + "\n".join(
        problems)


def test_the_private_api_check_sees_each_kind_of_use() -> None:
    code = (
        "import xarray as xr\n"
        "import zarr.core.metadata\n"
        "from zarr.codecs.numcodecs import _NumcodecsBytesBytesCodec\n"
        "from xarray.core import indexing\n"
        "from xarray.core.variable import calculate_dimensions\n"
        "from xarray.coding.times import decode_cf_datetime\n"
        "import os, sys\n"
        "xr.Dataset._construct_direct\n"
        "xr.coding.times.encode_cf_datetime\n"
        "xr.coders.CFDatetimeCoder\n"
        "indexing.decompose_indexer\n"
        "indexing.LazilyIndexedArray\n"
        "os._exit\n"
        "sys._getframe\n"
        "self._private\n"
    )
    found = {what for _, what in _private_uses(ast.parse(code))}
    assert found == {
        "import zarr.core.metadata",
        "from zarr.codecs.numcodecs import _NumcodecsBytesBytesCodec",
        "from xarray.core.variable import calculate_dimensions",
        "from xarray.coding.times import decode_cf_datetime",
        "xarray.coding.times.encode_cf_datetime",
        "xarray.Dataset._construct_direct",
        "xarray.core.indexing.decompose_indexer",
    }


#: Packages whose modules import each of the project's names from the module that defines it.
FROM_THE_SOURCE = ("references/parquet_sidecar", "workflows/cube")


def _passed_on(module: str) -> set[str]:
    """The names ``module`` (a module of h5sidecar, not a front) binds by importing them."""
    path = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")
    body = ast.parse(path.read_text(), str(path)).body  # module level: what it binds
    return {a.asname or a.name for n in body if isinstance(n, ast.ImportFrom) for a in n.names}


def test_listed_packages_import_names_from_where_they_are_defined() -> None:
    """A module of :data:`FROM_THE_SOURCE` imports a name from the module that defines it, not
    from a sibling module that only passes it on (its import then outlives the name's move)."""
    problems = []
    for package in FROM_THE_SOURCE:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                        and node.module.startswith("h5sidecar.")):
                    continue
                source = PACKAGE.joinpath(*node.module.split(".")[1:]).with_suffix(".py")
                if not source.is_file():  # a front passes names on by design
                    continue
                passed = _passed_on(node.module)
                problems += [f"{path.relative_to(PACKAGE.parent)}: {a.name} from {node.module}"
                             for a in node.names if a.name in passed]
    assert not problems, "names imported from a module that only passes them on:\n" + "\n".join(
        problems)
