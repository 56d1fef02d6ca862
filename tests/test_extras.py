"""Optional dependencies: a command or function whose extra is not installed names the extra to
install (one line, exit 2), instead of a ``ModuleNotFoundError`` traceback.

The fast tests block the modules of one extra in a subprocess (``sys.modules[name] = None``
makes ``import name`` raise ``ModuleNotFoundError``, as an absent package does); the slow test
runs the commands in a virtual environment holding the base install only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from h5sidecar.errors import H5SidecarError, MissingExtraError, require_extra
from tests._cli_launch import h5sidecar_command

#: ``(blocked modules, extra named, command)``; DEST, SRC and OUT are replaced by paths.
CASES: list[tuple[tuple[str, ...], str, tuple[str, ...]]] = [
    (("starlette",), "gateway", ("serve", "DEST")),
    (("uvicorn",), "gateway", ("serve", "DEST")),
    (("shapely",), "catalog", ("serve", "DEST", "--stac", "OUT")),
    (("psycopg_pool",), "pgstac", ("serve", "DEST", "--stac-backend",
                                    "pgstac:postgresql://u@127.0.0.1:1/db")),
    (("pystac",), "catalog", ("catalog", "DEST", "-o", "OUT")),
    (("psycopg",), "pgstac", ("catalog", "DEST", "-o", "OUT", "--pgstac",
                              "postgresql://u@127.0.0.1:1/db")),
    (("distributed",), "dask", ("index", "SRC", "-o", "DEST", "--dask", "local:1")),
    (("icechunk",), "icechunk", ("cube", "DEST", "-o", "OUT", "--format", "icechunk")),
    (("netCDF4",), "netcdf", ("sample", "OUT", "--netcdf")),
]


def _run_blocked(blocked: Sequence[str], args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    command = h5sidecar_command(*args)
    block = "import sys; " + "; ".join(f"sys.modules[{m!r}] = None" for m in blocked) + "; "
    command[2] = block + command[2]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "COLUMNS": "200"})


def _paths(args: Sequence[str], tmp_path: Path) -> list[str]:
    (tmp_path / "src").mkdir(exist_ok=True)
    where = {"DEST": tmp_path / "dest", "SRC": tmp_path / "src", "OUT": tmp_path / "out"}
    return [str(where[a]) if a in where else a for a in args]


def _assert_names_extra(result: subprocess.CompletedProcess[str], extra: str) -> None:
    err = result.stderr.strip()
    assert result.returncode == 2, (result.returncode, result.stdout, err)
    assert "Traceback" not in err and "ModuleNotFoundError" not in err, err
    assert err.startswith("error:") and len(err.splitlines()) == 1, err
    assert f'pip install "h5sidecar[{extra}]"' in err, err


@pytest.mark.parametrize(("blocked", "extra", "args"), CASES,
                         ids=[f"{c[2][0]}-{c[0][0]}" for c in CASES])
def test_a_missing_extra_is_named(blocked: tuple[str, ...], extra: str, args: tuple[str, ...],
                                  tmp_path: Path) -> None:
    _assert_names_extra(_run_blocked(blocked, _paths(args, tmp_path)), extra)


def test_dask_chunks_without_dask_name_the_extra(tmp_path: Path) -> None:
    """``open_dataset(..., chunks={})`` on a base install names [dask]; the default (no Dask:
    lazy NumPy arrays) reads what h5py reads."""
    from h5sidecar.workflows import index_many
    from tests.workflows.conftest import write_granule

    granule = write_granule(tmp_path / "src" / "g.h5")
    assert index_many(str(granule.parent), str(tmp_path / "dest"), executor="serial").ok
    code = f"""
import sys; sys.modules["dask"] = None
import h5py, numpy as np, h5sidecar
from h5sidecar.errors import MissingExtraError
sidecar = {str(tmp_path / "dest" / "g.h5.parq")!r}
try:
    h5sidecar.open_dataset(sidecar, group="gt1l/heights", chunks={{}})
except MissingExtraError as exc:
    print(exc)
ds = h5sidecar.open_dataset(sidecar, group="gt1l/heights", mask_and_scale=False)
with h5py.File({str(granule)!r}) as f:
    np.testing.assert_array_equal(ds["h_ph"].values, f["gt1l/heights/h_ph"][()])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert 'pip install "h5sidecar[dask]"' in done.stdout, done.stdout


def test_xarrays_own_chunks_without_dask_name_the_extra(tmp_path: Path) -> None:
    """``xr.open_dataset/open_datatree/open_groups(..., engine="h5sidecar", chunks={})`` on an
    install without Dask raise MissingExtraError naming [dask] (not xarray's "unrecognized
    chunk manager"); ``chunks=None`` reads what h5py reads."""
    from h5sidecar.workflows import index_many
    from tests.workflows.conftest import write_granule

    granule = write_granule(tmp_path / "src" / "g.h5")
    assert index_many(str(granule.parent), str(tmp_path / "dest"), executor="serial").ok
    code = f"""
import sys; sys.modules["dask"] = None
import h5py, numpy as np, xarray as xr
from h5sidecar.errors import MissingExtraError
sidecar = {str(tmp_path / "dest" / "g.h5.parq")!r}
for opener, kw in ((xr.open_dataset, {{"group": "gt1l/heights"}}), (xr.open_datatree, {{}}),
                   (xr.open_groups, {{}})):
    for chunks in ({{}}, "auto", {{"photon": 10}}):
        try:
            opener(sidecar, engine="h5sidecar", chunks=chunks, **kw)
        except MissingExtraError as exc:
            print(exc)
ds = xr.open_dataset(sidecar, engine="h5sidecar", group="gt1l/heights", chunks=None,
                     mask_and_scale=False)
tree = xr.open_datatree(sidecar, engine="h5sidecar", mask_and_scale=False)
with h5py.File({str(granule)!r}) as f:
    np.testing.assert_array_equal(ds["h_ph"].values, f["gt1l/heights/h_ph"][()])
    np.testing.assert_array_equal(tree["gt1l/heights"]["h_ph"].values, f["gt1l/heights/h_ph"][()])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count('pip install "h5sidecar[dask]"') == 9, done.stdout


def test_require_extra_names_the_missing_modules() -> None:
    require_extra("dask", "json", feature="nothing")  # present: no error
    with pytest.raises(MissingExtraError) as err:
        require_extra("gateway", "json", "h5sidecar_no_such_module", "h5sidecar_nor_this",
                      feature="h5sidecar serve")
    message = str(err.value)
    assert message == ("h5sidecar serve needs h5sidecar_no_such_module, h5sidecar_nor_this, "
                       'which are not installed: pip install "h5sidecar[gateway]"')
    # callers that guarded the import with `except ImportError` keep working
    assert isinstance(err.value, ImportError) and isinstance(err.value, H5SidecarError)
    assert err.value.kind == "missing_extra"


def test_every_extra_named_exists() -> None:
    """Each extra a message names is one pyproject.toml defines, and installs what it is
    asked for."""
    import tomllib

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    for blocked, extra, _ in CASES:
        assert extra in extras
        held = " ".join(extras[extra]).lower().replace("-", "_").replace("psycopg[", "psycopg ")
        assert all(m.lower().split("_")[0] in held for m in blocked), (extra, blocked)
        assert extra in " ".join(extras["all"]), f"[all] does not install [{extra}]"


# -- the base install only ----------------------------------------------------------------


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with ``pip install -e <this checkout>``: no extras.  pip's cache
    makes it quick after the first run.  This environment's pip installs into it, without
    compiling every module it unpacks (most are never imported here; the commands below write
    the bytecode of those that are, once)."""
    venv = tmp_path_factory.mktemp("base-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)  # fmt: skip
    python = venv / "bin" / "python"
    root = Path(__file__).parents[1]
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           "--disable-pip-version-check", "--no-compile", "-e", str(root)],
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    if done.returncode:
        pytest.fail(f"pip install -e {root} failed:\n{done.stderr[-3000:]}")
    return python


@pytest.mark.slow
def test_the_base_install_names_each_extra(base_venv: Path, tmp_path: Path) -> None:
    check = subprocess.run([str(base_venv), "-c", "import starlette"], capture_output=True,
                           check=False)
    assert check.returncode != 0, "the base install holds an extra's package"
    for _, extra, args in CASES:
        command = [str(base_venv), *h5sidecar_command(*_paths(args, tmp_path))[1:]]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                                env={**env, "COLUMNS": "200"})  # fmt: skip
        # a base install misses every extra: the first one a command needs is named
        if args[0] == "serve" and extra != "gateway":
            extra = "gateway"
        _assert_names_extra(result, extra)
