"""A throwaway PostgreSQL + PostGIS cluster with pgstac's schema, on 127.0.0.1, for the tests.

Debian's server binaries (``postgresql``, ``postgresql-15-postgis-3``) are found under
``/usr/lib/postgresql/*/bin``; PostgreSQL refuses to run as root, so under root the cluster is
owned by (and run as) the unprivileged ``postgres`` account those packages create.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import free_port

INSTALL_HINT = ("install them with `apt-get install postgresql postgresql-15-postgis-3` "
                "(scripts/ensure-test-tools.sh does) and `pip install -e .[pgstac]`")  # fmt: skip
#: PostgreSQL's own user in Debian's packages: who runs the cluster when the tests run as root
SERVICE_USER = "postgres"


def server_bin() -> Path | None:
    """The folder of ``initdb``/``pg_ctl`` of the newest installed server with PostGIS."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        version = Path(folder).parent.name
        if (Path(folder) / "initdb").exists() and glob.glob(
                f"/usr/share/postgresql/{version}/extension/postgis.control"):
            return Path(folder)
    found = shutil.which("pg_ctl")
    return Path(found).parent if found else None


def missing() -> str | None:
    """Why a cluster cannot be started here (None when it can)."""
    try:
        import psycopg  # noqa: F401
        import pypgstac  # noqa: F401
    except ImportError as exc:
        return f"pgstac tests need psycopg 3 and pypgstac ({exc}): {INSTALL_HINT}"
    if server_bin() is None:
        return f"pgstac tests need PostgreSQL's server and PostGIS: {INSTALL_HINT}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            return (f"running as root, the tests start PostgreSQL as the {SERVICE_USER!r} "
                    f"account, which does not exist: {INSTALL_HINT}")
    return None


@contextmanager
def pgstac_cluster() -> Iterator[str]:
    """Start a cluster in a temporary folder, install PostGIS and pgstac; yield its DSN.

    The cluster is stopped (immediate shutdown) and its folder removed on exit.
    """
    from pypgstac.db import PgstacDB
    from pypgstac.migrate import Migrate

    bindir = server_bin()
    assert bindir is not None
    user: str | None = SERVICE_USER if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="h5sidecar-pgstac-"))
    data = root / "data"
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    port = free_port()
    log = root / "server.log"
    try:
        subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "pgstac_test",
                        "--auth=trust", "--encoding=UTF8", "--no-sync"],
                       check=True, capture_output=True, user=user, cwd=root)  # fmt: skip
        # TCP on loopback only, no Unix socket (its default folder needs root), no fsync
        opts = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='' "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts,
                        "-w", "-t", "60", "start"],
                       check=True, capture_output=True, user=user, cwd=root)  # fmt: skip
        dsn = f"postgresql://pgstac_test@127.0.0.1:{port}/postgres"
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
        with PgstacDB(dsn=dsn) as db:
            Migrate(db).run_migration()
        yield dsn
    except subprocess.CalledProcessError as exc:
        server_log = log.read_text(errors="replace") if log.exists() else ""
        raise RuntimeError(f"{exc.cmd[0]} failed: {exc.stderr.decode(errors='replace')}"
                           f"\n{server_log}") from exc
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                            "stop"], check=False, capture_output=True, user=user, cwd=root)  # fmt: skip
        for _ in range(50):  # the server's last files go away with it
            if not (data / "postmaster.pid").exists():
                break
            time.sleep(0.1)
        shutil.rmtree(root, ignore_errors=True)
