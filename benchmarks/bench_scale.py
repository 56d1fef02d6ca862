"""Every command at 10k, 100k, 1M granules: time, peak RSS and how they grow with N.

For each size a synthetic but valid DEST is made cheaply (:mod:`benchmarks._scale_data`: one
real granule hard-linked under N names, one real index run, sidecars and record rows copied
from it), then each operation runs the public CLI (``python -m h5sidecar.cli ...``) in its own
child process, from the repository root so that the code measured is this checkout's:

- ``index no-op``: ``index SRC -o DEST`` with every sidecar up to date;
- ``report --json``, ``prune`` (dry run), ``cube`` (into a folder beside DEST);
- ``cube --append`` with nothing new (DEST's record asked what changed since the cube), and
  ``cube --append --recheck`` (DEST listed, every member's sidecar stamp compared);
- ``cube --append 1``: one new day indexed into DEST (``index --url-list``, not timed), then
  ``cube --append`` (timed), which writes it after the cube's members; the cube's length is
  checked (the DEST, one granule longer, is made anew by the next run);
- ``catalog``, then ``catalog no-op`` (the same again, nothing changed);
- ``serve``: ``serve DEST [--stac STAC]`` until ``/healthz`` answers (startup), then one
  ``/api/granules`` page, one ``/api/granules/{name}`` lookup and a STAC bbox+datetime search
  (``/stac/search``, the median of :data:`SEARCHES`; only when ``catalog`` finished);
- ``index 1%``: 1% of the sources replaced by new copies (new inodes), then ``index`` again
  (those are re-indexed for real; the DEST is made anew by the next run).

Peak RSS is the child's ``ru_maxrss`` from ``os.wait4`` (its largest process: the main one, or
a worker of ``index``).  An operation killed at the cap (``--cap``, 600 s) is reported "over
cap" and not run at the larger sizes.  The growth exponent between two sizes is
``log(t2 / t1) / log(n2 / n1)`` (1 is linear; 0 flat) for time and for RSS.

Run with ``python benchmarks/run.py scale [--sizes 10000 100000] [--cap 600]``; the data go
to ``benchmarks/data/scale/N/`` (git-ignored; a 1M DEST is ~6 GB of JSON sidecars).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import _common as c
from benchmarks import _scale_data as data

ROOT = c.BENCH_DIR.parent
SIZES = (10_000, 100_000)
CAP_SECONDS = 600.0
#: STAC searches timed per size (the median is reported).
SEARCHES = 20
#: A bbox+datetime search that matches the first days of the synthetic collection.
SEARCH = "bbox=-180,-90,180,90&datetime=2020-01-01T00:00:00Z/2020-01-10T00:00:00Z&limit=10"
OPS = ("index no-op", "report --json", "prune", "cube", "cube --append",
       "cube --append --recheck", "cube --append 1", "catalog", "catalog no-op", "serve", "index 1%")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                   help="numbers of granules (default 10000 100000)")
    p.add_argument("--cap", type=float, default=CAP_SECONDS,
                   help="seconds an operation may take before it is stopped (default 600)")
    p.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS), metavar="OP",
                   # argparse %-formats help: "index 1%" must be escaped
                   help=f"operations to run (default all: {', '.join(OPS)})".replace("%", "%%"))
    p.add_argument("--data", type=Path, default=c.DATA_DIR / "scale",
                   help="where the synthetic DESTs go")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result table into benchmarks/README.md")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


def wait_rss(proc: subprocess.Popen[bytes], timeout: float | None) -> float | None:
    """Wait for ``proc`` (at most ``timeout`` s) through ``os.wait4``: its own peak RSS in MB
    (``ru_maxrss``; RUSAGE_CHILDREN would be the largest of every child so far).

    Raises
    ------
    subprocess.TimeoutExpired
    """
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG if end is not None else 0)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_maxrss / 1024
        if end is not None and time.monotonic() > end:
            raise subprocess.TimeoutExpired(proc.args, timeout or 0)
        time.sleep(0.02)


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> float | None:
    os.killpg(proc.pid, sig)
    try:
        return wait_rss(proc, 30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return wait_rss(proc, None)


#: Runs ``argv[2:]`` and writes its peak RSS (``ru_maxrss``, KB) to the file ``argv[1]``.  A
#: forked child starts with its parent's resident pages and ``ru_maxrss`` survives ``exec``:
#: started from this benchmark (which holds the data it made, ~260 MB at 1,000,000), every
#: command would measure at least that; started from this small process, only its own.
LAUNCHER = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_measured(argv: list[str], cap: float) -> dict[str, Any]:
    """Run ``argv`` from the repository root (through :data:`LAUNCHER`); its seconds, peak
    RSS and exit code, or ``"over cap"`` when it had to be stopped."""
    with open(os.devnull, "wb") as null, _scratch() as err, \
            tempfile.NamedTemporaryFile() as peak:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, peak.name, *argv], cwd=ROOT,
                                env=data.command_env(), stdout=null, stderr=err,
                                start_new_session=True)
        try:
            wait_rss(proc, cap)
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
            peak.seek(0)
            rss = int(peak.read()) / 1024
        except subprocess.TimeoutExpired:
            rss = _stop(proc)  # the launcher's: at least this process's, as it was forked
            status = "over cap"
        seconds = time.perf_counter() - start
        out: dict[str, Any] = {"seconds": seconds, "rss_mb": rss, "status": status}
        if status.startswith("exit"):
            err.seek(0)
            out["stderr"] = err.read()[-2000:].decode(errors="replace")
    return out


def _scratch() -> Any:
    return tempfile.TemporaryFile()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 60) -> tuple[int, float, bytes]:
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
            return r.status, time.perf_counter() - start, body
    except urllib.error.HTTPError as e:
        return e.code, time.perf_counter() - start, e.read()


def run_serve(dest: Path, stac: Path | None, cap: float) -> dict[str, Any]:
    """``serve``: startup to a 200 ``/healthz``, a granules page, a lookup and searches."""
    port = _free_port()
    argv = data.cli("serve", str(dest), "--host", "127.0.0.1", "--port", str(port),
                    *(["--stac", str(stac)] if stac is not None else []))
    base = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=data.command_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    out: dict[str, Any] = {"status": "ok"}
    try:
        while True:
            try:
                if _get(f"{base}/healthz", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:  # it exited (an error at startup)
                proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode is not None or time.perf_counter() - start > cap:
                out["status"] = "over cap" if proc.returncode is None else "exit early"
                return out
            time.sleep(0.05)
        out["startup_s"] = time.perf_counter() - start
        code, seconds, body = _get(f"{base}/api/granules")
        out["granules_page"] = {"code": code, "seconds": seconds, "bytes": len(body)}
        key = data.name(0)
        code, seconds, _ = _get(f"{base}/api/granules/{key}")
        out["lookup"] = {"code": code, "seconds": seconds}
        if stac is not None:
            runs = [_get(f"{base}/stac/search?{SEARCH}") for _ in range(SEARCHES)]
            code, _, body = runs[-1]
            found = len(json.loads(body).get("features", [])) if code == 200 else None
            out["search"] = {"code": code, "items": found,
                             "p50_ms": 1000 * statistics.median(r[1] for r in runs)}
    finally:
        out["seconds"] = time.perf_counter() - start
        out["rss_mb"] = _stop(proc, signal.SIGINT) if proc.returncode is None else None
    return out


def _touch_one_percent(src: Path, n: int) -> int:
    """Replace 1% of the sources (:func:`~benchmarks._scale_data.touched`, on inodes of their
    own) by new copies (new inodes: a changed identity)."""
    template = src.parent / "granule.nc"
    touched = 0
    for i in data.touched(n):
        path = src / data.name(i)
        tmp = path.with_suffix(".tmp")
        shutil.copyfile(template, tmp)
        os.replace(tmp, path)
        touched += 1
    return touched


def run_size(n: int, args: argparse.Namespace, over: dict[str, int]) -> dict[str, Any]:
    """Every operation at ``n`` granules (those over the cap at a smaller size skipped)."""
    root = args.data / str(n)
    start = time.perf_counter()
    src, dest = data.make_dest(root, n)
    made = time.perf_counter() - start
    print(f"{n} granules: data ready in {made:.0f} s", flush=True)
    work = root / "out"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    stac = work / "stac"
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "index no-op": lambda: run_measured(data.cli("index", str(src), "-o", str(dest),
                                                     "--format", "json"), args.cap),
        "report --json": lambda: run_measured(data.cli("report", str(dest), "--json"),
                                              args.cap),
        "prune": lambda: run_measured(data.cli("prune", str(dest), "--json"), args.cap),
        "cube": lambda: run_measured(data.cli("cube", str(dest), "-o",
                                              str(work / "cube.parq")), args.cap),
        "cube --append": lambda: run_measured(data.cli(
            "cube", str(dest), "-o", str(work / "cube.parq"), "--append"), args.cap),
        "cube --append --recheck": lambda: run_measured(data.cli(
            "cube", str(dest), "-o", str(work / "cube.parq"), "--append", "--recheck"),
            args.cap),
        "cube --append 1": lambda: _append_one(dest, n, root, work / "cube.parq", args.cap),
        "catalog": lambda: run_measured(data.cli("catalog", str(dest), "-o", str(stac)),
                                        args.cap),
        "catalog no-op": lambda: run_measured(data.cli("catalog", str(dest), "-o", str(stac)),
                                              args.cap),
        "serve": lambda: run_serve(dest, stac if catalog_ok() else None, args.cap),
        "index 1%": lambda: _index_one_percent(src, dest, n, root, args.cap),
    }
    results: dict[str, Any] = {"generate_s": made}

    def catalog_ok() -> bool:
        return bool(results.get("catalog", {}).get("status") == "ok")

    for op in OPS:
        if op not in args.ops:
            continue
        if op in over:
            results[op] = {"status": f"skipped: over cap at {over[op]}"}
            continue
        if op.startswith("cube --append") and results.get("cube", {}).get("status") != "ok":
            results[op] = {"status": "skipped: no cube"}
            continue
        if op == "catalog no-op" and not catalog_ok():
            results[op] = {"status": "skipped: no catalog"}
            continue
        if op == "index 1%" and over.get("index no-op") == n:
            # the listing and comparison it starts with is the no-op run, already over the cap
            results[op] = {"status": "skipped: index no-op over cap"}
            continue
        results[op] = steps[op]()
        r = results[op]
        print(f"  {op}: {r.get('seconds', 0):.1f} s, {r.get('rss_mb') or 0:.0f} MB, "
              f"{r['status']}", flush=True)
        if r["status"] == "over cap":
            over[op] = n
    return results


def _index_one_percent(src: Path, dest: Path, n: int, root: Path, cap: float
                       ) -> dict[str, Any]:
    touched = _touch_one_percent(src, n)
    (root / "done").unlink(missing_ok=True)  # DEST no longer the template's: made anew next time
    out = run_measured(data.cli("index", str(src), "-o", str(dest), "--format", "json"), cap)
    out["touched"] = touched
    return out


def _append_one(dest: Path, n: int, root: Path, cube: Path, cap: float) -> dict[str, Any]:
    """Granule ``n`` (the day after the last) indexed into DEST, then ``cube --append``."""
    from datetime import date, timedelta

    from h5sidecar.sample._collection import write_daily_granule

    (root / "done").unlink(missing_ok=True)  # DEST gains a granule: made anew next time
    extra = root / "extra"
    extra.mkdir(exist_ok=True)
    listed = root / "extra.txt"
    day = date(2020, 1, 1) + timedelta(days=n)  # noon: time n + 0.5, after granule n - 1
    listed.write_text(f"{write_daily_granule(extra / data.name(n), day)}\n")
    subprocess.run(data.cli("index", "--url-list", str(listed), "-o", str(dest), "--format",
                            "json", "--serial"), cwd=ROOT, env=data.command_env(), check=True,
                   capture_output=True)
    out = run_measured(data.cli("cube", str(dest), "-o", str(cube), "--append"), cap)
    zmeta = json.loads((cube / ".zmetadata").read_text())
    length = zmeta["metadata"]["time/.zarray"]["shape"][0]
    if out["status"] == "ok" and length != n + 1:
        out["status"] = f"the cube has {length} days, not {n + 1}"
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    over: dict[str, int] = {}
    sizes = sorted(args.sizes)
    return {"sizes": sizes, "cap_s": args.cap, "environment": c.environment(),
            "results": {str(n): run_size(n, args, over) for n in sizes}}


def _exponent(a: float | None, b: float | None, n1: int, n2: int) -> str:
    if not a or not b or a <= 0 or b <= 0:
        return "-"
    return f"{math.log(b / a) / math.log(n2 / n1):.2f}"


def _cell(r: dict[str, Any]) -> str:
    status = str(r.get("status", "-"))
    if status != "ok" and not status.startswith("exit"):
        return status
    text = f"{r['seconds']:.1f} s, {r['rss_mb']:.0f} MB"
    return text if status == "ok" else f"{text} ({status})"


def _serve_cell(r: dict[str, Any]) -> str:
    if "startup_s" not in r:
        return str(r.get("status", "-"))
    page = r["granules_page"]
    text = (f"start {r['startup_s']:.1f} s; page {page['code']} {page['seconds']:.2f} s; "
            f"lookup {r['lookup']['code']} {1000 * r['lookup']['seconds']:.0f} ms")
    if "search" in r:
        found = r["search"].get("items")
        text += (f"; search {r['search']['code']} ({found} items) "
                 f"{r['search']['p50_ms']:.0f} ms p50")
    return text + f"; {r['rss_mb']:.0f} MB"


def report(results: dict[str, Any]) -> str:
    sizes = results["sizes"]
    per = results["results"]
    header = ["operation", *(f"{n:,}" for n in sizes),
              *(f"growth {a:,}->{b:,} (time, RSS)" for a, b in itertools.pairwise(sizes))]
    rows = []
    for op in OPS:
        cells = [per[str(n)].get(op, {}) for n in sizes]
        if not any(cells):
            continue
        shown = [_serve_cell(x) if op == "serve" else _cell(x) for x in cells]
        growth = []
        for (a, b), (n1, n2) in zip(itertools.pairwise(cells), itertools.pairwise(sizes),
                                    strict=True):
            ok = a.get("status") == b.get("status") == "ok"
            t1, t2 = (a.get("startup_s"), b.get("startup_s")) if op == "serve" else (
                a.get("seconds"), b.get("seconds"))
            growth.append(f"{_exponent(t1, t2, n1, n2)}, "
                          f"{_exponent(a.get('rss_mb'), b.get('rss_mb'), n1, n2)}"
                          if ok else "-")
        rows.append([op, *shown, *growth])
    env = results["environment"]
    head = (f"{', '.join(f'{n:,}' for n in sizes)} synthetic granules, cap "
            f"{results['cap_s']:.0f} s an operation, {env.get('cpus', '?')} CPUs "
            f"(commit {env.get('commit', '?')}).")
    return head + "\n\n" + c.markdown_table(header, rows)


def main(args: argparse.Namespace) -> None:
    c.run_and_report("scale", args, run, report)
