"""Every code example of README.md and docs/ runs, as a reader would run it.

Sybil parses each page: its ``python`` blocks run in one namespace per page, in order (a page
reads like a session: later blocks use what earlier ones made), and its ``bash`` blocks run one
command line at a time with ``h5sidecar`` on PATH (``h5sidecar serve`` in the background
until the next page).  The pages name the gateway's default address, 127.0.0.1:8000; the
examples run against a free port of this process instead (:func:`_local`), so that another
test's server on 8000 never takes a page's place.  Each page runs in a folder of its own that holds what
the examples name: ``ATL03_x.h5`` with ``ATL03_x.h5.parq``, ``out/ATL03_x.h5.parq`` and
``x.h5.json``, ``granule.h5``; and ``s3://bucket/...`` is the local moto server
(``AWS_ENDPOINT_URL``), holding ``ATL03_x.h5`` (also as
``ATL03_20181014002650_02350102_006_02.h5``), its sidecars ``ATL03_x.h5.parq`` and
``sidecars/ATL03_x.h5.parq`` (compact layout), and two sample granules under ``ATL03/`` and ``atl03/``.
Invisible blocks (``<!-- invisible-code-block: python ... -->``) make what a fragment assumes.

A block that cannot run here is marked in the page, just above it, with the reason::

    <!-- skip: next "needs a Dask cluster" -->

or, where what it needs may be missing at run time, with the condition that skips it
(``<!-- skip: next if(port_taken, reason="127.0.0.1:9000 is taken") -->``, the condition a name
that an invisible block above set)
(Sybil's skip directive; a skip without a reason is refused below).  A command line whose
comment starts with ``refused`` is expected to exit non-zero.  A ``python`` block with an
``if __name__ == "__main__":`` guard is saved as a script and run in a new interpreter, as the
reader would run it (its worker processes then import that script, as theirs will).

Sybil was chosen over pytest-examples (each block on its own, no shared namespace, no skip
with a reason) and phmdoctest (generates test files to collect): it runs a page's blocks in one
namespace, has a documented skip directive that names its reason, takes a custom evaluator for
shell blocks, and works from a plain pytest test, so the examples use this suite's fixtures
(the moto server) and xdist groups.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sybil import Document, Example, Sybil
from sybil.example import NotEvaluated
from sybil.parsers.markdown import CodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_SKIP = re.compile(r"<!-- skip: (\w+)(.*?)-->")
#: the granule the pages name (write_sample_granules' first name, seed 0)
GRANULE = "ATL03_20190329130645_00010301_006_01.h5"


_SERVERS: list[subprocess.Popen[bytes]] = []
_PORT: list[int] = []


def _port() -> int:
    """A free port of 127.0.0.1, chosen once per test process, where the pages' gateways run."""
    if not _PORT:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            _PORT.append(s.getsockname()[1])
    return _PORT[0]


def _local(text: str) -> str:
    """``text`` with the gateway's default address (127.0.0.1:8000) moved to :func:`_port`."""
    return re.sub(r"(?<=127\.0\.0\.1:)8000\b|(?<=--port )8000\b", str(_port()), text)


def _stop_servers() -> None:
    while _SERVERS:
        server = _SERVERS.pop()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _serve(command: str, cwd: str, env: dict[str, str]) -> None:
    """``h5sidecar serve ...`` runs until stopped: started in the background, awaited ready."""
    import httpx

    _stop_servers()
    port = _port()
    if not re.search(r"--port \d+", command):
        command += f" --port {port}"
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            pytest.skip(f"127.0.0.1:{port} is taken by another process")
    server = subprocess.Popen(["bash", "-c", "exec " + command], cwd=cwd, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _SERVERS.append(server)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert server.poll() is None, f"`{command}` exited {server.returncode}"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"`{command}` was not ready on 127.0.0.1:{port} within 60 s")


def _run_shell(example: Example) -> None:
    """Each command line of a ``bash`` block, in the page's folder, ``h5sidecar`` on PATH."""
    env = {**os.environ, **example.namespace["__env__"]}
    for line in _local(str(example.parsed)).splitlines():
        command = line.split(" #")[0].strip()
        if not command or command.startswith("#"):
            continue
        if re.match(r"^(\w+=\S+ )*h5sidecar serve ", command):
            _serve(command, example.namespace["__cwd__"], env)
            continue
        done = subprocess.run(["bash", "-c", command], cwd=example.namespace["__cwd__"], env=env,
                              capture_output=True, text=True, timeout=240, check=False)
        refused = line.partition(" #")[2].strip().startswith("refused")
        if (done.returncode != 0) != refused:
            raise AssertionError(f"{example.path}:{example.line}: `{command}` exited "
                                 f"{done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def _run_script(example: Example) -> None:
    """A block with a ``__main__`` guard, saved as a script and run as the reader would."""
    script = Path(example.namespace["__cwd__"]) / f"example_{example.line}.py"
    script.write_text(_local(str(example.parsed)))
    env = {**os.environ, **example.namespace["__env__"]}
    done = subprocess.run([sys.executable, script.name], cwd=script.parent, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{example.path}:{example.line}\n{done.stdout}\n{done.stderr}"


def _run_python(example: Example) -> None:
    """A ``python`` block in the page's namespace, or as a script when it is written as one."""
    if '__name__ == "__main__"' in str(example.parsed):
        _run_script(example)
        return
    # padded so that a traceback names the page's line numbers
    code = compile("\n" * example.line + _local(str(example.parsed)), str(example.path), "exec")
    exec(code, example.namespace)  # noqa: S102 - the page's own example, as Sybil runs them


_SYBIL = Sybil(parsers=[CodeBlockParser("python", _run_python), CodeBlockParser("bash", _run_shell),
                              SkipParser()])


def _parse(page: Path) -> Document:
    return _SYBIL.parse(page)


#: The pages whose examples take longest (a minute or more in all, most of it one example that
#: indexes or checks over the S3 server), longest first: marked ``slow`` and collected first,
#: so that they start first (tests/conftest.py), not late in a parallel run.
LONG_PAGES = ("docs/how-to/index-from-python.md", "docs/how-to/dask.md", "docs/how-to/stac.md",
              "docs/getting-started.md", "docs/how-to/gateway.md",
              "docs/explanation/sidecar-format.md")  # fmt: skip


def _longest_first(page: Path) -> int:
    rel = page.relative_to(ROOT).as_posix()
    return LONG_PAGES.index(rel) if rel in LONG_PAGES else len(LONG_PAGES)


def _examples() -> list[Any]:
    params = []
    for page in sorted(PAGES, key=_longest_first):
        rel = page.relative_to(ROOT).as_posix()
        marks = [pytest.mark.xdist_group(f"doc-{rel}"),
                 *([pytest.mark.slow] if rel in LONG_PAGES else [])]
        for i, example in enumerate(_parse(page)):
            params.append(pytest.param(rel, i, id=f"{rel}:{example.line}", marks=marks))
    return params


def test_the_long_pages_exist() -> None:
    assert {p.relative_to(ROOT).as_posix() for p in PAGES} >= set(LONG_PAGES)


def test_every_skip_names_its_reason() -> None:
    for page in PAGES:
        for m in _SKIP.finditer(page.read_text()):
            if m.group(1) != "end":
                assert re.fullmatch(r'\s*("[^"]+"|if\(.+, reason="[^"]+"\))\s*', m.group(2)), (
                    page, m.group(0))


def test_most_pages_with_code_run_something() -> None:
    assert len(_examples()) > 50


@pytest.fixture(scope="session")
def doc_world(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str) -> Path:
    """The folder and the S3 objects the pages' examples name, made once per session."""
    import s3fs

    from h5sidecar.indexer import index_granule
    from h5sidecar.references import write_json, write_parquet
    from h5sidecar.sample import write_atl03_like, write_sample_granules

    world = tmp_path_factory.mktemp("doc-world")
    write_atl03_like(world / "ATL03_x.h5", photons=50_000, seed=3)
    shutil.copy(world / "ATL03_x.h5", world / "granule.h5")
    refs = index_granule(str(world / "ATL03_x.h5"))
    write_parquet(refs, str(world / "ATL03_x.h5.parq"))
    write_parquet(refs, str(world / "out" / "ATL03_x.h5.parq"))
    write_json(refs, str(world / "x.h5.json"))

    s3 = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=s3_endpoint)
    if not s3.exists("bucket"):
        s3.mkdir("bucket")
    for name in ("ATL03_x.h5", "ATL03_20181014002650_02350102_006_02.h5"):
        s3.put(str(world / "ATL03_x.h5"), f"bucket/{name}")
        s3.chmod(f"bucket/{name}", "public-read")  # the pages read them with anon=True too
    granules = tmp_path_factory.mktemp("doc-granules")
    for path in write_sample_granules(granules, granules=2, photons=50_000):
        for prefix in ("ATL03", "atl03"):
            s3.put(str(path), f"bucket/{prefix}/{Path(path).name}")
    options = {"endpoint_url": s3_endpoint}
    on_s3 = index_granule("s3://bucket/ATL03_x.h5", storage_options=options)
    # compact: 2-3 objects, where the kerchunk layout PUTs one per variable (~900, slow on moto);
    # the pages read these with h5sidecar's readers, which read both layouts
    for sidecar in ("s3://bucket/ATL03_x.h5.parq", "s3://bucket/sidecars/ATL03_x.h5.parq"):
        write_parquet(on_s3, sidecar, storage_options=options, layout="compact")
    bin_dir = world / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "h5sidecar"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m h5sidecar.cli \"$@\"\n")
    shim.chmod(0o755)
    return world


_DOCUMENTS: dict[str, tuple[Document, list[Example], list[int]]] = {}


@pytest.fixture(scope="module", autouse=True)
def _gateways_stopped() -> Iterator[None]:
    yield
    _stop_servers()


def _document(rel: str, world: Path, tmp_path_factory: pytest.TempPathFactory,
              s3_endpoint: str) -> tuple[Document, list[Example], list[int]]:
    if rel not in _DOCUMENTS:
        folder = tmp_path_factory.mktemp("doc-" + re.sub(r"\W", "-", rel))
        shutil.copytree(world, folder, dirs_exist_ok=True)
        document = _parse(ROOT / rel)
        document.namespace["__name__"] = "__main__"  # as a script the reader saves and runs
        document.namespace["__cwd__"] = str(folder)
        document.namespace["__env__"] = {
            "AWS_ENDPOINT_URL": s3_endpoint,
            "PATH": f"{folder / '.bin'}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT),
        }
        _stop_servers()  # the previous page's gateway
        _DOCUMENTS[rel] = (document, list(document), [0])
    return _DOCUMENTS[rel]


# what a reader sees as a warning is not a failure of the example (filterwarnings = error)
@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")
@pytest.mark.parametrize(("rel", "index"), _examples())
def test_example_runs(rel: str, index: int, doc_world: Path, s3_endpoint: str,
                      tmp_path_factory: pytest.TempPathFactory,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    document, examples, done = _document(rel, doc_world, tmp_path_factory, s3_endpoint)
    monkeypatch.chdir(document.namespace["__cwd__"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    # the examples before this one, in order (one xdist group per page keeps a page's examples in
    # one worker; a page split across workers would replay its earlier examples in each)
    while done[0] < index:
        # a failure there is reported by that example's own test
        with contextlib.suppress(Exception):
            examples[done[0]].evaluate()
        done[0] += 1
    done[0] = index + 1
    with contextlib.suppress(NotEvaluated):  # inside a `skip: start` whose condition is false
        examples[index].evaluate()
