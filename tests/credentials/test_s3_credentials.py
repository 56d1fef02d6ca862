"""S3 credentials against the moto server: none anywhere, AWS profiles, refreshing providers and an
Earthdata-style credentials endpoint on 127.0.0.1.  Every read is compared with h5py."""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from h5sidecar.cli import main
from h5sidecar.credentials import _s3_chain
from h5sidecar.errors import CredentialsError, ErrorKind
from h5sidecar.read import clear_caches
from h5sidecar.sources import EndpointCredentials, RefreshingCredentials, resolve_store
from h5sidecar.sources.stores._store_cache import clear_store_cache
from tests._granules import read_h5
from tests.workflows.conftest import write_granule

PATH = "gt1l/heights/h_ph"


def _forget() -> None:
    clear_store_cache()
    clear_caches()
    _s3_chain._SESSIONS.clear()
    _s3_chain._CHAINS.clear()


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No credentials anywhere: AWS_* unset, empty shared files, no instance metadata."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    empty = tmp_path / "aws-empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _forget()
    yield tmp_path
    _forget()


@pytest.fixture
def indexed(tmp_path: Path, s3: Any, s3_bucket: str, s3_endpoint: str) -> dict[str, Any]:
    """A granule on the moto server and its JSON sidecar (written with explicit keys)."""
    src = write_granule(tmp_path / "g" / "a.h5", n=1500)  # small: moto copies objects per GET
    s3.put(str(src), f"{s3_bucket}/in/a.h5")
    opts = ["--storage-option", f"endpoint_url={s3_endpoint}", "--storage-option", "key=k",
            "--storage-option", "secret=s"]  # fmt: skip
    assert main(["index", f"s3://{s3_bucket}/in", "-o", f"s3://{s3_bucket}/out", "--format",
                 "json", "--serial", *opts]) == 0  # fmt: skip
    return {"h5": src, "bucket": s3_bucket, "ref": f"s3://{s3_bucket}/out/a.h5.json"}


def _values(ref: str, **storage_options: Any) -> np.ndarray:
    group, name = PATH.rsplit("/", 1)
    with xr.open_dataset(ref, engine="h5sidecar", group=group,
                         storage_options=storage_options or None) as ds:  # fmt: skip
        return ds[name].values


# -- 1. no credentials ----------------------------------------------------------------------------
def test_no_credentials_is_a_clear_error_with_exit_2(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    bucket = indexed["bucket"]
    capsys.readouterr()
    assert main(["index", f"s3://{bucket}/in", "-o", f"s3://{bucket}/out2", "--serial"]) == 2
    err = capsys.readouterr().err
    assert "no AWS credentials found" in err and "Traceback" not in err
    for hint in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "anon=true", "instance metadata"):
        assert hint in err
    assert main(["inspect", indexed["ref"]]) == 2
    assert "no AWS credentials found" in capsys.readouterr().err
    with pytest.raises(CredentialsError, match="no AWS credentials found") as exc:
        _values(indexed["ref"])
    assert exc.value.kind == ErrorKind.NO_CREDENTIALS
    # the reader alone (sidecar given as refs, only the data path on S3) says the same
    with pytest.raises(CredentialsError, match="no AWS credentials"):
        resolve_store(f"s3://{bucket}/in/a.h5")


def test_anon_needs_no_credentials(no_aws: Path, s3_endpoint: str) -> None:
    store, _ = resolve_store("s3://b/k", {"anon": True, "endpoint_url": s3_endpoint})
    assert str(store.config.get("skip_signature")).lower() == "true"  # type: ignore[union-attr]


# -- 2. profiles ----------------------------------------------------------------------------------
def _profile_files(tmp: Path, s3_endpoint: str | None, name: str = "p") -> None:
    (tmp / "credentials").write_text(
        f"[{name}]\naws_access_key_id = PROFILEKEY\naws_secret_access_key = profile-secret\n")
    endpoint = f"endpoint_url = {s3_endpoint}\n" if s3_endpoint else ""
    (tmp / "config").write_text(f"[profile {name}]\nregion = us-east-1\n{endpoint}")
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp / "credentials")
    os.environ["AWS_CONFIG_FILE"] = str(tmp / "config")


def test_aws_profile_serves_listing_indexing_and_data_reads(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _profile_files(no_aws, s3_endpoint)  # the endpoint comes from the profile's config
    monkeypatch.setenv("AWS_PROFILE", "p")
    bucket = indexed["bucket"]
    assert main(["index", f"s3://{bucket}/in", "-o", f"s3://{bucket}/byprofile", "--serial",
                 "--format", "json"]) == 0  # fmt: skip
    ref = f"s3://{bucket}/byprofile/a.h5.json"
    np.testing.assert_array_equal(_values(ref), read_h5(indexed["h5"], PATH))
    store, _ = resolve_store(f"s3://{bucket}/in/a.h5")
    assert store.config["endpoint"] == s3_endpoint  # type: ignore[union-attr]
    creds = store.credential_provider()  # type: ignore[union-attr,misc]
    assert creds["access_key_id"] == "PROFILEKEY"
    assert "profile-secret" not in repr(store) + repr(store.credential_provider)  # type: ignore[union-attr]


def test_profile_storage_option_and_unknown_profile(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _profile_files(no_aws, None, name="team")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    ref = indexed["ref"]
    capsys.readouterr()
    assert main(["inspect", ref, "--storage-option", "profile=team", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"]["url"].endswith("/in/a.h5")
    np.testing.assert_array_equal(_values(ref, profile="team"), read_h5(indexed["h5"], PATH))
    assert main(["inspect", ref, "--storage-option", "profile=nope"]) == 2
    err = capsys.readouterr().err
    assert "AWS profile 'nope' does not exist" in err and "team" in err
    assert "Traceback" not in err and "ProfileNotFound" not in err
    monkeypatch.setenv("AWS_PROFILE", "nope")
    bucket = indexed["bucket"]
    assert main(["index", f"s3://{bucket}/in", "-o", f"s3://{bucket}/x", "--serial"]) == 2
    assert "AWS profile 'nope' does not exist" in capsys.readouterr().err


def test_explicit_profile_wins_over_environment_keys(
    no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _profile_files(no_aws, s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    by_env, _ = resolve_store("s3://b/k", {"endpoint_url": s3_endpoint})
    by_profile, _ = resolve_store("s3://b/k", {"profile": "p"})
    assert by_profile.credential_provider()["access_key_id"] == "PROFILEKEY"  # type: ignore[union-attr,misc]
    assert by_env is not by_profile


# -- 3. refreshing providers ---------------------------------------------------------------------
class _ShortLived:
    """A provider issuing keys valid for ``seconds`` (moto accepts any key)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.calls = seconds, 0
        self.issued = time.monotonic()

    def __call__(self) -> tuple[str, str, str, datetime]:
        self.calls += 1
        self.issued = time.monotonic()
        expiry = datetime.now(UTC) + timedelta(seconds=self.seconds)
        return f"KEY{self.calls}", f"secret-{self.calls}", f"token-{self.calls}", expiry


def test_provider_callable_is_refreshed_across_expiry(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    provider = _ShortLived(4.0)
    expected = read_h5(indexed["h5"], PATH)
    np.testing.assert_array_equal(_values(indexed["ref"], credential_provider=provider),
                                  expected)  # fmt: skip
    first = provider.calls
    assert 1 <= first <= 2  # one set of keys serves the sidecar and the data reads
    clear_caches()
    np.testing.assert_array_equal(_values(indexed["ref"], credential_provider=provider),
                                  expected)  # fmt: skip
    if time.monotonic() - provider.issued < provider.seconds - 1.0:
        # read while the keys were still valid (a loaded machine can take longer than their
        # life for the two reads, and then a new fetch is right)
        assert provider.calls == first  # still valid: not fetched again
    first = provider.calls
    time.sleep(max(0.0, provider.seconds - (time.monotonic() - provider.issued)) + 0.2)
    clear_caches()
    np.testing.assert_array_equal(_values(indexed["ref"], credential_provider=provider),
                                  expected)  # fmt: skip
    assert provider.calls > first  # expired: fetched again, and reads go on


def test_indexing_with_a_provider(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from h5sidecar.workflows import index_many

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    provider = _ShortLived(600)
    bucket = indexed["bucket"]
    report = index_many(f"s3://{bucket}/in", f"s3://{bucket}/byprovider", executor="serial",
                        format="json", storage_options={"credential_provider": provider})  # fmt: skip
    assert report.ok and report.counts["ok"] == 1
    assert provider.calls == 1
    got = _values(f"s3://{bucket}/byprovider/a.h5.json", credential_provider=provider)
    np.testing.assert_array_equal(got, read_h5(indexed["h5"], PATH))


def test_failing_provider_is_a_credentials_error(no_aws: Path) -> None:
    def broken() -> Any:
        raise OSError("token service down")

    with pytest.raises(CredentialsError, match="token service down"):
        RefreshingCredentials(broken).current()
    with pytest.raises(CredentialsError, match="no access key"):
        RefreshingCredentials(lambda: {"accessKeyId": ""}).current()
    with pytest.raises(TypeError, match="refusing to pickle"):
        pickle.dumps(RefreshingCredentials(broken))


# -- 3b. an Earthdata-style credentials endpoint ---------------------------------------------------
class _CredentialsEndpoint(BaseHTTPRequestHandler):
    token = "bearer-t0ken"
    lifetime = 4.0  # whole seconds in the answer, as Earthdata writes them
    issued = 0

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_response(401)
            self.end_headers()
            return
        type(self).issued += 1
        expiry = datetime.now(UTC) + timedelta(seconds=self.lifetime)
        body = json.dumps({"accessKeyId": f"ASIA{self.issued}", "secretAccessKey": "s",
                           "sessionToken": f"tok{self.issued}",
                           "expiration": expiry.strftime("%Y-%m-%d %H:%M:%S+00:00")}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def credentials_endpoint() -> Iterator[tuple[str, type[_CredentialsEndpoint]]]:
    handler = type("Endpoint", (_CredentialsEndpoint,), {"issued": 0})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/s3credentials", handler
    finally:
        server.shutdown()
        server.server_close()


def test_endpoint_credentials_refresh_and_pickle_without_secrets(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch,
    credentials_endpoint: tuple[str, type[_CredentialsEndpoint]],
) -> None:
    url, handler = credentials_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    with pytest.raises(CredentialsError, match=r"HTTP 401.*EARTHDATA_TOKEN"):
        EndpointCredentials(url).current()
    creds = EndpointCredentials(url, token=handler.token)
    assert creds.current().key == "ASIA1" and creds.current().expiry is not None
    expected = read_h5(indexed["h5"], PATH)
    np.testing.assert_array_equal(_values(indexed["ref"], credential_provider=creds), expected)
    # one fetch, or two when the read outlived the 3 s before the refresh (a loaded machine)
    before = creds.fetches
    assert before in (1, 2)
    time.sleep(max(0.0, creds.current().expiry.timestamp() - time.time()) + 0.2)  # type: ignore[union-attr]
    clear_caches()
    np.testing.assert_array_equal(_values(indexed["ref"], credential_provider=creds), expected)
    assert creds.fetches > before  # expired keys were replaced, not used
    assert handler.issued == creds.fetches  # every fetch got keys (the 401 issued none)
    blob = pickle.dumps(creds)
    assert handler.token.encode() not in blob and b"ASIA" not in blob
    monkeypatch.setenv("EARTHDATA_TOKEN", handler.token)  # the copy reads the token there
    assert pickle.loads(blob).current().key == f"ASIA{handler.issued}"


def test_dask_workers_fetch_their_own_endpoint_credentials(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch,
    credentials_endpoint: tuple[str, type[_CredentialsEndpoint]],
) -> None:
    """Workers with no AWS credentials read through an EndpointCredentials that travels in the
    task graph without its token (each worker reads EARTHDATA_TOKEN from its environment)."""
    distributed = pytest.importorskip("distributed")
    from h5sidecar.read.zarr.store import SidecarStore

    url, handler = credentials_endpoint
    handler.lifetime = 600.0
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("EARTHDATA_TOKEN", handler.token)  # the workers inherit it, nothing else
    store = SidecarStore(indexed["ref"], storage_options={"credential_provider": EndpointCredentials(url)})
    blob = pickle.dumps(store)
    assert handler.token.encode() not in blob and b"ASIA" not in blob
    group, name = PATH.rsplit("/", 1)
    ds = xr.open_dataset(store, engine="h5sidecar", group=group, chunks={})
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                 host="127.0.0.1", dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):  # fmt: skip
        total = client.compute(ds[name].astype("f8").sum(), sync=True)
        seen = client.run(lambda: os.environ.get("AWS_ACCESS_KEY_ID"))
    assert set(seen.values()) == {None}  # the workers had no keys of their own
    np.testing.assert_allclose(float(total), read_h5(indexed["h5"], PATH).astype("f8").sum())
    assert handler.issued >= 2  # this process and at least one worker fetched keys


def test_gateway_serves_an_s3_dest_with_aws_profile(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``h5sidecar serve s3://...`` with only AWS_PROFILE: listing DEST, reading sidecars and
    reading the granule's chunks all use the profile."""
    pytest.importorskip("starlette")
    import zarr

    from tests.gateway._http import gateway

    _profile_files(no_aws, s3_endpoint)
    monkeypatch.setenv("AWS_PROFILE", "p")
    with gateway(f"s3://{indexed['bucket']}/out") as (url, _app):
        root = zarr.open_group(f"{url}/zarr/a.h5/", mode="r")
        np.testing.assert_array_equal(root[PATH][...], read_h5(indexed["h5"], PATH))


def test_a_provider_failing_mid_run_is_a_credentials_error(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys expire and the provider cannot renew them: the read fails at once (no retries) with
    the provider's message, not as "access denied"."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    state = {"calls": 0}

    def once() -> tuple[str, str, None, datetime]:
        state["calls"] += 1
        if state["calls"] > 1:
            raise OSError("token service down")
        return "K", "S", None, datetime.now(UTC) + timedelta(seconds=1)

    group, name = PATH.rsplit("/", 1)

    def read() -> np.ndarray:
        # the sidecar with static keys, the granule with the provider: the data path fails
        with xr.open_dataset(indexed["ref"], engine="h5sidecar", group=group,
                             storage_options={"key": "k", "secret": "s"},
                             remote_options={"credential_provider": once}) as ds:  # fmt: skip
            return ds[name].values

    np.testing.assert_array_equal(read(), read_h5(indexed["h5"], PATH))
    time.sleep(1.1)
    clear_caches()
    with pytest.raises(CredentialsError, match="token service down") as exc:
        read()
    assert "reading s3://" in str(exc.value) and state["calls"] == 2  # no retries


def test_dask_indexing_tasks_carry_no_secrets(
    credentials_endpoint: tuple[str, type[_CredentialsEndpoint]],
) -> None:
    """What ``index --dask`` sends to the scheduler: options without keys, providers without
    tokens (the workers resolve their own)."""
    from h5sidecar.workflows.index._dask import DaskExecutor
    from h5sidecar.workflows.index._index_one import IndexOptions

    sent: list[bytes] = []

    class _Client:  # records what would travel to the scheduler
        def submit(self, *args: Any, **kwargs: Any) -> Any:
            sent.append(pickle.dumps(args))
            return type("F", (), {"add_done_callback": lambda self, cb: None})()

    url, handler = credentials_endpoint
    options = IndexOptions(storage_options={
        "endpoint_url": "http://127.0.0.1:9", "key": "AKIDSECRETKEY", "secret": "s3cr3t-v4lue",
        "client_kwargs": {"region_name": "us-east-1"},
        "credential_provider": EndpointCredentials(url, token=handler.token)})  # fmt: skip
    DaskExecutor(_Client()).submit(print, "s3://b/a.h5", "s3://b/out/a.h5.parq", options)
    (blob,) = sent
    for secret in (b"AKIDSECRETKEY", b"s3cr3t-v4lue", handler.token.encode()):
        assert secret not in blob
    args = pickle.loads(blob)[2]  # (run_with_retries, fn, task args, retries, backoff)
    kept = args[2].storage_options
    assert kept["endpoint_url"] == "http://127.0.0.1:9" and "key" not in kept
    assert kept["client_kwargs"] == {"region_name": "us-east-1"}
    assert isinstance(kept["credential_provider"], EndpointCredentials)


def test_gateway_dest_listing_outlives_short_lived_keys(
    indexed: dict[str, Any], no_aws: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running gateway lists DEST with the provider's current keys, not the first ones."""
    pytest.importorskip("starlette")
    from h5sidecar.gateway._dest import DestIndex

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    provider = _ShortLived(2.0)
    dest = DestIndex(f"s3://{indexed['bucket']}/out",
                     storage_options={"credential_provider": provider})  # fmt: skip
    # the keys are renewed 1.5 s after they are issued: on a loaded machine a listing can take
    # that long, so compare the keys' numbers rather than expect KEY1 then KEY2
    assert dest.page(dest.snapshot(max_age=0), "", 10) == ["a.h5"]
    first = int(dest.fs.key.removeprefix("KEY"))
    time.sleep(2.2)  # every key issued so far has expired
    assert dest.page(dest.snapshot(max_age=0), "", 10) == ["a.h5"]
    assert first < int(dest.fs.key.removeprefix("KEY")) <= provider.calls
