"""Schema versions of the ledger: Alembic migrations (``ledger/migrations/``), configured here
in code (no alembic.ini), as JupyterHub does for its own database.

At every open (:class:`~jupyter_gpuqueue.ledger.Ledger`), :func:`ensure_schema` looks at the
database's revision (Alembic's ``alembic_version`` table) and:

- **new** (no ledger table): creates the tables of the newest revision (``orm.py``) and stamps it;
- **made before versions existed** (the ledger's tables, no ``alembic_version``): it is revision
  ``0001`` (``migrations/versions/0001_initial.py``); tables it lacks are created, as those
  releases did at every start, and it is stamped ``0001``; a table without one of 0001's columns
  is refused (not a ledger this code knows);
- **at the newest revision**: nothing;
- **older**: upgraded only when asked (``upgrade=True``: ``c.GpuQueueApp.upgrade_db``,
  ``jupyter gpuqueue upgrade-db``), a SQLite file backed up next to it first; otherwise
  :class:`LedgerSchemaError` says which command to run;
- **newer than this code** (a revision it does not know): :class:`LedgerSchemaError`.

Upgrades run in **one transaction** (PostgreSQL and SQLite both have transactional DDL), so a
failed upgrade leaves the ledger as it was. On SQLite foreign keys are switched off for it
(batch mode re-creates tables; with foreign keys on, dropping ``workloads`` would cascade to its
usage intervals) and ``PRAGMA foreign_key_check`` must pass before the commit.

Backups (:func:`backup_sqlite`) use SQLite's online backup API: a consistent copy while the
server runs, WAL included. PostgreSQL is backed up with ``pg_dump`` (README, "Upgrades and
backups").

Making a revision (developers): ``python -m jupyter_gpuqueue.ledger.migrations revision -m "what"
--autogenerate``, then read and fix it by hand (see ``migrations/__init__.py``).
"""

from __future__ import annotations

import functools
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Engine, URL

from ..errors import GpuQueueError
from .orm import Base

log = logging.getLogger(__name__)

#: The revision of a ledger made before schema versions existed.
FIRST_REVISION = "0001"
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
#: Folders of revisions. Tests append a folder with a revision of their own (a second schema
#: version, to test upgrades); the package ships only ``migrations/versions``.
VERSION_LOCATIONS: list[str] = [str(MIGRATIONS_DIR / "versions")]
#: The command an admin runs to upgrade (named in the refusal).
UPGRADE_COMMAND = "jupyter gpuqueue upgrade-db"
_PG_LOCK_KEY = 0x6770_7571  # pg_advisory_xact_lock: one process at a time creates or upgrades


class LedgerSchemaError(GpuQueueError):
    """The ledger's schema is not the one this code uses (older: upgrade it; newer: upgrade
    jupyter_gpuqueue). The service does not start; the REST API answers 503 with the message."""

    status = 503
    reason = "LedgerSchema"


def display_url(url: URL) -> str:
    """The URL for messages and logs: no password."""
    return url.render_as_string(hide_password=True)


# -- Alembic's configuration ------------------------------------------------------------------------


def alembic_config(url: Optional[URL] = None) -> Config:
    """Alembic's Config for the ledger's migrations (no ini file). ``url``: only for Alembic's
    own commands run without a connection (``revision --autogenerate``)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", os.pathsep.join(VERSION_LOCATIONS).replace("%", "%%"))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


@functools.lru_cache(maxsize=8)
def _scripts(locations: tuple[str, ...]) -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def scripts() -> ScriptDirectory:
    """The revisions (cached per set of :data:`VERSION_LOCATIONS`)."""
    return _scripts(tuple(VERSION_LOCATIONS))


def head_revision() -> str:
    """The newest revision this code knows (its ``orm.py``)."""
    heads = scripts().get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"the ledger's migrations must have one head, found {heads}")
    return heads[0]


def known_revisions() -> list[str]:
    """Every revision this code knows, oldest first."""
    return [s.revision for s in reversed(list(scripts().walk_revisions()))]


def revision_of(conn: Connection) -> Optional[str]:
    """The database's revision (``alembic_version``), None where it has none."""
    return MigrationContext.configure(conn).get_current_revision()


# -- connections for schema work -------------------------------------------------------------------


@contextmanager
def _schema_transaction(engine: Engine, local: Optional[threading.local]) -> Iterator[Connection]:
    """One connection in one transaction that holds the database's write lock from its start
    (SQLite: BEGIN IMMEDIATE through the Ledger's "begin" hook, ``local.write``; PostgreSQL: an
    advisory lock), so that two processes opening a ledger at once do not both create or
    upgrade it. SQLite: foreign keys off meanwhile (see the module docstring), checked before
    the commit."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection if sqlite else None
        if sqlite:
            dbapi.execute("PRAGMA foreign_keys=OFF")  # outside a transaction (a no-op inside one)
        if local is not None:
            local.write = True
        try:
            with conn.begin():
                if engine.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY})")
                yield conn
                if sqlite:
                    bad = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if bad:
                        raise LedgerSchemaError(
                            f"the schema change left {len(bad)} rows whose foreign key points nowhere "
                            f"(first: {tuple(bad[0])}); nothing was changed")
        finally:
            if local is not None:
                local.write = False
            if sqlite:
                dbapi.execute("PRAGMA foreign_keys=ON")


def _run_alembic(conn: Connection, fn, *args) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    fn(cfg, *args)


# -- what a Ledger does when it opens ---------------------------------------------------------------


def _first_revision_tables():
    return scripts().get_revision(FIRST_REVISION).module.tables()


def _check_pre_versioning(conn: Connection) -> None:
    """A ledger without ``alembic_version``: every table of revision 0001 it has must have
    0001's columns (tables it lacks are created by 0001's upgrade)."""
    insp = inspect(conn)
    present = set(insp.get_table_names())
    for table in _first_revision_tables().sorted_tables:
        if table.name not in present:
            continue
        have = {c["name"] for c in insp.get_columns(table.name)}
        missing = [c.name for c in table.columns if c.name not in have]
        if missing:
            raise LedgerSchemaError(
                f"table {table.name} of this ledger lacks the columns {', '.join(missing)}: it was not "
                "made by a known release of jupyter_gpuqueue; restore a backup or use another db_url")


def ensure_schema(engine: Engine, local: Optional[threading.local] = None, *, upgrade: bool = False,
                  backup: bool = True, logger: Optional[logging.Logger] = None) -> Optional[str]:
    """Bring the database to this code's schema, or refuse (the module docstring). Returns what
    was done: None (nothing), "created", "stamped" (made before versions existed), "upgraded".
    ``upgrade``: upgrade an older ledger (SQLite: after :func:`backup_sqlite` next to the file,
    unless ``backup`` is False). Raises :class:`LedgerSchemaError`."""
    lg = logger or log
    head = head_revision()
    known = known_revisions()
    done: Optional[str] = None
    with engine.connect() as conn:  # the common case, read only: the ledger is at head
        current = revision_of(conn)
        conn.rollback()
    if current == head:
        return None
    with _schema_transaction(engine, local) as conn:
        current = revision_of(conn)  # again, under the lock
        if current is None:
            tables = set(inspect(conn).get_table_names())
            if not tables & set(Base.metadata.tables):
                Base.metadata.create_all(conn)
                _run_alembic(conn, command.stamp, head)
                lg.info("gpuqueue: created the ledger at %s (schema revision %s)", display_url(engine.url), head)
                return "created"
            _check_pre_versioning(conn)
            _run_alembic(conn, command.upgrade, FIRST_REVISION)
            lg.info("gpuqueue: the ledger at %s was made before schema versions existed: it is revision %s",
                    display_url(engine.url), FIRST_REVISION)
            current, done = FIRST_REVISION, "stamped"
    if current == head:
        return done
    where = display_url(engine.url)
    if current not in known:
        raise LedgerSchemaError(
            f"the ledger at {where} has schema revision {current}, newer than this version of "
            f"jupyter_gpuqueue knows (its newest is {head}): upgrade jupyter_gpuqueue, or restore "
            "a backup made before the ledger was upgraded")
    if not upgrade:
        raise LedgerSchemaError(
            f"the ledger at {where} has schema revision {current}, older than this version of "
            f"jupyter_gpuqueue uses ({head}). Back it up and upgrade it: "
            f"`{UPGRADE_COMMAND} --db-url '{where}'` (or start with c.GpuQueueApp.upgrade_db = True, "
            "which backs up a SQLite ledger next to it and upgrades it)")
    migrate(engine, local, head, backup=backup, logger=lg)
    return "upgraded"


def migrate(engine: Engine, local: Optional[threading.local], revision: str = "head", *,
            backup: bool = True, logger: Optional[logging.Logger] = None) -> tuple[Optional[str], str, Optional[str]]:
    """Upgrade (or, to an older ``revision``, downgrade) the ledger in one transaction; a SQLite
    file is backed up first unless ``backup`` is False. Returns (revision before, revision
    after, the backup's path or None)."""
    lg = logger or log
    target = head_revision() if revision == "head" else revision
    if target not in known_revisions():
        raise LedgerSchemaError(f"unknown schema revision {revision!r}; known: {', '.join(known_revisions())}")
    with engine.connect() as conn:
        before = revision_of(conn)
        conn.rollback()
    if before == target:
        return before, target, None
    saved = None
    path = sqlite_path(engine.url)
    if backup and path and os.path.exists(path):
        saved = backup_sqlite(path, default_backup_path(path, before))
        lg.warning("gpuqueue: backed up the ledger %s to %s before changing its schema", path, saved)
    with _schema_transaction(engine, local) as conn:
        before = revision_of(conn)
        if before is not None and before not in known_revisions():
            raise LedgerSchemaError(f"the ledger has schema revision {before}, unknown to this version of jupyter_gpuqueue")
        order = known_revisions()
        if before is None or order.index(target) >= order.index(before):
            _run_alembic(conn, command.upgrade, target)
        else:
            _run_alembic(conn, command.downgrade, target)
    lg.warning("gpuqueue: the ledger at %s went from schema revision %s to %s", display_url(engine.url), before, target)
    return before, target, saved


# -- backups ----------------------------------------------------------------------------------------


def sqlite_path(url: URL) -> Optional[str]:
    """The file of a SQLite URL (None for another database or an in-memory one)."""
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return os.path.abspath(db)


def default_backup_path(path: str, revision: Optional[str]) -> str:
    """``<ledger>.<UTC time>.rev-<revision>.bak`` next to the ledger (never an existing file)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{path}.{stamp}.rev-{revision or 'none'}.bak"
    out, i = base, 1
    while os.path.exists(out):
        out, i = f"{base}.{i}", i + 1
    return out


def backup_sqlite(path: str, dest: str) -> str:
    """Copy the SQLite ledger ``path`` to ``dest`` with SQLite's online backup API (consistent
    while the server writes; WAL included); ``dest`` must not exist. Returns ``dest``."""
    dest = os.path.abspath(os.path.expanduser(dest))
    if os.path.exists(dest):
        raise FileExistsError(f"{dest} exists; the backup is not written over it")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no SQLite ledger at {path}")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
            out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            out.close()
    finally:
        src.close()
    return dest


# -- for developers: new revisions ------------------------------------------------------------------


def _main(argv: Optional[list[str]] = None) -> int:
    """``python -m jupyter_gpuqueue.ledger.migrations revision -m MESSAGE [--autogenerate]
    [--db-url URL]``: a new revision file in ``migrations/versions`` (autogenerate compares
    ``orm.py`` with a ledger at the current head: by default a temporary SQLite one)."""
    import argparse
    import tempfile

    p = argparse.ArgumentParser(prog="python -m jupyter_gpuqueue.ledger.migrations")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("revision", help="write a new revision (review it by hand)")
    r.add_argument("-m", "--message", required=True)
    r.add_argument("--autogenerate", action="store_true")
    r.add_argument("--db-url", help="a ledger at the current head (default: a temporary SQLite one)")
    r.add_argument("--rev-id", help="the revision id (default: the next number, e.g. 0002)")
    args = p.parse_args(argv)
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    with tempfile.TemporaryDirectory() as tmp:
        url = make_url(args.db_url or f"sqlite:///{tmp}/head.sqlite")
        if args.db_url is None:  # a ledger at the current head, made by the migrations
            engine = create_engine(url)
            with engine.begin() as conn:
                _run_alembic(conn, command.upgrade, "head")
            engine.dispose()
        rev_id = args.rev_id or f"{len(known_revisions()) + 1:04d}"
        command.revision(alembic_config(url), message=args.message, autogenerate=args.autogenerate, rev_id=rev_id)
    return 0


