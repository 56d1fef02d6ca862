"""``h5sidecar serve`` as a user runs it: a separate process on a free port of 127.0.0.1,
sources on the moto S3 server, the token from the environment, a graceful shutdown on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import h5py
import httpx
import numpy as np
import zarr

from tests.conftest import free_port
from tests.gateway._http import SMALL, Corpus, http_corpus, wait_healthy

__all__ = ["http_corpus"]


def test_serve_command(http_corpus: Corpus, tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    token = "t-" + uuid.uuid4().hex
    env = {**os.environ, "H5SIDECAR_TOKEN": token}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "h5sidecar.cli", "serve", http_corpus.dest, "--port", str(port),
             "--storage-option", f"endpoint_url={http_corpus.endpoint}", "-v"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(proc, url, log)
            chunk = f"{url}/zarr/{SMALL}/gt1l/heights/h_ph/0"
            assert httpx.get(chunk).status_code == 401
            auth = {"Authorization": f"Bearer {token}"}
            r = httpx.get(chunk, headers=auth)
            with h5py.File(http_corpus.local[SMALL]) as f:
                assert r.content == bytes(f["gt1l/heights/h_ph"].id.read_direct_chunk((0,))[1])
                root = zarr.open_group(f"{url}/zarr/{SMALL}/", mode="r",
                                       storage_options={"headers": auth})  # fmt: skip
                delta_time = root["gt1l/heights/delta_time"]
                assert isinstance(delta_time, zarr.Array)
                np.testing.assert_array_equal(delta_time[...],
                                              f["gt1l/heights/delta_time"][...])  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    text = log.read_text()
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells why it ended
    assert code in (0, -signal.SIGTERM), text
    assert "Application shutdown complete" in text
    assert f"http://127.0.0.1:{port}/" in text  # it says where it listens
    assert token not in text
