"""https:// granules through the batch workflow, the CLI (one URL, --url-list), the xarray
engine and the gateway (uvicorn) as upstream: values equal to h5py, the allow-list holds."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

from h5sidecar.cli import EXIT_OK, EXIT_USAGE, main
from h5sidecar.workflows import index_many
from tests.earthdata import Archive, earthdata  # noqa: F401  (fixture)
from tests.gateway._http import gateway

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def archive(earthdata: Archive, small_h5: Path, tmp_path: Path,  # noqa: F811
            monkeypatch: pytest.MonkeyPatch) -> Archive:  # fmt: skip
    """Two granules on the archive, the token in EARTHDATA_TOKEN, no .netrc."""
    monkeypatch.setenv("EARTHDATA_TOKEN", earthdata.token)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for name in ("a.h5", "b.h5"):
        shutil.copy(small_h5, tmp_path / name)
        earthdata.add(tmp_path / name)
    return earthdata


def _datasets(path: Path) -> list[str]:
    names: list[str] = []
    with h5py.File(path) as f:
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return names


def test_cli_indexes_a_url_list_and_one_url(archive: Archive, tmp_path: Path) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(f"# granules\n{archive.url('a.h5')}\n\n{archive.url('b.h5')}\n")
    dest = tmp_path / "dest"
    assert main(["index", "--url-list", str(urls), "-o", str(dest), "--serial"]) == EXIT_OK
    assert sorted(p.name for p in dest.glob("*.parq")) == ["a.h5.parq", "b.h5.parq"]
    # a re-run finds both up to date (identity from the ranged GET's headers)
    report = index_many([archive.url("a.h5"), archive.url("b.h5")], str(dest), executor="serial")
    assert report.counts["up_to_date"] == 2
    assert report.roots == () and report.options["url_list"]["urls"] == 2  # not every URL

    one = tmp_path / "one"
    assert main(["index", archive.url("a.h5"), "-o", str(one), "--format", "json",
                 "--serial"]) == EXIT_OK  # fmt: skip
    ds = xr.open_dataset(one / "a.h5.json", engine="h5sidecar", group="gt1l/heights",
                         decode_cf=False)  # fmt: skip
    assert ds.data_vars
    with h5py.File(tmp_path / "a.h5") as f:
        for name in ds.data_vars:
            np.testing.assert_array_equal(ds[name].values, f[f"gt1l/heights/{name}"][()])
    assert main(["index", "-o", str(one)]) == EXIT_USAGE  # neither SOURCE nor --url-list


def test_gateway_reads_https_upstream(archive: Archive, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    index_many([archive.url("a.h5"), archive.url("b.h5")], str(dest), format="json",
               executor="serial")  # fmt: skip
    names = [n for n in _datasets(tmp_path / "a.h5") if n.startswith("gt1l/")]
    assert names
    with gateway(str(dest)) as (url, _app):
        root = zarr.open_group(f"{url}/zarr/b.h5/", mode="r")
        with h5py.File(tmp_path / "b.h5") as f:
            for name in names:
                want = f[name][()]
                node = root[name]
                assert isinstance(node, zarr.Array)
                np.testing.assert_array_equal(np.asarray(node[...]), want, err_msg=name)
    signed = archive.seen(prefix="/signed/")
    assert signed and all("Range" in s.headers for s in signed)
    assert all(archive.token not in str(s.headers) for s in archive.seen("login"))


def test_gateway_refuses_a_planted_https_source(archive: Archive, tmp_path: Path) -> None:
    """A sidecar that points at another host is never fetched by the gateway."""
    import json

    dest = tmp_path / "dest"
    index_many([archive.url("a.h5")], str(dest), format="json", executor="serial")
    sidecar = dest / "a.h5.json"
    doc = json.loads(sidecar.read_text())
    evil = f"http://localhost:{archive.login_port}/signed/a.h5"
    text = json.dumps(doc).replace(archive.url("a.h5"), evil)
    sidecar.write_text(text)
    before = len(archive.seen("login"))
    with gateway(str(dest)) as (url, _app):
        import httpx

        r = httpx.get(f"{url}/zarr/a.h5/gt1l/heights/h_ph/0", timeout=30)
    assert r.status_code == 403, r.text
    assert len(archive.seen("login")) == before  # nothing was sent to the planted host


def test_process_workers_use_the_callers_current_token(archive: Archive, tmp_path: Path,
                                                       small_h5: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Worker processes read EARTHDATA_TOKEN as the caller has it now, not as the fork server
    had it when it started (here: a wrong token), and the token travels in no task."""
    from h5sidecar.errors import SourceAuthError

    monkeypatch.setenv("EARTHDATA_TOKEN", "stale-token")
    # the fork server starts (if it has not yet) with the stale token in its environment
    local = index_many(str(small_h5), str(tmp_path / "local"), executor="process", workers=1)
    assert local.counts["ok"] == 1
    with pytest.raises(SourceAuthError) as info:  # a URL's identity is read while listing
        index_many([archive.url("a.h5")], str(tmp_path / "dest"), executor="process", workers=1)
    assert "stale-token" not in str(info.value)
    monkeypatch.setenv("EARTHDATA_TOKEN", archive.token)
    report = index_many([archive.url("a.h5")], str(tmp_path / "dest"), executor="process",
                        workers=1)  # fmt: skip
    assert report.counts["ok"] == 1, report.to_dict()
    assert archive.token not in str(report.to_dict())


def test_gateway_follows_redirects_only_to_allowed_hosts(archive: Archive, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The archive's signed URLs live on its login host: without it among the allowed redirect
    hosts the gateway refuses the hop (502) and sends nothing there."""
    import httpx

    dest = tmp_path / "dest"
    index_many([archive.url("a.h5")], str(dest), format="json", executor="serial")
    monkeypatch.delenv("H5SIDECAR_REDIRECT_HOSTS")
    before = len(archive.seen("login"))
    with gateway(str(dest)) as (url, _app):
        r = httpx.get(f"{url}/zarr/a.h5/gt1l/heights/h_ph/0", timeout=30)
    assert r.status_code == 502 and r.json()["error"] == "source_read", r.text
    assert "not an allowed redirect target" in r.json()["message"]
    assert len(archive.seen("login")) == before


@pytest.mark.parametrize("mode", ["shifted", "label_later", "superset"])
def test_gateway_checks_the_ranges_its_upstream_answers(tmp_path: Path, mode: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """An upstream answering another range than asked for is a 502, never wrong bytes; a
    superset is sliced."""
    import httpx

    from h5sidecar.indexer import index_granule
    from h5sidecar.references import write_json
    from tests.sources.ranges_server import ranges_server

    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    path = tmp_path / "g.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("lat", data=np.arange(-89, 8103, 2, dtype="<i4"), chunks=(1024,))
    dest = tmp_path / "dest"
    dest.mkdir()
    with ranges_server(path) as upstream:
        write_json(index_granule(upstream.url), dest / "g.h5.json")
        upstream.mode = mode
        with gateway(str(dest), allow=(upstream.url,)) as (url, _app):
            r = httpx.get(f"{url}/zarr/g.h5/lat/1", timeout=30)
    if mode == "superset":
        assert r.status_code == 200, r.text
        with h5py.File(path) as f:
            np.testing.assert_array_equal(np.frombuffer(r.content, "<i4"), f["lat"][1024:2048])
    else:
        assert r.status_code == 502 and r.json()["error"] == "source_read", r.text
