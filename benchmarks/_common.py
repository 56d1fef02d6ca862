"""Shared pieces of the benchmark scripts: sample data, timing, I/O counters, tables, results."""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
DATA_DIR = BENCH_DIR / "data"  # git-ignored
RESULTS_DIR = BENCH_DIR / "results"  # git-ignored
S3_ROOT = DATA_DIR / "s3"  # served by s3server.py: one subfolder per bucket
BUCKET = "bench"
# Stored bytes per photon of the ATL03-like sample at benchmark sizes (measured; metadata and
# the segment-rate groups amortise), used to pick ``photons`` for a target file size.
BYTES_PER_PHOTON = 40.0


#: ``--generator`` choices: the package's sample, and benchmarks/_granule_alt.py's layout
GENERATORS = ("atl03", "alt")


def sample_granule(size_mb: float, generator: str = "atl03") -> Path:
    """The ATL03-like benchmark granule of about ``size_mb`` MB (written once, then reused):
    ``generator="atl03"`` is ``h5sidecar.sample.write_atl03_like``, ``"alt"`` the structurally
    different ``benchmarks._granule_alt.write_atl03_alt``."""
    from h5sidecar.sample import granule_name, write_atl03_like

    folder = S3_ROOT / BUCKET / (f"{int(size_mb)}mb" + ("" if generator == "atl03" else
                                                        f"-{generator}"))
    path = folder / granule_name(0)
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        print(f"writing {path.name} ({generator}, ~{size_mb:g} MB) ...", flush=True)
        if generator == "alt":
            from benchmarks._granule_alt import write_atl03_alt

            write_atl03_alt(tmp, size_mb=size_mb, seed=0)
        else:
            photons = max(int(size_mb * 1e6 / BYTES_PER_PHOTON), 1000)
            write_atl03_like(tmp, photons=photons, seed=0)
        tmp.rename(path)  # an interrupted write never leaves a half granule behind
    return path


def s3_key(path: Path) -> str:
    """``bucket/key`` of a file under :data:`S3_ROOT`."""
    return path.relative_to(S3_ROOT).as_posix()


@dataclass
class Measurement:
    """Wall times of repeated runs of one case, with what it moved."""

    case: str
    where: str
    times: list[float] = field(default_factory=list)
    requests: int | None = None
    bytes: int | None = None
    note: str = ""
    cpu: list[float] = field(default_factory=list)  # process CPU time of each run
    in_a_row: int | None = None  # the most requests one after another (server's counter)

    @property
    def median(self) -> float:
        return statistics.median(self.times) if self.times else float("nan")

    def to_dict(self) -> dict[str, Any]:
        cpu = statistics.median(self.cpu) if self.cpu else None
        return asdict(self) | {"median_s": self.median, "median_cpu_s": cpu}


def repeat(fn: Callable[[], Any], repeats: int, cpu: list[float] | None = None
           ) -> tuple[list[float], Any]:
    """Run ``fn`` ``repeats`` times; wall times and the last result (each run's process CPU
    time is appended to ``cpu`` when given).  A GC before each run keeps one run's garbage
    from being collected on the next one's clock."""
    times, result = [], None
    for _ in range(repeats):
        result = None
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    return times, result


def _proc_io() -> dict[str, int] | None:
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return None
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


@contextmanager
def local_io() -> Iterator[dict[str, int | None]]:
    """Read syscalls and bytes read by this process inside the block (Linux ``/proc/self/io``;
    page-cache hits count too, which is what "bytes moved" means for a local file)."""
    out: dict[str, int | None] = {"requests": None, "bytes": None}
    before = _proc_io()
    yield out
    after = _proc_io()
    if before and after:
        out["requests"] = after["syscr"] - before["syscr"]
        out["bytes"] = after["rchar"] - before["rchar"]


def dir_size(path: Path) -> int:
    """Bytes of a file, or of every file below a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def environment() -> dict[str, Any]:
    """Machine and library versions, stored with every result."""
    versions = {}
    for dist in ("h5sidecar", "h5py", "kerchunk", "fsspec", "s3fs", "obstore", "zarr", "numpy",
                 "aiohttp"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "versions": versions,
            "commit": _git_commit(), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _git_commit() -> str | None:
    """The checked-out commit, with ``+dirty`` when the package has uncommitted changes: the
    numbers belong to that code, not to a release."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCH_DIR, capture_output=True, text=True,
                              check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "../h5sidecar")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def save_results(name: str, results: dict[str, Any]) -> Path:
    """Write ``results`` to ``benchmarks/results/<name>-<time>.json``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    return path


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def replace_section(readme: Path, marker: str, text: str) -> None:
    """Replace what is between ``<!-- marker:start -->`` and ``<!-- marker:end -->``."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    doc = readme.read_text()
    if start not in doc or end not in doc:
        raise SystemExit(f"{readme} has no {start} ... {end} markers to put the table between")
    head, rest = doc.split(start, 1)
    readme.write_text(f"{head}{start}\n{text}\n{end}{rest.split(end, 1)[1]}")


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # unreachable; keeps type checkers happy


def main_for(
    name: str,
    args: Any,
    run: Callable[[Any], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
    readme: Path,
) -> dict[str, Any]:
    """The shared ``main`` of a benchmark: run it (or load ``--from-results``), print the report,
    and with ``--update-readme`` replace the ``<name>-results`` section of ``readme``."""
    if args.from_results:
        path = args.from_results
        results = json.loads(path.read_text())
    else:
        results = run(args)
        path = save_results(name, results)
    text = report(results)
    print("\n" + text + f"\n\nresults: {path}")
    if args.update_readme:
        replace_section(readme, f"{name}-results", text)
        print(f"updated {readme}")
    return results


def run_and_report(
    name: str,
    args: Any,
    run: Callable[[Any], dict[str, Any]],
    report: Callable[[dict[str, Any]], str],
) -> dict[str, Any]:
    """The ``main`` of a benchmark: run it (or load ``--from-results``), save the results, print
    the report and, with ``--update-readme``, replace the ``name`` section of the README."""
    if args.from_results:
        results = json.loads(args.from_results.read_text())
    else:
        results = run(args)
        print(f"results: {save_results(name, results)}")
    text = report(results)
    print(text)
    if args.update_readme:
        replace_section(BENCH_DIR / "README.md", name, text)
    return results


def analysis_results(args: Any, paths: Sequence[Path], rows: dict[str, Any]) -> dict[str, Any]:
    """The saved results of a workflow run: each analysis case's median over its runs (the
    run stops if the runs of one case counted different photons), the arguments, the mean
    granule size and the environment."""
    for r in rows["analysis"]:
        r["seconds"] = float(np.median(r["runs"]))
        if len(set(r["photons_runs"])) != 1:
            raise SystemExit(f"{r['case']}: photon counts differ between runs")
    return {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k != "func"},
            "granule_mb": round(sum(p.stat().st_size for p in paths) / len(paths) / 1e6, 1),
            "environment": environment(), **rows}
