"""The loops users write first, as cases of ``bench_read.py`` (workload "all" only): load a
whole granule through the xarray engine the ways the documentation and xarray suggest, and
the way a new user does, each one a row of the table.

* ``h5sidecar.load(open_datatree(...))``: the documented batch path (one batch);
* ``DataTree.load()``, and ``Dataset.load()`` / ``ds.compute()`` of each group: xarray's own,
  variable after variable;
* ``for v in ds.data_vars.values(): v.load()`` over each group (the coordinates left are
  read when the values are checked, inside the timed run);
* the same loop with the read-ahead of small arrays off (``prefetch_bytes=0``), to show what
  the read-ahead saves.

Every group is opened with ``chunks=None, decode_cf=False, create_default_indexes=False``
(raw values, as h5py reads them; no index built).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks._read_tools import Env, Items, _sidecar_store

LOAD_OPTIONS: dict[str, Any] = {"chunks": None, "decode_cf": False, "create_default_indexes": False}


def _tree_values(tree: Any, items: Items) -> dict[str, Any]:
    """The items' values from a loaded DataTree (dimensions renamed for clashes mapped back);
    each node's variables looked up once (what the benchmark checks is not what it times)."""
    nodes = {node.path.strip("/"): node for node in tree.subtree}
    variables: dict[str, tuple[Any, dict[str, str]]] = {}
    out = {}
    for p, sel in items:
        g, _, name = p.rpartition("/")
        if g not in variables:
            node = nodes[g]
            renamed = node.encoding.get("h5sidecar_renamed", {})
            variables[g] = (node.variables, {old: new for new, old in renamed.items()})
        found, renamed = variables[g]
        v = found[renamed.get(name, name)]
        out[p] = v.values if sel is None else v[sel].values
    return out


def _open_tree(env: Env) -> Any:
    import h5sidecar

    return h5sidecar.open_datatree(_sidecar_store(env), **LOAD_OPTIONS)


def batch_load(env: Env, items: Items) -> dict[str, Any]:
    """The documented batch path: ``h5sidecar.load(open_datatree(...))``."""
    import h5sidecar

    return _tree_values(h5sidecar.load(_open_tree(env)), items)


def tree_load(env: Env, items: Items) -> dict[str, Any]:
    """xarray's own ``DataTree.load()`` (variable after variable)."""
    return _tree_values(_open_tree(env).load(), items)


def _group_datasets(env: Env, items: Items, **settings: Any) -> dict[str, Any]:
    import xarray as xr

    store = _sidecar_store(env, **settings)
    return {g: xr.open_dataset(store, engine="h5sidecar", group=g or None, **LOAD_OPTIONS)
            for g in dict.fromkeys(p.rpartition("/")[0] for p, _ in items)}


def _dataset_values(datasets: dict[str, Any], items: Items) -> dict[str, Any]:
    out = {}
    for p, sel in items:
        g, _, name = p.rpartition("/")
        v = datasets[g].variables[name]
        out[p] = v.values if sel is None else v[sel].values
    return out


def dataset_load(env: Env, items: Items) -> dict[str, Any]:
    """``Dataset.load()`` of each group in turn."""
    datasets = _group_datasets(env, items)
    for ds in datasets.values():
        ds.load()
    return _dataset_values(datasets, items)


def dataset_compute(env: Env, items: Items) -> dict[str, Any]:
    """``ds = ds.compute()`` of each group in turn (a loaded copy; the lazy one is dropped)."""
    datasets = _group_datasets(env, items)
    computed = {g: ds.compute() for g, ds in datasets.items()}
    return _dataset_values(computed, items)


def variable_loop(env: Env, items: Items, **settings: Any) -> dict[str, Any]:
    """The loop a new user writes first: ``for v in ds.data_vars.values(): v.load()``."""
    datasets = _group_datasets(env, items, **settings)
    for ds in datasets.values():
        for v in ds.data_vars.values():
            v.load()
    return _dataset_values(datasets, items)


def variable_loop_no_prefetch(env: Env, items: Items) -> dict[str, Any]:
    """The same loop without read-ahead of small arrays (``prefetch_bytes=0``)."""
    return variable_loop(env, items, prefetch_bytes=0)


#: (case, family, function): each loads whole groups or the whole granule
LOOP_CASES: list[tuple[str, str, Callable[[Env, Items], dict[str, Any]]]] = [
    ("h5sidecar: h5sidecar.load(open_datatree)", "h5sidecar", batch_load),
    ("h5sidecar: DataTree.load()", "h5sidecar", tree_load),
    ("h5sidecar: Dataset.load() per group", "h5sidecar", dataset_load),
    ("h5sidecar: ds.compute() per group", "h5sidecar", dataset_compute),
    ("h5sidecar: v.load() over ds.data_vars", "h5sidecar", variable_loop),
    ("h5sidecar: v.load() over ds.data_vars, prefetch_bytes=0", "h5sidecar",
     variable_loop_no_prefetch),
]
#: the target of each loop case, in times the floor (see benchmarks/README.md)
LOOP_TARGETS = {
    "h5sidecar: h5sidecar.load(open_datatree)": 1.1,
    "h5sidecar: DataTree.load()": 1.5,
    "h5sidecar: Dataset.load() per group": 1.5,
    "h5sidecar: ds.compute() per group": 1.5,
    "h5sidecar: v.load() over ds.data_vars": 1.5,
}
