#!/usr/bin/env bash
# Installs the system tools the test-suite drives for real: headless Chromium for the gateway's
# browser test, node/npm for its JavaScript Zarr client test, PostgreSQL + PostGIS for pgstac's.  Idempotent; needs root (CI and
# the dev machines run as root) and Debian's apt.
set -euo pipefail
# node + npm for the JavaScript Zarr client test (the test npm-installs its pinned zarrita).
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
# PostgreSQL + PostGIS for the pgstac tests (they start a throwaway cluster; pgstac's schema
# comes from pip's pypgstac).  The server of Debian's `postgresql` package, PostGIS for its version.
if ! ls /usr/share/postgresql/*/extension/postgis.control >/dev/null 2>&1 \
    && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  pg_major=$(ls /usr/lib/postgresql | sort -n | tail -1)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-${pg_major}-postgis-3" >/dev/null
fi
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "chromium not found and cannot apt-get it: browser tests will be skipped" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium chromium-driver >/dev/null
