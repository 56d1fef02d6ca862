"""Indexing from DMR++ vs from HDF5 over the local S3 endpoint.

For each generator's benchmark granule: index it locally, write its DMR++ beside it with
``write_dmrpp`` (the document NASA would publish as ``GRANULE.dmrpp``), then time, through the
S3 endpoint with ``--latency-ms`` of first-byte latency, ``index_granule`` on the HDF5 and
``index_dmrpp`` on the document.  Reported per case: median seconds of ``--repeats`` runs,
requests and requests in a row of the first run, bytes moved.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from benchmarks import _common as c
from benchmarks._endpoints import ENDPOINTS, endpoint
from benchmarks.bench_index import run_s3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mb", type=float, default=70, help="granule size (default 70)")
    p.add_argument("--repeats", type=int, default=3, help="runs per case (median reported)")
    p.add_argument("--latency-ms", type=float, default=20.0, help="S3 first-byte latency")
    p.add_argument("--generator", choices=["atl03", "alt"], action="append",
                   help="granule layouts (repeatable; default both)")  # fmt: skip
    p.add_argument("--endpoint", choices=ENDPOINTS, default="fast", help="S3 endpoint")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from h5sidecar import index_dmrpp, index_granule
    from h5sidecar.references import write_dmrpp

    rows = []
    for generator in args.generator or ["atl03", "alt"]:
        granule = c.sample_granule(args.size_mb, generator)
        doc = granule.with_name(granule.name + ".dmrpp")
        left = write_dmrpp(index_granule(str(granule)), str(doc))
        with endpoint(args.endpoint, args.latency_ms) as ep:
            ep.publish(granule)
            ep.publish(doc)
            opts = {"endpoint_url": ep.url, "anon": True}
            s3url, s3doc = f"s3://{c.s3_key(granule)}", f"s3://{c.s3_key(doc)}"
            cases = {  # the loop's values bound now (each case runs inside this iteration)
                "index_granule (HDF5)":
                    lambda u=s3url, o=opts: index_granule(u, storage_options=o),
                "index_dmrpp (DMR++)":
                    lambda d=s3doc, u=s3url, o=opts: index_dmrpp(d, u, **o),
            }  # fmt: skip
            for case, fn in cases.items():
                m, refs = run_s3(case, fn, args.repeats, ep.url)
                rows.append({"granule": f"{generator} {c.fmt_bytes(granule.stat().st_size)}",
                             "case": case, "median_s": statistics.median(m.times),
                             "requests": m.requests, "in_a_row": m.in_a_row, "bytes": m.bytes,
                             "arrays": len(refs.arrays), "left_out": len(left),
                             "document_bytes": doc.stat().st_size})  # fmt: skip
                print(rows[-1], flush=True)
    return {"benchmark": "dmrpp", "env": c.environment(), "args": vars(args), "rows": rows}


def report(results: dict[str, Any]) -> str:
    """A Markdown table of the rows."""
    rows = [(r["granule"], r["case"], f"{r['median_s']:.2f}", r["requests"], r["in_a_row"],
             c.fmt_bytes(r["bytes"]), r["arrays"]) for r in results["rows"]]  # fmt: skip
    return c.markdown_table(["granule", "case", "median s", "requests", "in a row",
                             "bytes moved", "arrays"], rows)  # fmt: skip


def main(args: argparse.Namespace) -> dict[str, Any]:
    results = run(args)
    print(report(results))
    return results
