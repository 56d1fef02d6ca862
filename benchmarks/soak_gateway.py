"""Soak the HTTP gateway with many concurrent, slow and abusive clients and a blocking source.

``h5sidecar serve DEST`` runs in its own process over a DEST holding:

* ``--granules`` good granules (small HDF5 files, chunk GETs must answer 200 with h5py's bytes);
* one granule whose source was replaced by a FIFO after indexing (a source that would block a
  reader forever: must answer 409 at once, and never hold the other granules up);
* planted sidecars (a 500,000,000-position grid, a 10**18 grid, a huge dtype, a NUL in the
  source URL, a reference past the end of the file): every route must answer 422.

``--clients`` clients (default 2,000) run concurrently on one event loop, each sending
``--rounds`` requests over fresh connections: good chunks, the blocking granule, planted
sidecars, bad paths (``%ff%fe``, traversal: 400), and a share of *slow* clients that trickle
their request over a few seconds or read the answer in small pieces with pauses.  The whole run
is bounded by ``--deadline`` seconds; each request by ``--timeout``.

Reported: cases tried / held (the expected status in time, or 503: the clean overload answer
beyond ``max_connections``) / failed (anything else: a wrong status, a 500, a timeout, a reset), the server's peak RSS (``VmHWM``) and its RSS at the end,
the longest time to a clean error, the p50/p99 latency of the good chunks.

Run: ``python benchmarks/soak_gateway.py [--clients 2000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import h5py
import numpy as np

VAR = "values"
N, CHUNK = 4000, 1000


# -- DEST ------------------------------------------------------------------------------------------
def build_dest(root: Path, n_good: int) -> tuple[Path, dict[str, bytes]]:
    """Sources, sidecars and planted sidecars under ``root``; chunk bytes h5py reads."""
    import h5sidecar
    from h5sidecar.references import write_json

    src, dest = root / "src", root / "dest"
    src.mkdir()
    dest.mkdir()
    truth: dict[str, bytes] = {}
    for i in range(n_good + 1):
        path = src / f"g{i}.h5"
        with h5py.File(path, "w") as f:
            f.create_dataset(VAR, data=np.arange(N, dtype="<i4") + i, chunks=(CHUNK,))
        write_json(h5sidecar.index_granule(str(path)), dest / f"g{i}.h5.json")
        with h5py.File(path) as f:
            for c in range(N // CHUNK):
                truth[f"g{i}.h5/{VAR}/{c}"] = f[VAR][c * CHUNK : (c + 1) * CHUNK].tobytes()
    # the last granule's source becomes a FIFO: a reader that opened it blocking would hang
    blocking = src / f"g{n_good}.h5"
    blocking.unlink()
    os.mkfifo(blocking)
    doc = json.loads((dest / "g0.h5.json").read_text())
    for name, planted in _planted(doc).items():
        (dest / f"{name}.h5.json").write_text(json.dumps(planted))
    return dest, truth


def _planted(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    def zarray(**changes: Any) -> dict[str, Any]:
        d = copy.deepcopy(doc)
        z = {**json.loads(d["refs"][f"{VAR}/.zarray"]), **changes}
        d["refs"][f"{VAR}/.zarray"] = json.dumps(z)
        zm = json.loads(d["refs"][".zmetadata"])
        zm["metadata"][f"{VAR}/.zarray"] = z
        d["refs"][".zmetadata"] = json.dumps(zm)
        return d

    nul = copy.deepcopy(doc)
    url = nul["h5sidecar"]["source"]["url"] + "\x00x"
    for k, v in nul["refs"].items():
        if isinstance(v, list):
            nul["refs"][k] = [url, *v[1:]]
    nul["h5sidecar"]["urls"] = [url]
    past = copy.deepcopy(doc)
    past["refs"][f"{VAR}/0"] = [doc["h5sidecar"]["source"]["url"], 10**9, 4000]
    return {
        "p_grid5e8": zarray(shape=[500_000_000], chunks=[1]),
        "p_grid1e18": zarray(shape=[10**18], chunks=[1]),
        "p_dtype": zarray(dtype="|V99999999999"),
        "p_nul": nul,
        "p_past": past,
    }


# -- cases -----------------------------------------------------------------------------------------
def cases(n_good: int) -> list[tuple[str, str, set[int]]]:
    """``(kind, raw path, expected statuses)``."""
    out: list[tuple[str, str, set[int]]] = []
    for i in range(n_good):
        for c in range(N // CHUNK):
            out += [("good", f"/zarr/g{i}.h5/{VAR}/{c}", {200})] * 3
    blocked = f"g{n_good}.h5"
    out += [("blocking", f"/zarr/{blocked}/{VAR}/{c}", {409}) for c in range(N // CHUNK)] * 4
    for name in ("p_grid5e8", "p_grid1e18", "p_dtype", "p_nul"):
        for route in (f"/zarr/{name}.h5/.zmetadata", f"/zarr3/{name}.h5/{VAR}/zarr.json",
                      f"/zarr/{name}.h5/{VAR}/0", f"/api/granules/{name}.h5",
                      f"/quicklook.png?granule={name}.h5&variable={VAR}"):  # fmt: skip
            out.append(("planted", route, {422}))
    out += [("planted", f"/zarr/p_past.h5/{VAR}/0", {422})] * 2
    out += [("bad_path", "/zarr/g0.h5/%ff%fe", {400}), ("bad_path", "/zarr/%2e%2e/x", {400}),
            ("bad_path", "/zarr/g0.h5/../../etc/passwd", {400, 404})]  # fmt: skip
    return out


async def one_request(port: int, path: str, *, slow: str, timeout: float) -> tuple[int, float]:
    """GET ``path``; ``slow``: "" | "send" (request trickled) | "read" (answer read slowly).
    Returns (status, seconds); status 0 = timeout, -1 = connection error."""
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
                if slow == "send":
                    for i in range(0, len(req), 8):
                        writer.write(req[i : i + 8])
                        await writer.drain()
                        await asyncio.sleep(0.15)
                else:
                    writer.write(req)
                    await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                while True:
                    part = await reader.read(256 if slow == "read" else 65536)
                    if not part:
                        break
                    if slow == "read":
                        await asyncio.sleep(0.05)
                return status, time.perf_counter() - t0
            finally:
                writer.close()
    except TimeoutError:
        return 0, time.perf_counter() - t0
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        return -1, time.perf_counter() - t0


async def soak(port: int, args: argparse.Namespace, all_cases: list[tuple[str, str, set[int]]]
               ) -> list[dict[str, Any]]:  # fmt: skip
    rng = random.Random(0)
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + args.deadline

    async def client(i: int) -> None:
        for _ in range(args.rounds):
            if time.monotonic() > deadline:
                return
            kind, path, expected = rng.choice(all_cases)
            slow = "" if rng.random() >= args.slow_share else rng.choice(["send", "read"])
            status, seconds = await one_request(port, path, slow=slow, timeout=args.timeout)
            # 503 is the gateway's clean overload answer (max_connections / max_pending)
            held = status in expected or status == 503
            results.append({"kind": kind, "slow": slow, "path": path, "status": status,
                            "seconds": seconds, "held": held})  # fmt: skip

    await asyncio.gather(*(client(i) for i in range(args.clients)))
    return results


# -- the server ------------------------------------------------------------------------------------
def start_server(dest: Path, allow: Path, port: int, env: dict[str, str], log: Path
                 ) -> subprocess.Popen:  # fmt: skip
    import httpx

    # the log goes to a file: a pipe nobody reads would block the server once it is full
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "h5sidecar.cli", "serve", str(dest), "--port", str(port),
             "--allow", str(allow)], env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the gateway did not start")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_of(pid: int) -> tuple[int, int]:
    """(VmHWM, VmRSS) of ``pid`` in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    return out["VmHWM"], out["VmRSS"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=2000, help="concurrent clients (2000)")
    p.add_argument("--rounds", type=int, default=3, help="requests per client (3)")
    p.add_argument("--granules", type=int, default=8, help="good granules (8)")
    p.add_argument("--slow-share", type=float, default=0.1, help="share of slow clients (0.1)")
    p.add_argument("--timeout", type=float, default=60.0, help="client timeout per request (s)")
    p.add_argument("--deadline", type=float, default=120.0, help="bound of the whole run (s)")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * args.clients + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the server inherits it
    port = args.port or _free_port()
    root = Path(tempfile.mkdtemp(prefix="h5sidecar-soak-"))
    proc = None
    try:
        dest, truth = build_dest(root, args.granules)
        env = {**os.environ, "H5SIDECAR_REQUEST_TIMEOUT": "5", "H5SIDECAR_SHUTDOWN_SECONDS": "3"}
        proc = start_server(dest, root / "src", port, env, root / "server.log")
        _, base_rss = rss_of(proc.pid)
        all_cases = cases(args.granules)
        t0 = time.perf_counter()
        results = asyncio.run(soak(port, args, all_cases))
        wall = time.perf_counter() - t0
        # the good granules still answer right, with h5py's bytes
        import httpx

        wrong, after = 0, time.monotonic()
        with httpx.Client(timeout=60) as http:
            for k, v in list(truth.items())[:8]:
                try:
                    wrong += http.get(f"http://127.0.0.1:{port}/zarr/{k}").content != v
                except httpx.TransportError as exc:
                    print(f"after the soak: GET {k} failed: {exc!r}", file=sys.stderr)
                    wrong += 1
        recovered = time.monotonic() - after
        hwm, rss = rss_of(proc.pid)
        t1 = time.monotonic()
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            print("the gateway did not stop within 60 s of SIGTERM", file=sys.stderr)
        stop_seconds = time.monotonic() - t1
        log_lines = (root / "server.log").read_text(errors="replace").splitlines()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)

    held = sum(r["held"] for r in results)
    failed = [r for r in results if not r["held"]]
    errors = [r["seconds"] for r in results if r["held"] and r["kind"] != "good"]
    good = sorted(r["seconds"] for r in results if r["kind"] == "good" and not r["slow"])
    summary = {
        "clients": args.clients, "rounds": args.rounds, "slow_share": args.slow_share,
        "tried": len(results), "held": held, "failed": len(failed),
        "failed_by_status": dict(Counter(str(r["status"]) for r in failed)),
        "by_kind": dict(Counter(r["kind"] for r in results)),
        "overload_503": sum(r["status"] == 503 for r in results),
        "wall_seconds": round(wall, 1),
        "server_rss_start_mb": round(base_rss / 2**20, 1),
        "server_peak_rss_mb": round(hwm / 2**20, 1), "server_rss_end_mb": round(rss / 2**20, 1),
        "longest_clean_error_s": round(max(errors, default=0.0), 3),
        "longest_clean_error_fast_client_s": round(max(
            (r["seconds"] for r in results if r["held"] and r["kind"] != "good"
             and not r["slow"]), default=0.0), 3),
        "good_p50_s": round(statistics.median(good), 3) if good else None,
        "good_p99_s": round(good[int(0.99 * (len(good) - 1))], 3) if good else None,
        "wrong_bytes_after": wrong,
        "post_check_seconds": round(recovered, 2),
        "sigterm_to_exit_s": round(stop_seconds, 2),
        "server_log_lines": len(log_lines),
        "server_tracebacks": sum("Traceback" in line for line in log_lines),
    }  # fmt: skip
    print(json.dumps(summary, indent=1))
    if failed:
        print("first failures:", json.dumps(failed[:5], indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "failed": failed[:100]}, indent=1))
    return 0 if not failed and not wrong and stop_seconds < 60 else 1


if __name__ == "__main__":
    sys.exit(main())
