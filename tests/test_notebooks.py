"""The notebooks in ``notebooks/`` run top to bottom (nbclient, a real kernel) against sample
granules on the moto S3 server; the kernel reaches it through ``AWS_ENDPOINT_URL`` and finds the
bucket in ``EXAMPLE_BUCKET``, the variables the notebooks document.  Each notebook asserts its
own results (values equal to h5py, report counts, search hits)."""

from __future__ import annotations

import uuid
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
ORDER = ("01_index_a_bucket", "02_open_with_xarray", "03_dask_workflow",
         "04_find_data_with_stac")


@pytest.fixture(scope="module")
def example_bucket(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A bucket holding two small ATL03-like granules under ``atl03/``."""
    import s3fs

    from h5sidecar.sample import write_sample_granules

    local = tmp_path_factory.mktemp("nb-granules")
    bucket = f"nb-{uuid.uuid4().hex[:10]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=s3_endpoint)
    fs.mkdir(bucket)
    for path in write_sample_granules(local, granules=2, photons=12_000, seed=7):
        fs.put_file(str(path), f"{bucket}/atl03/{path.name}")
    return bucket


def test_notebooks_are_stored_without_outputs() -> None:
    found = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    assert found == sorted(ORDER)
    for name in ORDER:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, name


@pytest.mark.slow
def test_notebooks_run_in_order(example_bucket: str, tmp_path: Path, s3_endpoint: str,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One test for all four: they build on each other (index, then open, map, catalogue), so
    they run in order in one process against one bucket (whatever the xdist distribution)."""
    from nbclient import NotebookClient

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("EXAMPLE_BUCKET", example_bucket)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    for name in ORDER:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        client = NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(tmp_path)}})
        client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                  if o.output_type == "error"]
        assert not errors, name
        assert all(c.execution_count for c in nb.cells if c.cell_type == "code"), name
