"""Unit and property tests of the pure read planner (no I/O)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.sources.fetch._plan import plan_coded, plan_reads

URLS = ("s3://bucket/a.h5", "s3://bucket/b.h5", "/data/c.h5")
SIZE = 4096


def execute(plan, buffers: dict[str, bytes]) -> list[bytes]:
    """Run a plan against in-memory objects exactly as the executor does."""
    parts = [buffers[url][start:stop] for url, start, stop in plan.iter_requests()]
    owner = plan.request_span.tolist()
    spans = [
        b"".join(p for p, r in zip(parts, owner, strict=True) if r == s)
        for s in range(plan.n_spans)
    ]
    return plan.slice_spans(spans)


ranges = st.lists(
    st.tuples(st.sampled_from(URLS), st.integers(0, SIZE - 1), st.integers(0, 600)).map(
        lambda t: (t[0], t[1], min(t[2], SIZE - t[1]))
    ),
    max_size=60,
)


@st.composite
def plans(draw):
    rs = draw(ranges)
    # duplicates and overlaps on purpose: repeat some ranges, shifted or not
    if rs and draw(st.booleans()):
        rs = rs + [rs[i] for i in draw(st.lists(st.integers(0, len(rs) - 1), max_size=10))]
    max_gap = draw(st.integers(0, 300))
    max_request = draw(st.integers(1, 1500))
    return rs, max_gap, max_request


def make(rs, max_gap, max_request):
    urls = [r[0] for r in rs]
    return plan_reads(
        urls, [r[1] for r in rs], [r[2] for r in rs], max_gap=max_gap, max_request=max_request
    )


@settings(max_examples=400, deadline=None)
@given(plans(), st.integers(0, 2**32 - 1))
def test_coalescing_never_changes_bytes(case, seed):
    rs, max_gap, max_request = case
    rng = np.random.default_rng(seed)
    buffers = {u: rng.bytes(SIZE) for u in URLS}
    got = execute(make(rs, max_gap, max_request), buffers)
    assert got == [buffers[u][o : o + n] for u, o, n in rs]


@settings(max_examples=400, deadline=None)
@given(plans())
def test_every_range_covered_exactly_once_and_limits_hold(case):
    rs, max_gap, max_request = case
    p = make(rs, max_gap, max_request)
    assert p.n_ranges == len(rs)
    for i, (url, off, n) in enumerate(rs):
        s = int(p.range_span[i])
        if n == 0:
            assert s == -1
            continue
        assert p.urls[p.span_url[s]] == url
        begin = int(p.span_start[s] + p.range_offset[i])
        assert begin == off
        assert off + n <= p.span_stop[s]
    # requests tile their spans exactly, in order, none longer than max_request
    lengths = p.request_stop - p.request_start
    assert (lengths > 0).all() and (lengths <= max_request).all()
    for s in range(p.n_spans):
        mine = np.flatnonzero(p.request_span == s)
        assert p.request_start[mine[0]] == p.span_start[s]
        assert p.request_stop[mine[-1]] == p.span_stop[s]
        assert (p.request_start[mine[1:]] == p.request_stop[mine[:-1]]).all()
    # a span longer than max_request is a single range's bytes
    for s in np.flatnonzero(p.span_stop - p.span_start > max_request):
        members = [rs[i] for i in np.flatnonzero(p.range_span == s)]
        biggest = max(members, key=lambda r: r[2])
        assert (biggest[1], biggest[1] + biggest[2]) == (p.span_start[s], p.span_stop[s])


@settings(max_examples=400, deadline=None)
@given(plans())
def test_spans_are_tight_and_maximal(case):
    """No hole wider than max_gap inside a span; neighbours could not have been merged."""
    rs, max_gap, max_request = case
    p = make(rs, max_gap, max_request)
    for s in range(p.n_spans):
        members = sorted((rs[i][1], rs[i][1] + rs[i][2]) for i in np.flatnonzero(p.range_span == s))
        assert members[0][0] == p.span_start[s]
        assert max(e for _, e in members) == p.span_stop[s]
        reach = members[0][1]
        for a, b in members[1:]:
            assert a - reach <= max_gap
            reach = max(reach, b)
    order = np.lexsort((p.span_start, p.span_url))
    for x, y in itertools.pairwise(order):
        if p.span_url[x] != p.span_url[y]:
            continue
        # neighbours that touch, overlap or lie within max_gap were kept apart only because
        # together they would exceed max_request
        if p.span_start[y] - p.span_stop[x] <= max_gap:
            assert p.span_stop[y] - p.span_start[x] > max_request


def test_example_and_accounting():
    p = plan_reads(
        ["s3://b/k", "s3://b/k", "s3://b/k", "/f"],
        [0, 100, 10_000, 5],
        [100, 50, 10, 7],
        max_gap=1000,
        max_request=1 << 20,
    )
    assert list(p.iter_requests()) == [
        ("/f", 5, 12),
        ("s3://b/k", 0, 150),
        ("s3://b/k", 10000, 10010),
    ]
    assert p.bytes_requested == 167 and p.bytes_used == 167 and p.over_read_ratio == 1.0


def test_large_range_is_split_into_parallel_parts():
    p = plan_reads(["u"], [10], [1000], max_gap=0, max_request=300)
    assert p.n_spans == 1 and p.n_requests == 4
    assert list(p.iter_requests()) == [
        ("u", 10, 260),
        ("u", 260, 510),
        ("u", 510, 760),
        ("u", 760, 1010),
    ]


def test_gap_just_above_max_gap_splits():
    p = plan_reads(["u", "u"], [0, 110], [100, 10], max_gap=9, max_request=10_000)
    assert p.n_requests == 2
    p = plan_reads(["u", "u"], [0, 110], [100, 10], max_gap=10, max_request=10_000)
    assert p.n_requests == 1


def test_duplicates_share_one_request():
    p = plan_reads(["u"] * 5, [7] * 5, [100] * 5, max_gap=0, max_request=50)
    assert p.n_spans == 1 and p.bytes_requested == 100
    assert set(p.range_span.tolist()) == {0}


def test_empty_inputs():
    p = plan_reads([], [], [], max_gap=0, max_request=1)
    assert p.n_requests == 0 and p.n_ranges == 0 and p.slice_spans([]) == []
    p = plan_reads(["u"], [5], [0], max_gap=0, max_request=1)
    assert p.n_requests == 0 and p.slice_spans([]) == [b""]


def test_plan_arrays_are_read_only():
    p = plan_reads(["u"], [0], [10], max_gap=0, max_request=10)
    with pytest.raises(ValueError, match="read-only"):
        p.request_start[0] = 3


@pytest.mark.parametrize(
    ("offsets", "lengths", "match"),
    [([-1], [5], "non-negative"), ([0], [-5], "non-negative"), ([0, 1], [5], "every range")],
)
def test_bad_ranges_raise(offsets, lengths, match):
    with pytest.raises(InvalidReferenceError, match=match):
        plan_reads(["u"] * len(offsets), offsets, lengths, max_gap=0, max_request=10)


def test_bad_limits_raise():
    with pytest.raises(ValueError, match="max_request"):
        plan_reads(["u"], [0], [1], max_gap=0, max_request=0)
    with pytest.raises(ValueError, match="max_gap"):
        plan_reads(["u"], [0], [1], max_gap=-1, max_request=1)


def test_coded_form_matches_string_form():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, 500)
    offs = rng.integers(0, 10**6, 500)
    lens = rng.integers(0, 5000, 500)
    a = plan_coded(URLS, codes, offs, lens, max_gap=2000, max_request=50_000)
    b = plan_reads([URLS[c] for c in codes], offs, lens, max_gap=2000, max_request=50_000)
    assert sorted(a.iter_requests()) == sorted(b.iter_requests())
    with pytest.raises(InvalidReferenceError, match="url codes"):
        plan_coded(URLS, [3], [0], [1], max_gap=0, max_request=1)


def test_a_manifest_sized_plan_is_vectorised():
    """A million chunks of one contiguous dataset plan into max_request-sized requests."""
    n = 1_000_000
    offs = np.arange(n, dtype=np.int64) * 4096
    p = plan_coded(
        ("s3://b/k",),
        np.zeros(n, dtype=np.int64),
        offs,
        np.full(n, 4096),
        max_gap=0,
        max_request=16 * 2**20,
    )
    assert p.n_requests == -(-n * 4096 // (16 * 2**20))
    assert p.bytes_requested == n * 4096


def test_a_coded_plan_names_only_the_objects_it_reads():
    """A datacube's URL table lists every member: a plan of two of them names those two (the
    executor checks each URL a plan names before any I/O)."""
    table = tuple(f"s3://b/g{i:06d}.nc" for i in range(100_000))
    p = plan_coded(table, [70_000, 5, 70_000, 5], [0, 0, 100, 50], [10, 10, 10, 0],
                   max_gap=0, max_request=2**20)  # fmt: skip
    assert p.urls == (table[5], table[70_000])
    assert sorted(p.iter_requests()) == [(table[5], 0, 10), (table[70_000], 0, 10),
                                         (table[70_000], 100, 110)]  # fmt: skip
    assert plan_coded(table, [3], [0], [0], max_gap=0, max_request=1).urls == ()
