"""Reading byte ranges: the pure planner, the executors and the ranged readers.

:mod:`._plan` coalesces ranges (pure, vectorised); :mod:`._chunk_fetcher` runs a plan, after
the checks made before any I/O (:mod:`._request_checks`), each request with bounded concurrency
and retries (:mod:`._source_requests`) behind the freshness guard (:mod:`._freshness`);
:mod:`._pinned` and :mod:`._pages` read one object through ``If-Match``-pinned GETs into a page
cache; :mod:`._ranged` gives file objects and range readers over them; :mod:`._retry` is the one
retry policy.
"""
