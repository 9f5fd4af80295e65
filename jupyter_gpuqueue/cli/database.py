"""The ledger's upkeep, offline (no server): ``upgrade-db`` (its schema to this release's,
``ledger/schema.py``) and ``backup FILE`` (a SQLite ledger, with SQLite's online backup API).

Which ledger: ``--db-url``, else ``$GPUQUEUE_DB_URL``, else ``c.GpuQueueApp.db_url`` /
``state_dir`` from the Jupyter server's config files (``jupyter_server_config.py`` / ``.json`` in
the Jupyter config path), else SQLite at ``{jupyter data dir}/gpuqueue/gpuqueue.sqlite``: the
ledger the server would open.
"""

from __future__ import annotations

import os
from typing import Callable, TextIO

from .args import PROG, ArgumentParser, UsageError

ENV_DB_URL = "GPUQUEUE_DB_URL"


def _server_config() -> dict:
    """``GpuQueueApp`` settings of the Jupyter server's config files (later paths win)."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import Config, JSONFileConfigLoader, PyFileConfigLoader

    merged = Config()
    for folder in reversed(jupyter_config_path()):
        for name, loader in (("jupyter_server_config.json", JSONFileConfigLoader),
                             ("jupyter_server_config.py", PyFileConfigLoader)):
            if os.path.isfile(os.path.join(folder, name)):
                try:
                    merged.merge(loader(name, path=folder).load_config())
                except Exception:  # noqa: BLE001 - a config this tool cannot read: defaults
                    continue
    app = merged.get("GpuQueueApp")
    return dict(app) if app else {}


def resolve_db_url(db_url: str | None) -> str:
    """The ledger's URL (see the module docstring)."""
    if db_url:
        return db_url
    if os.environ.get(ENV_DB_URL):
        return os.environ[ENV_DB_URL]
    conf = _server_config()
    if conf.get("db_url"):
        return str(conf["db_url"])
    state_dir = conf.get("state_dir")
    if not state_dir:
        from jupyter_core.paths import jupyter_data_dir

        state_dir = os.path.join(jupyter_data_dir(), "gpuqueue")
    return "sqlite:///" + os.path.join(os.path.abspath(os.path.expanduser(str(state_dir))), "gpuqueue.sqlite")


def _open(url: str):
    from ..ledger import Ledger
    from ..ledger.schema import sqlite_path
    from sqlalchemy.engine import make_url

    path = sqlite_path(make_url(url if "://" in url else "sqlite:///" + os.path.abspath(url)))
    if path is not None and not os.path.exists(path):
        raise UsageError(f"no ledger at {path} (give --db-url, or set {ENV_DB_URL})", field="db-url")
    return Ledger(url, check_schema=False)


def cmd_upgrade_db(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    """Upgrade the ledger's schema to this release's (a SQLite file is backed up first)."""
    from ..ledger import schema

    url = resolve_db_url(args.db_url)
    ledger = _open(url)
    try:
        where = schema.display_url(ledger.url)
        before = ledger.schema_revision()
        head = schema.head_revision()
        if before is not None and before not in schema.known_revisions():
            print(f"{PROG} upgrade-db: the ledger at {where} has schema revision {before}, newer than this "
                  f"release knows ({head}): upgrade jupyter_gpuqueue instead", file=err)
            return 2
        if before == head and args.revision == "head":
            out.write(f"the ledger at {where} is at the newest schema revision ({head}): nothing to do\n")
            return 0
        was, now, saved = ledger.migrate(args.revision, backup=not args.no_backup)
        if saved:
            out.write(f"backed up {schema.sqlite_path(ledger.url)} to {saved}\n")
        if before is None and ledger.schema_action == "created":  # an empty database (a new PostgreSQL one)
            out.write(f"created the ledger's tables at {where}\n")
        elif before is None:
            out.write(f"the ledger at {where} was made before schema versions existed: stamped {schema.FIRST_REVISION}\n")
        if was != now:
            out.write(f"the ledger at {where}: schema revision {was} -> {now}\n")
        else:
            out.write(f"the ledger at {where} is at schema revision {now}\n")
    finally:
        ledger.close()
    return 0


def cmd_backup(args, out: TextIO, err: TextIO, stdin: TextIO, client=None) -> int:
    """Copy a SQLite ledger to FILE while the server may run (SQLite's online backup API)."""
    url = resolve_db_url(args.db_url)
    ledger = _open(url)
    try:
        try:
            dest = ledger.backup(args.file)
        except FileExistsError as e:
            raise UsageError(str(e), field="FILE") from None
    finally:
        ledger.close()
    out.write(f"backed up the ledger to {dest}\n")
    return 0


def _add_upgrade_db(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "upgrade-db",
        help="upgrade the ledger's schema to this release's (offline; backs up SQLite first)",
        description="Upgrade the ledger (workloads, usage, audit log, stored configuration, budgets) to the "
        "schema of this release of jupyter_gpuqueue, in one transaction. A SQLite ledger is first backed up "
        "next to it (<file>.<time>.rev-<revision>.bak); back up PostgreSQL with pg_dump first. Run it with the "
        "server stopped, or let the server do it at start with c.GpuQueueApp.upgrade_db = True.",
    )
    p.add_argument("--db-url", help="the ledger's SQLAlchemy URL or SQLite file (default: $GPUQUEUE_DB_URL, "
                   "else c.GpuQueueApp.db_url / state_dir of the Jupyter server's config, else "
                   "{jupyter data dir}/gpuqueue/gpuqueue.sqlite)")
    p.add_argument("--revision", default="head",
                   help="the schema revision to go to (default: head, the newest; an older one downgrades)")
    p.add_argument("--no-backup", action="store_true", help="do not back up a SQLite ledger first")


def _add_backup(sub, server: ArgumentParser, as_json: ArgumentParser) -> None:
    p = sub.add_parser(
        "backup",
        help="copy the SQLite ledger to FILE, safely while the server runs",
        description="Copy the SQLite ledger to FILE with SQLite's online backup API: a consistent copy even "
        "while the server writes. FILE must not exist. A PostgreSQL ledger is backed up with pg_dump "
        "(README, \"Upgrades and backups\").",
    )
    p.add_argument("file", metavar="FILE", help="where the copy goes (must not exist)")
    p.add_argument("--db-url", help="the ledger's SQLAlchemy URL or SQLite file (default: as for upgrade-db)")


COMMANDS: dict[str, Callable[..., int]] = {"upgrade-db": cmd_upgrade_db, "backup": cmd_backup}
PARSERS: dict[str, Callable[..., None]] = {"upgrade-db": _add_upgrade_db, "backup": _add_backup}
