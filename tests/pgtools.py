"""A throw-away PostgreSQL server for tests: ``initdb`` + ``pg_ctl`` in a temporary folder.

``PostgresServer.start()`` makes a cluster in ``/tmp/gpuqueue-pg-*`` (trust authentication,
fsync off: nothing here must survive the machine) listening only on a Unix socket in that folder
(no TCP port to collide with), and ``create_database()`` gives each test a database of its own
as a SQLAlchemy URL (``postgresql+psycopg://postgres@/NAME?host=SOCKETDIR&port=PORT``) that any
process of the machine can use. ``stop()`` stops it and removes the folder.

PostgreSQL refuses to run as root: as root the server runs as the OS user ``postgres`` (Debian's
package makes it), else ``nobody``, through ``runuser``; the folder is theirs.

``GPUQUEUE_TEST_PG_URL`` (a URL of a server where the URL's user may create databases, e.g. a CI
service container): use that server instead of starting one.

Fixtures built on it (``tests/conftest.py``): ``postgres_server`` (session), ``postgres_url``
(a fresh database per test), ``ledger_url`` (parametrized: SQLite file, PostgreSQL database).
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import uuid
from typing import Optional

ENV_URL = "GPUQUEUE_TEST_PG_URL"
DRIVER = "postgresql+psycopg"


def find_bindir() -> Optional[str]:
    """The folder of ``initdb`` and ``pg_ctl`` (``$PG_BINDIR``, Debian's newest
    ``/usr/lib/postgresql/N/bin``, else ``PATH``), or None."""
    candidates = [os.environ.get("PG_BINDIR", "")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(re.sub(r"\D", "", p) or 0),
                         reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(os.path.dirname(initdb))
    for d in candidates:
        if d and os.access(os.path.join(d, "initdb"), os.X_OK) and os.access(os.path.join(d, "pg_ctl"), os.X_OK):
            return d
    return None


def unavailable_reason() -> Optional[str]:
    """Why no PostgreSQL server can be had here, or None."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]'; the test extra has it)"
    if os.environ.get(ENV_URL):
        return None
    if find_bindir() is None:
        return "PostgreSQL is not installed (initdb / pg_ctl not found; apt-get install postgresql, or set GPUQUEUE_TEST_PG_URL)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: PostgreSQL refuses to run as root"
    return None


def _run_as_user() -> Optional[str]:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("no non-root user (postgres, nobody) to run PostgreSQL as")


class PostgresServer:
    """One PostgreSQL cluster for the test session (see the module docstring)."""

    def __init__(self, bindir: Optional[str] = None, port: int = 5432, *, durable: bool = False):
        self.bindir = bindir or find_bindir()
        # durable: PostgreSQL's defaults (fsync, synchronous_commit, full_page_writes on), for
        # benchmarks; tests run without them (nothing they write must survive the machine).
        self.durable = durable
        self.port = port
        self.base: Optional[str] = None
        self.user = _run_as_user()
        self.external = os.environ.get(ENV_URL) or None

    @property
    def socket_dir(self) -> str:
        return os.path.join(self.base or "", "sock")

    def _cmd(self, *argv: str) -> list[str]:
        return ["runuser", "-u", self.user, "--", *argv] if self.user else list(argv)

    def _check(self, *argv: str) -> None:
        res = subprocess.run(self._cmd(*argv), capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            log = ""
            if self.base and os.path.exists(os.path.join(self.base, "server.log")):
                with open(os.path.join(self.base, "server.log"), encoding="utf-8", errors="replace") as f:
                    log = f.read()[-4000:]
            raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}\n{log}")

    def start(self) -> "PostgresServer":
        if self.external:
            return self
        if self.bindir is None:
            raise RuntimeError("PostgreSQL binaries not found")
        self.base = tempfile.mkdtemp(prefix="gpuqueue-pg-")
        data = os.path.join(self.base, "data")
        os.makedirs(self.socket_dir)
        if self.user:
            pw = pwd.getpwnam(self.user)
            for d in (self.base, self.socket_dir):
                os.chown(d, pw.pw_uid, pw.pw_gid)
        self._check(os.path.join(self.bindir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
                    "-E", "UTF8", "--locale=C", "--no-sync")
        opts = f"-p {self.port} -k {self.socket_dir} -c listen_addresses='' -c max_connections=200"
        if not self.durable:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._check(os.path.join(self.bindir, "pg_ctl"), "-D", data, "-l", os.path.join(self.base, "server.log"),
                    "-o", opts, "-w", "-t", "60", "start")
        return self

    def stop(self) -> None:
        if self.external or self.base is None:
            return
        try:
            self._check(os.path.join(self.bindir, "pg_ctl"), "-D", os.path.join(self.base, "data"),
                        "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL of ``database`` on this server."""
        if self.external:
            from sqlalchemy.engine import make_url

            return make_url(self.external).set(database=database).render_as_string(hide_password=False)
        return f"{DRIVER}://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def _admin(self, sql: str) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        u = make_url(self.url("postgres"))
        kw = {"dbname": u.database, "user": u.username, "autocommit": True}
        if u.password:
            kw["password"] = u.password
        kw["host"] = u.query.get("host") or u.host
        kw["port"] = int(u.query.get("port") or u.port or 5432)
        with psycopg.connect(**kw) as conn:
            conn.execute(sql)

    def create_database(self, prefix: str = "gq") -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        name = f"{re.sub(r'[^a-z0-9_]', '_', prefix.lower())[:40]}_{uuid.uuid4().hex[:10]}"
        self._admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by :meth:`create_database` (its connections are ended)."""
        from sqlalchemy.engine import make_url

        name = make_url(url).database
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
