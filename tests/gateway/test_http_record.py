"""The gateway over a DEST with a record: lookups by name, pages, search, health, no cap.

Synthetic granules are rows inserted directly into the record of a DEST indexed from one small
granule; those read through the gateway have a hard link of its sidecar, and every value read
is compared with h5py.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

import h5py
import httpx
import numpy as np
import pytest
import zarr

from tests._granules import write_small_granule
from tests.gateway._http import SMALL, gateway, http, wait_status

__all__ = ["http"]  # fixtures used below

RECORD = "_h5sidecar.sqlite"
H_PH = "gt1l/heights/h_ph"


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path]:
    """``(DEST, source file)``: one small granule indexed into DEST (which gets a record)."""
    from h5sidecar.workflows import index_many

    src = tmp_path / "src"
    src.mkdir()
    write_small_granule(src / SMALL)
    dest = tmp_path / "dest"
    report = index_many(str(src), str(dest), format="json", executor="serial")
    assert report.ok and (dest / RECORD).exists(), report.to_dict()
    return dest, src / SMALL


def add_rows(dest: Path, names: Iterable[str], *, link: bool = False) -> None:
    """Record ``names`` as granules indexed like the first one (the sidecar hard-linked when
    ``link``), in one transaction."""
    db = sqlite3.connect(dest / RECORD)
    try:
        cols = [r[1] for r in db.execute("PRAGMA table_info(granules)")]
        first = dict(zip(cols, db.execute(f"SELECT * FROM granules WHERE name = '{SMALL}'").fetchone(),
                         strict=True))  # fmt: skip
        rows = []
        for i, name in enumerate(names):
            sidecar = dest / f"{name}.json"
            if link:
                sidecar.parent.mkdir(parents=True, exist_ok=True)
                if i % 50_000 == 0:  # a file system allows ~65,000 links per inode
                    shutil.copy(dest / f"{SMALL}.json", dest / f".links-{i}")
                os.link(dest / f".links-{i - i % 50_000}", sidecar)
            row = {**first, "url": f"{first['url']}?{name}", "name": name, "sidecar": str(sidecar)}
            rows.append(tuple(row[c] for c in cols))
        with db:
            db.executemany(f"INSERT INTO granules ({', '.join(cols)}) VALUES "
                           f"({', '.join('?' * len(cols))})", rows)  # fmt: skip
    finally:
        db.close()


def assert_h_ph(url: str, name: str, source: Path) -> None:
    """The photon heights of granule ``name`` read through the gateway equal h5py's."""
    root = zarr.open_group(f"{url}/zarr/{name}/", mode="r")
    with h5py.File(source) as f:
        np.testing.assert_array_equal(root[H_PH][...], f[H_PH][...])


def all_pages(http: httpx.Client, first: str) -> tuple[list[str], int]:
    names, pages, url = [], 0, first
    while url:
        r = http.get(url)
        assert r.status_code == 200, r.text
        body = r.json()
        names += body["granules"]
        pages += 1
        assert (r.headers.get("link") is not None) == (body["next"] is not None)
        url = body["next"]
    return names, pages


def test_pages_list_every_granule_once_in_order(recorded, http: httpx.Client) -> None:
    dest, _ = recorded
    names = [f"{y}/{d:03d}/g{i}.h5" for y in ("2019", "2020", "éte") for d in range(40)
             for i in range(20)]  # fmt: skip
    add_rows(dest, names)
    want = sorted([*names, SMALL])
    with gateway(str(dest)) as (url, _):
        got, pages = all_pages(http, f"{url}/api/granules?limit=700")
        assert got == want and pages == -(-len(want) // 700) + (len(want) % 700 == 0)
        assert http.get(f"{url}/api/granules").json()["count"] == len(want)
        # an indexed prefix, and a substring, paged the same way
        got, _ = all_pages(http, f"{url}/api/granules?limit=9&prefix=2020/01")
        assert got == [n for n in want if n.startswith("2020/01")] and len(got) == 200
        got, _ = all_pages(http, f"{url}/api/granules?limit=50&q=/g19.")
        assert got == [n for n in want if "/g19." in n] and len(got) == 120
        # granules recorded meanwhile after the cursor are listed; the pages before are not redone
        body = http.get(f"{url}/api/granules?limit=1000").json()
        add_rows(dest, ["zz/late.h5", "0-early.h5"])
        rest, _ = all_pages(http, body["next"])
        assert body["granules"] + rest == sorted([*want, "zz/late.h5"])
        for bad in ("limit=0", "limit=10001", "limit=x", "cursor=_w"):
            r = http.get(f"{url}/api/granules?{bad}")
            assert r.status_code == 400 and r.json()["error"] == "bad_request", bad


def test_granule_recorded_after_startup_is_served(recorded, http: httpx.Client) -> None:
    dest, source = recorded
    with gateway(str(dest)) as (url, _):
        assert http.get(f"{url}/api/granules").json()["granules"] == [SMALL]
        add_rows(dest, ["2021/new.h5"], link=True)
        # at once: a lookup in the record, not a re-listing of DEST every few seconds
        assert http.get(f"{url}/api/granules/2021/new.h5").status_code == 200
        assert_h_ph(url, "2021/new.h5", source)
        assert http.get(f"{url}/zarr/2021/none.h5/.zmetadata").status_code == 404


def test_landing_page_searches(recorded, http: httpx.Client) -> None:
    dest, _ = recorded
    add_rows(dest, [f"a{i:03d}.h5" for i in range(150)] + ["b-rare.h5"])
    with gateway(str(dest)) as (url, _):
        page = http.get(f"{url}/").text
        assert "Granules (152)" in page and "<form id=search" in page and 'name=q' in page
        assert len(re.findall("<li[ >]", page)) == 100 and "id=next-page" in page  # one page, not everything
        page = http.get(f"{url}/", params={"q": "rare"}).text
        assert ">b-rare.h5</a>" in page and ">a000.h5</a>" not in page
        assert "id=next-page" not in page
        page = http.get(f"{url}/", params={"q": "a1"}).text
        assert len(re.findall("<li[ >]", page)) == 50 and ">a149.h5</a>" in page
        page = http.get(f"{url}/", params={"q": "nothing-like-this"}).text
        assert "No granule name holds" in page


@pytest.mark.slow
def test_above_the_old_cap_of_100000_sidecars(recorded, http: httpx.Client) -> None:
    """100,001 sidecars (hard links) under DEST, all recorded: served, listed, read."""
    dest, source = recorded
    names = [f"many/g{i:06d}.h5" for i in range(100_001)]
    add_rows(dest, names, link=True)
    with gateway(str(dest)) as (url, _):
        t0 = time.perf_counter()
        assert http.get(f"{url}/healthz").status_code == 200
        r = http.get(f"{url}/api/granules?limit=10000&prefix=many/")
        assert r.status_code == 200, r.text  # was 422: "more than 100000 sidecars"
        body = r.json()
        assert body["granules"] == names[:10_000] and time.perf_counter() - t0 < 5
        # counted in the background: never holds a request up
        for _ in range(100):
            if http.get(f"{url}/api/granules?limit=1").json()["count"] is not None:
                break
            time.sleep(0.1)
        assert http.get(f"{url}/api/granules?limit=1").json()["count"] == 100_002
        assert_h_ph(url, names[-1], source)
        assert_h_ph(url, SMALL, source)


def test_healthz_is_degraded_when_the_record_cannot_be_read(recorded, http: httpx.Client) -> None:
    dest, source = recorded
    record = dest / RECORD
    saved = dest.parent / "saved.sqlite"
    with gateway(str(dest)) as (url, _):
        assert wait_status(url).json()["status"] == "ok"
        assert_h_ph(url, SMALL, source)
        shutil.copy(record, saved)
        for broken in ("removed", "corrupt"):
            record.unlink(missing_ok=True)
            for side in dest.glob(RECORD + "-*"):
                side.unlink()
            if broken == "corrupt":
                record.write_bytes(b"not an SQLite database" * 100)
            time.sleep(1.1)  # the health probe is cached for a second
            r = http.get(f"{url}/healthz")
            assert r.status_code == 503, (broken, r.text)
            assert r.json()["status"] == "degraded" and RECORD in r.json()["reason"]
            code = http.get(f"{url}/api/granules/{SMALL}").status_code
            assert code == (502 if broken == "removed" else 422), broken
        record.unlink()
        shutil.copy(saved, record)
        time.sleep(1.1)
        assert http.get(f"{url}/healthz").status_code == 200
        assert http.get(f"{url}/api/granules").json()["granules"] == [SMALL]


def test_healthz_is_degraded_when_dest_is_gone(recorded, http: httpx.Client) -> None:
    dest, _ = recorded
    with gateway(str(dest)) as (url, _):
        assert http.get(f"{url}/healthz").status_code == 200
        wait_status(url)  # DEST loaded in its thread (quick for a local DEST, but not instant)
        assert http.get(f"{url}/readyz").status_code == 200
        shutil.rmtree(dest)
        time.sleep(1.1)
        r = http.get(f"{url}/healthz")
        assert r.status_code == 503 and r.json()["status"] == "degraded"
        r = http.get(f"{url}/readyz")  # readiness too, with when to ask again
        assert r.status_code == 503 and r.json()["status"] == "degraded", r.text
        assert int(r.headers["Retry-After"]) >= 1


def test_record_allows_a_recorded_source_outside_the_roots(recorded) -> None:
    """A granule's own recorded source is allowed by a lookup, not by a list of every source."""
    from h5sidecar.dest._record_view import RecordAllowList, RecordView

    dest, source = recorded
    db = sqlite3.connect(dest / RECORD)
    with db:
        db.execute("UPDATE granules SET url = '/elsewhere/x.h5', source = NULL")
    db.close()
    allow = RecordAllowList([str(source.parent)], RecordView(str(dest / RECORD), str(dest)))
    assert allow.allows(str(source)) and allow.allows("/elsewhere/x.h5")
    assert not allow.allows("/elsewhere/y.h5") and not allow.allows("/etc/passwd")
    assert allow.check("/elsewhere/x.h5").url.endswith("/elsewhere/x.h5")
