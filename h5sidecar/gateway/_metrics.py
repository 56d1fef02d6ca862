"""Prometheus metrics of the HTTP gateway, in the text exposition format (version 0.0.4).

A handful of counters, gauges and one latency histogram, kept in plain dicts under one lock and
rendered for ``GET /metrics``.  Label values are bounded by construction (route families, status
codes, cache names), never raw paths or granule names, so the number of series stays small
whatever clients request.

Why not ``prometheus_client`` (checked against 0.26.0): it would serve -- it is pure Python
(~650 kB, no dependencies) and a ``CollectorRegistry`` per :class:`GatewayMetrics` keeps
gateways apart as this class does -- but it changes the exposition the gateway's users and
tests read: integers as ``1.0``, ``le`` before the other labels, a ``*_created`` series beside
every counter and histogram (switched off only process-wide), and reading one series back
(:meth:`GatewayMetrics.value`, :meth:`GatewayMetrics.total`) goes through sample lookups.  Its
real gain, multi-process aggregation (``PROMETHEUS_MULTIPROC_DIR``), has no use here:
``h5sidecar serve`` runs one uvicorn process.  About 100 lines stay cheaper than all that.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["LATENCY_BUCKETS", "GatewayMetrics", "MetricFamily"]

#: Upper bounds (seconds) of the request latency histogram buckets.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: Labels = ()) -> str:
    items = (*labels, *extra)
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in items) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


@dataclass
class MetricFamily:
    """One metric: name, type, help text and a value per label set."""

    name: str
    kind: str  # "counter" | "gauge" | "histogram"
    help: str
    values: dict[Labels, float] = field(default_factory=dict)
    # histograms: label set -> (bucket counts, sum, count)
    hist: dict[Labels, tuple[list[int], float, int]] = field(default_factory=dict)

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} {self.kind}"
        if self.kind != "histogram":
            for labels, value in sorted(self.values.items()):
                yield f"{self.name}{_labels(labels)} {_number(value)}"
            return
        for labels, (counts, total, n) in sorted(self.hist.items()):
            cumulative = 0
            for bound, c in zip((*LATENCY_BUCKETS, math.inf), counts, strict=True):
                cumulative += c
                le = (("le", _number(bound)),)
                yield f"{self.name}_bucket{_labels(labels, le)} {cumulative}"
            yield f"{self.name}_sum{_labels(labels)} {_number(total)}"
            yield f"{self.name}_count{_labels(labels)} {n}"


class GatewayMetrics:
    """The gateway's metrics (thread-safe; rendered by :meth:`render`).

    Series
    ------
    ``h5sidecar_http_requests_total{route,method,status}``
        Requests answered.
    ``h5sidecar_http_response_bytes_total{route}``
        Body bytes sent.
    ``h5sidecar_http_request_duration_seconds{route}``
        Latency histogram (first byte of the request to last byte of the response).
    ``h5sidecar_http_requests_in_flight``
        Requests being answered now.
    ``h5sidecar_upstream_requests_total`` / ``h5sidecar_upstream_bytes_total``
        Requests (after coalescing) and bytes read from sources.
    ``h5sidecar_cache_hits_total{cache}`` / ``h5sidecar_cache_misses_total{cache}``
        Lookups in the sidecar and chunk caches.
    ``h5sidecar_rejected_total``
        Requests refused with 503 because the upstream queue was full.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, MetricFamily] = {}
        for name, kind, text in (
            ("h5sidecar_http_requests_total", "counter", "HTTP requests answered."),
            ("h5sidecar_http_response_bytes_total", "counter", "HTTP response body bytes sent."),
            ("h5sidecar_http_request_duration_seconds", "histogram", "HTTP request latency."),
            ("h5sidecar_http_requests_in_flight", "gauge", "HTTP requests being answered."),
            ("h5sidecar_upstream_requests_total", "counter", "Requests sent to source objects."),
            ("h5sidecar_upstream_bytes_total", "counter", "Bytes read from source objects."),
            ("h5sidecar_cache_hits_total", "counter", "Cache lookups that hit."),
            ("h5sidecar_cache_misses_total", "counter", "Cache lookups that missed."),
            ("h5sidecar_cache_bytes", "gauge", "Bytes held by each cache."),
            ("h5sidecar_rejected_total", "counter", "Requests refused with 503 (saturated)."),
            ("h5sidecar_granules", "gauge", "Granules (sidecars) found in DEST."),
            ("h5sidecar_cubes", "gauge", "Datacubes served (--cube)."),
        ):
            self._families[name] = MetricFamily(name, kind, text)
        self._families["h5sidecar_http_requests_in_flight"].values[()] = 0

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        """Add ``value`` to a counter (or gauge) series."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            fam = self._families[name]
            fam.values[key] = fam.values.get(key, 0.0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set a gauge series."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            self._families[name].values[key] = float(value)

    def observe(self, name: str, seconds: float, **labels: str) -> None:
        """Record one observation in a histogram."""
        key = tuple(sorted(labels.items()))
        slot = bisect.bisect_left(LATENCY_BUCKETS, seconds)
        with self._lock:
            fam = self._families[name]
            counts, total, n = fam.hist.get(key) or ([0] * (len(LATENCY_BUCKETS) + 1), 0.0, 0)
            counts[slot] += 1
            fam.hist[key] = (counts, total + seconds, n + 1)

    def value(self, name: str, **labels: str) -> float:
        """Current value of a counter/gauge series (0 when never set); for tests and logs."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            return self._families[name].values.get(key, 0.0)

    def total(self, name: str) -> float:
        """Sum of a counter over all its label sets."""
        with self._lock:
            return sum(self._families[name].values.values())

    def render(self) -> str:
        """The text exposition of every series."""
        with self._lock:
            lines = [line for fam in self._families.values() for line in fam.render()]
        return "\n".join(lines) + "\n"
