"""The ledger: durable workloads and usage intervals (SQLAlchemy 2.x).

SQLite by default, opened in WAL mode with ``synchronous=FULL`` so that a commit that has returned
survives a crash or power loss (DESIGN.md: "a submission is persisted before it is acknowledged"),
and a ``busy_timeout`` so that a second process (the CLI) reading the same file waits instead of
failing. PostgreSQL (or any SQLAlchemy URL) works the same way.

Concurrency: the service uses one Ledger from its event-loop thread. Each call outside
:meth:`Ledger.transaction` runs in its own short transaction and commits before returning. The
"current transaction" of :meth:`Ledger.transaction` is per thread (``threading.local``), so a call
from another thread never joins it; SQLite still admits a single writer at a time.
"""

from __future__ import annotations

import json
import math
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Optional

from sqlalchemy import bindparam, case, create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ..errors import Conflict, NotFound, ValidationError
from . import schema
from .orm import (
    INTERVAL_COLUMNS,
    AuditEntry,
    BudgetRow,
    ConfigVersion,
    Setting,
    MemorySample,
    UtilizationSample,
    WORKLOAD_COLUMNS,
    WORKLOAD_STATES,
    UsageInterval,
    WorkloadRow,
)

#: Milliseconds a SQLite connection waits for another writer's lock before failing.
SQLITE_BUSY_TIMEOUT_MS = 10_000

_REQUIRED = ("uid", "namespace", "name", "owner", "local_queue", "state", "spec", "created_at")
_NOT_NULL = _REQUIRED + ("priority", "evictions")
_INT_FIELDS = ("priority", "exit_code", "evictions")
_FLOAT_FIELDS = ("created_at", "admitted_at", "started_at", "finished_at")
_STR_FIELDS = (
    "uid", "namespace", "name", "owner", "local_queue", "cluster_queue", "priority_class",
    "state", "reason", "message",
)
_GROUP_KEYS = ("namespace", "owner", "local_queue", "cluster_queue", "workload_uid", "flavor", "resource")
_CHUNK = 500  # bound parameters per IN (...) clause; SQLite's historical limit is 999

# add_workload_groups' fast path, built once.
_INSERT_WORKLOADS = insert(WorkloadRow.__table__)
_ROW_DEFAULTS = {**{c: None for c in WORKLOAD_COLUMNS}, "priority": 0, "reason": "", "evictions": 0}

# find_workload's statement, built once (a submission's name check runs it).
_FIND_WORKLOAD = select(WorkloadRow.__table__).where(
    WorkloadRow.__table__.c.namespace == bindparam("b_ns"), WorkloadRow.__table__.c.name == bindparam("b_name"))

# admit_workloads' statements, built once.
_ADMIT = (update(WorkloadRow.__table__).where(WorkloadRow.__table__.c.uid == bindparam("b_uid"))
          .values(state="Admitted", admission=bindparam("b_admission"), admitted_at=bindparam("b_admitted_at"),
                  cluster_queue=bindparam("b_cq"), reason=None, message=None))
_OPEN_INTERVALS = insert(UsageInterval.__table__)

# close_intervals, built once (see Ledger._update_statement): an interval opened after the end is
# closed at its own start (empty).
_INTERVALS = UsageInterval.__table__
_CLOSE_INTERVALS = (
    update(_INTERVALS)
    .where(_INTERVALS.c.workload_uid == bindparam("b_uid"), _INTERVALS.c.end.is_(None))
    .values(end=case((_INTERVALS.c.start > bindparam("b_end"), _INTERVALS.c.start), else_=bindparam("b_end")))
)


POSTGRESQL_EXTRA = 'pip install "jupyter_gpuqueue[postgresql]"'


def _create_engine(url, **kwargs) -> Engine:
    """``create_engine(url)``; a PostgreSQL URL whose driver is not installed raises
    ValidationError naming ``db_url`` and the extra that brings the driver (psycopg 3, SQLAlchemy's
    ``postgresql+psycopg``), instead of the driver's bare ModuleNotFoundError."""
    try:
        return create_engine(url, **kwargs)
    except ImportError as e:  # no module; or psycopg without its binary package nor a libpq
        if url.get_backend_name() != "postgresql":
            raise
        driver = url.get_driver_name()
        fix = POSTGRESQL_EXTRA
        if driver != "psycopg":  # the extra brings psycopg 3: SQLAlchemy's postgresql+psycopg
            fix += f" and use a postgresql+psycopg:// URL (this one asks for the {driver} driver)"
        raise ValidationError(
            f"the PostgreSQL driver of {url.drivername}:// is not installed ({e}): {fix}",
            field="db_url") from None


def _is_sqlite(url) -> bool:
    return url.get_backend_name() == "sqlite"


def _check_field(name: str, value: Any) -> None:
    """Validate one workloads column value; raises ValidationError(field=name)."""
    if name not in WORKLOAD_COLUMNS:
        raise ValidationError(
            f"unknown workload field; expected one of {', '.join(WORKLOAD_COLUMNS)}", field=name
        )
    if value is None:
        if name in _NOT_NULL:
            raise ValidationError("must not be null", field=name)
        return
    if name in _STR_FIELDS and not isinstance(value, str):
        raise ValidationError(f"must be a string, got {type(value).__name__}", field=name)
    if name in _INT_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValidationError(f"must be an integer, got {value!r}", field=name)
    if name in _FLOAT_FIELDS and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    ):
        raise ValidationError(f"must be a time in seconds since the epoch, got {value!r}", field=name)
    if name == "state" and value not in WORKLOAD_STATES:
        raise ValidationError(f"must be one of {', '.join(WORKLOAD_STATES)}, got {value!r}", field=name)
    if name in ("uid", "namespace", "name") and not value:
        raise ValidationError("must not be empty", field=name)
    if name in ("spec", "admission", "run"):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"must be JSON-serialisable: {e}", field=name) from None
    if name == "evictions" and value < 0:
        raise ValidationError("must be >= 0", field=name)


def _num(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"must be a finite number, got {value!r}", field=field)
    return float(value)


class Ledger:
    """Durable store of workloads and their usage intervals. (Over 400 lines: one method per
    statement the service runs, each prebuilt once for speed; the schema and its migrations are in
    ``orm.py``, ``schema.py`` and ``migrations/``, reports in ``reports.py``.)

    ``url``: a SQLAlchemy URL (``sqlite:////abs/path/gpuqueue.db``, ``postgresql+psycopg://…``) or a
    plain file path (taken as SQLite). For a SQLite file the parent directory is created. Rows are
    returned as plain dicts keyed by column name with the JSON columns (``spec``, ``admission``,
    ``run``) decoded.

    Schema (``ledger/schema.py``): a new database gets the tables of the newest revision; a
    ledger made before schema versions existed is stamped as the first one; an older one is
    upgraded only with ``upgrade=True`` (a SQLite file is backed up next to it first, unless
    ``backup`` is False), else :class:`~jupyter_gpuqueue.ledger.schema.LedgerSchemaError` names the
    command to run; one newer than this code raises it too. ``check_schema=False`` skips all of
    this (``jupyter gpuqueue upgrade-db`` and ``backup`` open a ledger of any revision that way).
    """

    def __init__(self, url: str, *, upgrade: bool = False, backup: bool = True, check_schema: bool = True,
                 logger=None):
        if not isinstance(url, str) or not url:
            raise ValidationError("ledger URL must be a non-empty string", field="url")
        if "://" not in url:
            url = "sqlite:///" + os.path.abspath(os.path.expanduser(url))
        parsed = make_url(url)
        kwargs: dict[str, Any] = {}
        if _is_sqlite(parsed):
            db = parsed.database
            if db and db != ":memory:" and not db.startswith("file:"):
                parent = os.path.dirname(os.path.abspath(db))
                os.makedirs(parent, exist_ok=True)
            kwargs["connect_args"] = {"check_same_thread": False}
        else:
            kwargs["pool_pre_ping"] = True
        self.url = parsed
        self.engine: Engine = _create_engine(parsed, **kwargs)
        self._local = threading.local()
        self._update_stmts: dict[tuple[str, ...], Any] = {}  # see _update_statement
        # Write transactions of this process take this lock before BEGIN (IMMEDIATE): the service's
        # loop thread and the group-commit thread (group_commit.py) then hand the write lock to
        # each other at once, instead of polling for SQLite's lock in its busy handler (which
        # sleeps 1, 2, 5, 10, ... 100 ms between tries: the event loop would stall that long).
        # Other processes still meet SQLite's lock and busy_timeout.
        self._write_lock = threading.RLock()
        if _is_sqlite(parsed):
            self._configure_sqlite(self.engine, self._local)
        #: What opening did to the schema: None, "created", "stamped" or "upgraded" (schema.py).
        self.schema_action: Optional[str] = None
        if check_schema:
            try:
                self.schema_action = schema.ensure_schema(self.engine, self._local, upgrade=upgrade,
                                                          backup=backup, logger=logger)
            except BaseException:
                self.engine.dispose()
                raise
        self._Session = sessionmaker(bind=self.engine, expire_on_commit=False)

    @staticmethod
    def _configure_sqlite(engine: Engine, local: Optional[threading.local] = None) -> None:
        # pysqlite's own transaction handling issues BEGIN lazily (not before SELECT) and breaks
        # SAVEPOINT; SQLAlchemy's documented recipe: autocommit at the driver, BEGIN from "begin".
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn):
            # A transaction that writes takes the write lock up front (BEGIN IMMEDIATE), waiting
            # up to busy_timeout for another writer (the group-commit thread, another process).
            # A deferred BEGIN that reads first and writes later cannot wait: when another
            # connection writes in between, SQLite fails the upgrade at once with "database is
            # locked" (busy_timeout does not apply), and a decision already applied to the
            # backend (a started job) would go unrecorded. Found by tests/test_crash.py.
            conn.exec_driver_sql("BEGIN IMMEDIATE" if getattr(local, "write", False) else "BEGIN")

    # ------------------------------------------------------------------ transactions

    @property
    def _tx(self) -> Optional[Session]:
        return getattr(self._local, "tx", None)

    @contextmanager
    def _scope(self, write: bool = False) -> Iterator[Session]:
        """The current :meth:`transaction`, or a new one; ``write``: it will write (SQLite:
        BEGIN IMMEDIATE, see ``_configure_sqlite``)."""
        tx = self._tx
        if tx is not None:
            yield tx
            return
        if write:
            self._write_lock.acquire()
        self._local.write = write
        try:
            with self._Session() as s, s.begin():
                yield s
        finally:
            self._local.write = False
            if write:
                self._write_lock.release()

    @contextmanager
    def transaction(self) -> Iterator["Ledger"]:
        """Group several calls into one atomic write.

        Inside ``with ledger.transaction():`` every method of this Ledger (called from the same
        thread) joins one database transaction, committed when the block ends and rolled back if it
        raises (the exception propagates). A nested ``transaction()`` joins the outer one.
        """
        if self._tx is not None:
            yield self
            return
        with self._scope(write=True) as s:
            self._local.tx = s
            try:
                yield self
            finally:
                self._local.tx = None

    def close(self) -> None:
        """Release every pooled connection. The Ledger must not be used afterwards."""
        self.engine.dispose()

    # ------------------------------------------------------------------ schema and backups

    def schema_revision(self) -> Optional[str]:
        """The database's schema revision (None: none recorded, i.e. made before versions
        existed, or empty)."""
        with self.engine.connect() as c:
            return schema.revision_of(c)

    def migrate(self, revision: str = "head", *, backup: bool = True) -> tuple[Optional[str], str, Optional[str]]:
        """Upgrade (or downgrade) the schema to ``revision`` in one transaction, a SQLite file
        backed up first unless ``backup`` is False; returns (before, after, backup path or None).
        A ledger made before versions existed is stamped first, an empty database gets the newest
        tables (``schema.ensure_schema``; which of the two: :attr:`schema_action`)."""
        if self.schema_revision() is None:
            try:
                self.schema_action = schema.ensure_schema(self.engine, self._local, upgrade=False)
            except schema.LedgerSchemaError:
                self.schema_action = "stamped"  # as the first revision; older than head: upgraded below
        return schema.migrate(self.engine, self._local, revision, backup=backup)

    def backup(self, dest: str) -> str:
        """Copy a SQLite ledger to ``dest`` (SQLite's online backup API; ``dest`` must not
        exist); returns the path. ValidationError for another database (use ``pg_dump``)."""
        path = schema.sqlite_path(self.url)
        if path is None:
            raise ValidationError(
                f"{schema.display_url(self.url)} is not a SQLite file: back up PostgreSQL with pg_dump "
                "(README, \"Upgrades and backups\")", field="db_url")
        return schema.backup_sqlite(path, dest)

    def journal_mode(self) -> str:
        """SQLite's ``PRAGMA journal_mode`` ("wal"), or "" for other databases."""
        if not _is_sqlite(self.url):
            return ""
        with self.engine.connect() as c:
            return str(c.exec_driver_sql("PRAGMA journal_mode").scalar()).lower()

    # ------------------------------------------------------------------ workloads

    def add_workload(self, rec: dict) -> None:
        """Insert a workload. ``rec`` keys are column names of ``workloads``; required: uid,
        namespace, name, owner, local_queue, state, spec, created_at.

        Raises Conflict(field="name") if namespace/name exists, Conflict(field="uid") if the uid
        exists, ValidationError(field=<column>) for an unknown, missing or ill-typed field. Durable
        when it returns (outside :meth:`transaction`).
        """
        if not isinstance(rec, dict):
            raise ValidationError("workload record must be a dict", field="workload")
        for name in _REQUIRED:
            if name not in rec:
                raise ValidationError("required", field=name)
        for name, value in rec.items():
            _check_field(name, value)
        values = {"priority": 0, "reason": "", "evictions": 0, **rec}
        with self._scope(write=True) as s:
            self._check_unique(s, rec["uid"], rec["namespace"], rec["name"])
            try:
                with s.begin_nested():
                    s.execute(insert(WorkloadRow), [values])
            except IntegrityError:  # a concurrent writer won the race
                self._check_unique(s, rec["uid"], rec["namespace"], rec["name"])
                raise

    def add_workload_groups(self, groups: list[list[dict]]) -> list[Optional[Exception]]:
        """Insert several groups of workloads in **one** transaction (one commit: one fsync),
        each group all-or-nothing; used by the group commit (``ledger/group_commit.py``).

        ``groups``: lists of records as for :meth:`add_workload`. Returns one entry per group:
        None (inserted, durable once this returns) or the error that group alone failed with
        (ValidationError naming the field, Conflict naming ``name`` or ``uid``); the other groups
        are committed all the same. An error of the commit itself (disk full, I/O error) is raised:
        then nothing of this call is durable. Must not be called inside :meth:`transaction`.
        """
        if self._tx is not None:
            raise RuntimeError("add_workload_groups runs its own transaction")
        results: list[Optional[Exception]] = [None] * len(groups)
        values: list[list[dict]] = []
        for i, group in enumerate(groups):
            try:
                vals = []
                for rec in group:
                    if not isinstance(rec, dict):
                        raise ValidationError("workload record must be a dict", field="workload")
                    for name in _REQUIRED:
                        if name not in rec:
                            raise ValidationError("required", field=name)
                    for name, value in rec.items():
                        _check_field(name, value)
                    vals.append({**_ROW_DEFAULTS, **rec})  # every column: one executemany for all
                values.append(vals)
            except ValidationError as exc:
                results[i] = exc
                values.append([])
        with self._scope(write=True) as s:
            everything = [v for vals in values for v in vals]
            try:
                # Fast path: every row in one statement, under one savepoint.
                with s.begin_nested():
                    if everything:  # Core, not the ORM's bulk insert: a tenth of the CPU
                        s.connection().execute(_INSERT_WORKLOADS, everything)
            except IntegrityError:
                # Some row collides (a name or uid taken): group by group, each under its own
                # savepoint, so that only the offending groups fail.
                for i, vals in enumerate(values):
                    if not vals or results[i] is not None:
                        continue
                    try:
                        for v in vals:
                            self._check_unique(s, v["uid"], v["namespace"], v["name"])
                        with s.begin_nested():
                            s.connection().execute(_INSERT_WORKLOADS, vals)
                    except (Conflict, IntegrityError) as exc:
                        results[i] = exc if isinstance(exc, Conflict) else Conflict(
                            f"workload {vals[0]['namespace']}/{vals[0]['name']} already exists", field="name")
        return results

    @staticmethod
    def _check_unique(s: Session, uid: str, namespace: str, name: str, exclude: Optional[str] = None) -> None:
        q = select(WorkloadRow.uid).where(WorkloadRow.namespace == namespace, WorkloadRow.name == name)
        if exclude is not None:
            q = q.where(WorkloadRow.uid != exclude)
        if s.execute(q).first() is not None:
            raise Conflict(f"workload {namespace}/{name} already exists", field="name")
        if exclude is None and s.get(WorkloadRow, uid) is not None:
            raise Conflict(f"a workload with uid {uid} already exists", field="uid")

    def update_workload(self, uid: str, **fields) -> None:
        """Set columns of workload ``uid`` (committed when it returns, outside a transaction).

        Raises NotFound(field="uid") for an unknown uid, ValidationError(field=<column>) for an
        unknown or ill-typed column (``uid`` cannot change), Conflict(field="name") if a rename
        collides.
        """
        if "uid" in fields:
            raise ValidationError("the uid of a workload cannot change", field="uid")
        for name, value in fields.items():
            _check_field(name, value)
        with self._scope(write=True) as s:
            if fields and "namespace" not in fields and "name" not in fields:
                # The common case (state, admission, run, reason): one statement; its row count
                # tells an unknown uid (the background loop makes several per job). The statement
                # is built once per set of columns: building it per call cost ≈ 0.3 ms, ten times
                # its execution (BENCHMARKS.md, "The live service").
                res = s.connection().execute(self._update_statement(tuple(sorted(fields))),
                                             {"b_uid": uid, **{"v_" + k: v for k, v in fields.items()}})
                if res.rowcount == 0:
                    raise NotFound(f"no workload with uid {uid}", field="uid")
                return
            row = s.execute(
                select(WorkloadRow.namespace, WorkloadRow.name).where(WorkloadRow.uid == uid)
            ).first()
            if row is None:
                raise NotFound(f"no workload with uid {uid}", field="uid")
            if not fields:
                return
            if "namespace" in fields or "name" in fields:
                ns = fields.get("namespace", row.namespace)
                nm = fields.get("name", row.name)
                self._check_unique(s, uid, ns, nm, exclude=uid)
            s.execute(update(WorkloadRow).where(WorkloadRow.uid == uid).values(**fields))

    def _update_statement(self, columns: tuple[str, ...]):
        """``UPDATE workloads SET <columns> WHERE uid = :b_uid`` (parameters ``v_<column>``),
        built once per set of columns."""
        stmt = self._update_stmts.get(columns)
        if stmt is None:
            table = WorkloadRow.__table__
            stmt = self._update_stmts[columns] = (
                update(table).where(table.c.uid == bindparam("b_uid"))
                .values({c: bindparam("v_" + c) for c in columns}))
        return stmt

    def set_reasons(self, items: list[tuple[str, Optional[str], Optional[str]]]) -> None:
        """Set ``reason`` and ``message`` of many workloads in one statement (executemany):
        ``items`` are ``(uid, reason, message)``; unknown uids are skipped. For the scheduling
        loop, whose cycles give many pending workloads a new reason at once."""
        if not items:
            return
        for uid, reason, message in items:
            _check_field("reason", reason)
            _check_field("message", message)
        stmt = (update(WorkloadRow.__table__)
                .where(WorkloadRow.__table__.c.uid == bindparam("b_uid"))
                .values(reason=bindparam("b_reason"), message=bindparam("b_message")))
        with self._scope(write=True) as s:
            s.connection().execute(stmt, [{"b_uid": u, "b_reason": r, "b_message": m} for u, r, m in items])

    def admit_workloads(self, admissions: list[dict], intervals: list[dict]) -> None:
        """Record many admissions in one transaction and two statements (executemany), for a
        scheduling tick that admits many workloads (one UPDATE and one INSERT each cost ≈ 1 ms
        through the ORM). ``admissions``: ``{"uid", "admission", "admitted_at", "cluster_queue"}``
        each (state becomes Admitted, reason and message are cleared); ``intervals``: the usage
        intervals they open, ``{"workload_uid", "flavor", "resource", "quantity",
        "gpu_equivalent", "usd_per_hour", "start"}``. Raises NotFound(field="uid") (nothing
        written) for an unknown uid, ValidationError naming a bad column."""
        if not admissions:
            return
        for a in admissions:
            for name in ("admission", "admitted_at", "cluster_queue"):
                _check_field(name, a[name])
        stmt = _ADMIT
        rows = [{"b_uid": a["uid"], "b_admission": a["admission"], "b_admitted_at": a["admitted_at"],
                 "b_cq": a["cluster_queue"]} for a in admissions]
        for iv in intervals:
            for name in ("gpu_equivalent", "usd_per_hour", "start"):
                if _num(iv[name], name) < 0:
                    raise ValidationError("must be >= 0", field=name)
        with self._scope(write=True) as s:
            conn = s.connection()
            res = conn.execute(stmt, rows)
            if conn.dialect.supports_sane_multi_rowcount and res.rowcount != len(rows):
                raise NotFound(f"{len(rows) - res.rowcount} of {len(rows)} admitted workloads are unknown",
                               field="uid")
            if intervals:
                conn.execute(_OPEN_INTERVALS, [{**iv, "end": None} for iv in intervals])

    def delete_workload(self, uid: str) -> bool:
        """Delete a workload and its usage intervals. Returns False if it did not exist."""
        with self._scope(write=True) as s:
            s.execute(delete(UsageInterval).where(UsageInterval.workload_uid == uid))
            res = s.execute(delete(WorkloadRow).where(WorkloadRow.uid == uid))
            return res.rowcount > 0

    @staticmethod
    def _row(r) -> dict:
        return dict(r._mapping)

    def get_workload(self, uid: str) -> Optional[dict]:
        """The workload row as a dict, or None."""
        with self._scope() as s:
            r = s.execute(select(WorkloadRow.__table__).where(WorkloadRow.uid == uid)).first()
            return None if r is None else self._row(r)

    def find_workload(self, namespace: str, name: str) -> Optional[dict]:
        """The workload ``namespace/name`` as a dict, or None."""
        with self._scope() as s:
            r = s.connection().execute(_FIND_WORKLOAD, {"b_ns": namespace, "b_name": name}).first()
            return None if r is None else self._row(r)

    def list_workloads(
        self, states: Optional[Iterable[str]] = None, namespace: Optional[str] = None
    ) -> list[dict]:
        """Workloads (optionally only those in ``states`` / ``namespace``), oldest first
        (``created_at``, then ``uid``)."""
        q = select(WorkloadRow.__table__)
        if states is not None:
            states = list(states)
            for st in states:
                if st not in WORKLOAD_STATES:
                    raise ValidationError(
                        f"unknown state {st!r}; expected one of {', '.join(WORKLOAD_STATES)}", field="state"
                    )
            q = q.where(WorkloadRow.state.in_(states))
        if namespace is not None:
            q = q.where(WorkloadRow.namespace == namespace)
        q = q.order_by(WorkloadRow.created_at, WorkloadRow.uid)
        with self._scope() as s:
            return [self._row(r) for r in s.execute(q)]

    # ------------------------------------------------------------------ usage intervals

    def open_interval(
        self,
        uid: str,
        flavor: str,
        resource: str,
        quantity: int,
        gpu_equivalent: float,
        usd_per_hour: float,
        start: float,
    ) -> int:
        """Open a usage interval for workload ``uid`` and return its id.

        ``quantity``: devices (GPUs or MIG slices); ``gpu_equivalent``: GPUs they amount to;
        ``usd_per_hour``: USD per hour of the whole interval; ``start``: seconds since the epoch.
        Raises NotFound(field="uid"), ValidationError naming the bad argument.
        """
        if not isinstance(flavor, str) or not flavor:
            raise ValidationError("must be a non-empty string", field="flavor")
        if not isinstance(resource, str) or not resource:
            raise ValidationError("must be a non-empty string", field="resource")
        if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 0:
            raise ValidationError(f"must be an integer >= 0, got {quantity!r}", field="quantity")
        gpu_eq = _num(gpu_equivalent, "gpu_equivalent")
        price = _num(usd_per_hour, "usd_per_hour")
        if gpu_eq < 0:
            raise ValidationError("must be >= 0", field="gpu_equivalent")
        if price < 0:
            raise ValidationError("must be >= 0", field="usd_per_hour")
        start = _num(start, "start")
        with self._scope(write=True) as s:
            # existence only: not s.get(), which would load (and decode) the whole row
            if s.execute(select(WorkloadRow.uid).where(WorkloadRow.uid == uid)).first() is None:
                raise NotFound(f"no workload with uid {uid}", field="uid")
            res = s.execute(
                insert(UsageInterval)
                .values(
                    workload_uid=uid, flavor=flavor, resource=resource, quantity=quantity,
                    gpu_equivalent=gpu_eq, usd_per_hour=price, start=start, end=None,
                )
                .returning(UsageInterval.id)
            )
            return int(res.scalar_one())

    def close_intervals(self, uid: str, end: float) -> None:
        """Close every open interval of workload ``uid`` at ``end`` (seconds; an interval opened
        after ``end`` is closed at its own start, i.e. empty)."""
        end = _num(end, "end")
        with self._scope(write=True) as s:
            s.connection().execute(_CLOSE_INTERVALS, {"b_uid": uid, "b_end": end})

    def open_intervals(self) -> list[dict]:
        """Every interval not yet closed (``end`` is None), by id."""
        q = select(UsageInterval.__table__).where(UsageInterval.end.is_(None)).order_by(UsageInterval.id)
        with self._scope() as s:
            return [self._row(r) for r in s.execute(q)]

    def intervals(self, uid: Optional[str] = None) -> list[dict]:
        """Intervals (of one workload if ``uid`` is given), by id."""
        q = select(UsageInterval.__table__).order_by(UsageInterval.id)
        if uid is not None:
            q = q.where(UsageInterval.workload_uid == uid)
        with self._scope() as s:
            return [self._row(r) for r in s.execute(q)]

    # ------------------------------------------------------------------ cost

    @staticmethod
    def _hours(now: float):
        """SQL expression: hours of an interval, open intervals counted up to ``now``, never < 0."""
        seconds = func.coalesce(UsageInterval.end, now) - UsageInterval.start
        return case((seconds > 0, seconds), else_=0.0) / 3600.0

    def cost_usd(self, uid: str, now: float) -> float:
        """USD charged to workload ``uid``: Σ usd_per_hour × hours over its intervals, open intervals
        counting up to ``now`` (seconds). 0.0 for a workload without intervals."""
        return self.costs_usd([uid], now).get(uid, 0.0)

    def gpu_hours(self, uid: str, now: float) -> float:
        """GPU-hours used by workload ``uid``: Σ gpu_equivalent × hours (open intervals up to ``now``)."""
        now = _num(now, "now")
        q = select(func.coalesce(func.sum(UsageInterval.gpu_equivalent * self._hours(now)), 0.0)).where(
            UsageInterval.workload_uid == uid
        )
        with self._scope() as s:
            return float(s.execute(q).scalar_one())

    def costs_usd(self, uids: Iterable[str], now: float) -> dict[str, float]:
        """USD per workload for many workloads in one query (per 500 uids): ``{uid: usd}``, with 0.0
        for a uid that has no interval."""
        now = _num(now, "now")
        uids = list(dict.fromkeys(uids))
        out = {u: 0.0 for u in uids}
        cost = func.sum(UsageInterval.usd_per_hour * self._hours(now))
        with self._scope() as s:
            for i in range(0, len(uids), _CHUNK):
                chunk = uids[i:i + _CHUNK]
                q = (
                    select(UsageInterval.workload_uid, cost)
                    .where(UsageInterval.workload_uid.in_(chunk))
                    .group_by(UsageInterval.workload_uid)
                )
                for wuid, usd in s.execute(q):
                    out[wuid] = float(usd or 0.0)
        return out

    def usage_summary(
        self,
        now: float,
        group_by: Iterable[str] = ("namespace",),
        since: Optional[float] = None,
        until: Optional[float] = None,
    ) -> list[dict]:
        """GPU-hours and USD per group, for reports ("cost per team, per month, per GPU type").

        ``group_by``: any of namespace, owner, local_queue, cluster_queue, workload_uid, flavor,
        resource. Only the part of each interval inside [``since``, ``until``) counts (a month is
        ``since=<first second of the month>, until=<first of the next>``); open intervals count up
        to ``now``. Returns ``[{<group keys>..., "gpuHours": float, "costUsd": float}]`` sorted by
        the group keys. Raises ValidationError(field="group_by") for an unknown key.
        """
        now = _num(now, "now")
        keys = list(group_by)
        for k in keys:
            if k not in _GROUP_KEYS:
                raise ValidationError(f"unknown key {k!r}; expected any of {', '.join(_GROUP_KEYS)}", field="group_by")
        lo = -math.inf if since is None else _num(since, "since")
        hi = math.inf if until is None else _num(until, "until")
        cols = {
            "namespace": WorkloadRow.namespace, "owner": WorkloadRow.owner,
            "local_queue": WorkloadRow.local_queue, "cluster_queue": WorkloadRow.cluster_queue,
            "workload_uid": UsageInterval.workload_uid, "flavor": UsageInterval.flavor,
            "resource": UsageInterval.resource,
        }
        q = select(
            *[cols[k].label(k) for k in keys],
            UsageInterval.start, UsageInterval.end, UsageInterval.gpu_equivalent, UsageInterval.usd_per_hour,
        ).join(WorkloadRow, WorkloadRow.uid == UsageInterval.workload_uid)
        if since is not None:
            q = q.where(func.coalesce(UsageInterval.end, now) > lo)
        if until is not None:
            q = q.where(UsageInterval.start < hi)
        acc: dict[tuple, list[float]] = {}
        with self._scope() as s:
            for r in s.execute(q):
                m = r._mapping
                end = now if m["end"] is None else m["end"]
                hours = max(0.0, min(end, hi) - max(m["start"], lo)) / 3600.0
                key = tuple(m[k] for k in keys)
                a = acc.setdefault(key, [0.0, 0.0])
                a[0] += m["gpu_equivalent"] * hours
                a[1] += m["usd_per_hour"] * hours
        out = []
        for key in sorted(acc, key=lambda t: tuple("" if v is None else str(v) for v in t)):
            row: dict[str, Any] = dict(zip(keys, key))
            row["gpuHours"], row["costUsd"] = acc[key]
            out.append(row)
        return out

    # ------------------------------------------------------------------ reports, budgets, utilization

    def report_intervals(self, now: float, since: Optional[float] = None, until: Optional[float] = None) -> list[dict]:
        """Usage intervals overlapping [``since``, ``until``) joined with their workload, for
        ``ledger/reports.py``: ``[{"id", "workload_uid", "namespace", "name", "owner", "local_queue",
        "cluster_queue", "state", "flavor", "resource", "quantity", "gpu_equivalent",
        "usd_per_hour", "start", "end"}]`` by id, where an open interval's ``end`` is ``now``
        (seconds since the epoch) and ``open`` tells it was open. Nothing is clipped here."""
        now = _num(now, "now")
        q = select(
            UsageInterval.id, UsageInterval.workload_uid, WorkloadRow.namespace, WorkloadRow.name,
            WorkloadRow.owner, WorkloadRow.local_queue, WorkloadRow.cluster_queue, WorkloadRow.state,
            UsageInterval.flavor, UsageInterval.resource, UsageInterval.quantity,
            UsageInterval.gpu_equivalent, UsageInterval.usd_per_hour, UsageInterval.start, UsageInterval.end,
        ).join(WorkloadRow, WorkloadRow.uid == UsageInterval.workload_uid).order_by(UsageInterval.id)
        if since is not None:
            q = q.where(func.coalesce(UsageInterval.end, now) > _num(since, "since"))
        if until is not None:
            q = q.where(UsageInterval.start < _num(until, "until"))
        out = []
        with self._scope() as s:
            for r in s.execute(q):
                d = dict(r._mapping)
                d["open"] = d["end"] is None
                if d["end"] is None:
                    d["end"] = max(now, d["start"])
                out.append(d)
        return out

    def wait_history(self, uids: Iterable[str]) -> dict[str, dict]:
        """For ``ledger/reports.wait_report``: ``{uid: {"created_at", "preemptions": [at, ...]}}``
        of these workloads (seconds since the epoch; the preemptions kept in their spec)."""
        uids = list(set(uids))
        out: dict[str, dict] = {}
        evicted: list[str] = []
        with self._scope() as s:
            for k in range(0, len(uids), 500):
                q = select(WorkloadRow.uid, WorkloadRow.created_at, WorkloadRow.evictions).where(
                    WorkloadRow.uid.in_(uids[k:k + 500]))
                for r in s.execute(q):
                    out[r.uid] = {"created_at": r.created_at, "preemptions": []}
                    if r.evictions:
                        evicted.append(r.uid)
            # the specs (manifests, commands: large) only of the workloads ever preempted
            for k in range(0, len(evicted), 500):
                q = select(WorkloadRow.uid, WorkloadRow.spec).where(WorkloadRow.uid.in_(evicted[k:k + 500]))
                for r in s.execute(q):
                    spec = r.spec if isinstance(r.spec, dict) else {}
                    out[r.uid]["preemptions"] = [p["at"] for p in spec.get("preemptions") or []
                                                 if isinstance(p, dict) and isinstance(p.get("at"), (int, float))]
        return out

    def budgets(self) -> dict[str, dict]:
        """Budgets stored by admins: ``{namespace: {"monthlyUSD", "warnAt", "hard", "updatedAt",
        "updatedBy"}}``."""
        with self._scope() as s:
            return {
                r.namespace: {"monthlyUSD": r.monthly_usd, "warnAt": r.warn_at, "hard": bool(r.hard),
                              "updatedAt": r.updated_at, "updatedBy": r.updated_by}
                for r in s.execute(select(BudgetRow.__table__))
            }

    def set_budget(self, namespace: str, monthly_usd: float, warn_at: float, hard: bool, *,
                   actor: str, at: float) -> None:
        """Store (insert or replace) the budget of ``namespace``; values validated by the caller
        (``budgets.parse_budget``). Raises ValidationError naming a non-finite number."""
        if not isinstance(namespace, str) or not namespace:
            raise ValidationError("must be a non-empty string", field="namespace")
        values = {"monthly_usd": _num(monthly_usd, "monthlyUSD"), "warn_at": _num(warn_at, "warnAt"),
                  "hard": bool(hard), "updated_at": _num(at, "at"), "updated_by": str(actor)}
        with self._scope(write=True) as s:
            if s.get(BudgetRow, namespace) is None:
                s.execute(insert(BudgetRow).values(namespace=namespace, **values))
            else:
                s.execute(update(BudgetRow).where(BudgetRow.namespace == namespace).values(**values))

    def delete_budget(self, namespace: str) -> bool:
        """Forget the stored budget of ``namespace``; False if there was none."""
        with self._scope(write=True) as s:
            return (s.execute(delete(BudgetRow).where(BudgetRow.namespace == namespace)).rowcount or 0) > 0

    def setting(self, key: str) -> Optional[Any]:
        """The stored value of ``key`` (JSON), None when there is none."""
        with self._scope() as s:
            row = s.get(Setting, str(key))
            return None if row is None else row.value

    def setting_default(self, key: str, value: Any, *, at: float) -> Any:
        """The stored value of ``key``; when there is none, store ``value`` (JSON) first (at
        ``at``, seconds since the epoch) and return it. The first writer wins: a concurrent caller
        gets the value stored first. ValidationError names ``key`` or ``value``."""
        if not isinstance(key, str) or not key or len(key) > 128:
            raise ValidationError("must be a non-empty string of at most 128 characters", field="key")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"must be JSON-serialisable: {e}", field="value") from None
        at = _num(at, "at")
        with self._scope(write=True) as s:
            row = s.get(Setting, key)
            if row is not None:
                return row.value
            s.execute(insert(Setting).values(key=key, value=value, updated_at=at))
            return value

    def put_setting(self, key: str, value: Any, *, at: float) -> None:
        """Store (insert or replace) ``key`` = ``value`` (JSON) at ``at`` (seconds since the
        epoch). ValidationError names ``key`` or ``value``."""
        if not isinstance(key, str) or not key or len(key) > 128:
            raise ValidationError("must be a non-empty string of at most 128 characters", field="key")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"must be JSON-serialisable: {e}", field="value") from None
        at = _num(at, "at")
        with self._scope(write=True) as s:
            if s.get(Setting, key) is None:
                s.execute(insert(Setting).values(key=key, value=value, updated_at=at))
            else:
                s.execute(update(Setting).where(Setting.key == key).values(value=value, updated_at=at))

    def delete_setting(self, key: str) -> bool:
        """Forget ``key``; False if it was not stored."""
        with self._scope(write=True) as s:
            return (s.execute(delete(Setting).where(Setting.key == str(key))).rowcount or 0) > 0

    def settings_with_prefix(self, prefix: str) -> dict[str, dict]:
        """``{key: {"value", "updatedAt"}}`` of the stored keys starting with ``prefix``."""
        q = select(Setting.key, Setting.value, Setting.updated_at).where(Setting.key.startswith(str(prefix), autoescape=True))
        with self._scope() as s:
            return {r.key: {"value": r.value, "updatedAt": r.updated_at} for r in s.execute(q)}

    def idle_reclaims(self, since: Optional[float] = None, until: Optional[float] = None) -> list[dict]:
        """Notebook leases released as idle (reason ``IdleReclaimed``, service/idle.py) whose
        release (``finished_at``) falls in [``since``, ``until``): ``[{"uid", "namespace", "name",
        "owner", "at", "gpuHours"}]`` by release time, ``gpuHours`` from the record's
        ``run.idleReclaimed``."""
        q = (select(WorkloadRow.uid, WorkloadRow.namespace, WorkloadRow.name, WorkloadRow.owner,
                    WorkloadRow.finished_at, WorkloadRow.run)
             .where(WorkloadRow.reason == "IdleReclaimed").order_by(WorkloadRow.finished_at))
        if since is not None:
            q = q.where(WorkloadRow.finished_at >= _num(since, "since"))
        if until is not None:
            q = q.where(WorkloadRow.finished_at < _num(until, "until"))
        out = []
        with self._scope() as s:
            for r in s.execute(q):
                info = (r.run or {}).get("idleReclaimed") or {}
                out.append({"uid": r.uid, "namespace": r.namespace, "name": r.name, "owner": r.owner,
                            "at": r.finished_at, "gpuHours": float(info.get("gpuHours") or 0.0)})
        return out

    def add_utilization_samples(self, samples: Iterable[tuple[str, str, float, float]]) -> int:
        """Append NVML samples ``(workload_uid, device, at, percent)``; returns how many. Raises
        ValidationError(field="percent") for a value outside 0-100."""
        rows = []
        for uid, device, at, percent in samples:
            p = _num(percent, "percent")
            if not 0.0 <= p <= 100.0:
                raise ValidationError(f"must be between 0 and 100, got {p}", field="percent")
            rows.append({"workload_uid": uid, "device": str(device), "at": _num(at, "at"), "percent": p})
        if rows:
            with self._scope(write=True) as s:
                s.execute(insert(UtilizationSample), rows)
        return len(rows)

    def utilization_samples(self, uid: str, limit: int = 5000) -> list[dict]:
        """The NVML samples of one workload, oldest first, the last ``limit``:
        ``[{"device", "at" (s since the epoch), "percent" (0-100)}]``."""
        q = (select(UtilizationSample.device, UtilizationSample.at, UtilizationSample.percent)
             .where(UtilizationSample.workload_uid == uid)
             .order_by(UtilizationSample.at.desc(), UtilizationSample.id.desc()).limit(int(limit)))
        with self._scope() as s:
            rows = [{"device": d, "at": float(at), "percent": float(p)} for d, at, p in s.execute(q)]
        rows.reverse()
        return rows

    def add_memory_samples(self, samples: Iterable[tuple[str, str, float, float, Optional[float]]]) -> int:
        """Append NVML memory samples ``(workload_uid, device, at, used_mib, total_mib)`` (MiB,
        ``nvmlDeviceGetMemoryInfo`` / 2**20; ``total_mib`` None where unknown); returns how many.
        Raises ValidationError naming ``used_mib`` (not a number >= 0) or ``total_mib`` (not a
        number > 0)."""
        rows = []
        for uid, device, at, used, total in samples:
            u = _num(used, "used_mib")
            if u < 0:
                raise ValidationError(f"must be >= 0 MiB, got {u}", field="used_mib")
            t = None if total is None else _num(total, "total_mib")
            if t is not None and t <= 0:
                raise ValidationError(f"must be > 0 MiB, got {t}", field="total_mib")
            rows.append({"workload_uid": uid, "device": str(device), "at": _num(at, "at"), "used_mib": u,
                         "total_mib": t})
        if rows:
            with self._scope(write=True) as s:
                s.execute(insert(MemorySample), rows)
        return len(rows)

    def memory_samples(self, uid: str, limit: int = 5000) -> list[dict]:
        """The NVML memory samples of one workload, oldest first, the last ``limit``:
        ``[{"device", "at" (s since the epoch), "memoryUsedMiB", "memoryTotalMiB" (None where
        unknown)}]``."""
        q = (select(MemorySample.device, MemorySample.at, MemorySample.used_mib, MemorySample.total_mib)
             .where(MemorySample.workload_uid == uid)
             .order_by(MemorySample.at.desc(), MemorySample.id.desc()).limit(int(limit)))
        with self._scope() as s:
            rows = [{"device": d, "at": float(at), "memoryUsedMiB": float(u),
                     "memoryTotalMiB": None if t is None else float(t)} for d, at, u, t in s.execute(q)]
        rows.reverse()
        return rows

    def utilization(self, since: Optional[float] = None, until: Optional[float] = None) -> dict[str, tuple[float, int]]:
        """Mean GPU utilization per workload over samples taken in [``since``, ``until``):
        ``{uid: (mean percent, number of samples)}``; workloads without samples are absent."""
        q = select(UtilizationSample.workload_uid, func.avg(UtilizationSample.percent), func.count())
        if since is not None:
            q = q.where(UtilizationSample.at >= _num(since, "since"))
        if until is not None:
            q = q.where(UtilizationSample.at < _num(until, "until"))
        q = q.group_by(UtilizationSample.workload_uid)
        with self._scope() as s:
            return {uid: (float(avg), int(n)) for uid, avg, n in s.execute(q)}

    # ------------------------------------------------------------------ configuration and audit

    def save_config(self, kueue_yaml: str, prices: dict, actor: str, at: float) -> int:
        """Store the active configuration (the whole of it as Kueue YAML, and the price list as
        ``Prices.to_json()``); returns its id. The newest stored one is :meth:`active_config`."""
        if not isinstance(kueue_yaml, str) or not kueue_yaml.strip():
            raise ValidationError("must be non-empty Kueue YAML", field="kueue_yaml")
        if not isinstance(prices, dict):
            raise ValidationError("must be a JSON object", field="prices")
        at = _num(at, "at")
        with self._scope(write=True) as s:
            res = s.execute(
                insert(ConfigVersion)
                .values(created_at=at, actor=str(actor), kueue_yaml=kueue_yaml, prices=prices)
                .returning(ConfigVersion.id)
            )
            return int(res.scalar_one())

    def active_config(self) -> Optional[dict]:
        """The newest stored configuration ``{"id", "created_at", "actor", "kueue_yaml",
        "prices"}``, or None when admins never changed it (or it was discarded)."""
        q = select(ConfigVersion.__table__).order_by(ConfigVersion.id.desc()).limit(1)
        with self._scope() as s:
            r = s.execute(q).first()
            return None if r is None else self._row(r)

    def discard_config(self) -> int:
        """Forget every stored configuration (the config files rule again); returns how many."""
        with self._scope(write=True) as s:
            return s.execute(delete(ConfigVersion)).rowcount or 0

    def add_audit(self, *, actor: str, operation: str, target: str, before: Any, after: Any, at: float) -> int:
        """Append an audit entry (who, what, on what, before → after as JSON, when); returns its id.
        Inside :meth:`transaction` it commits together with the change it records."""
        if not isinstance(operation, str) or not operation:
            raise ValidationError("must be a non-empty string", field="operation")
        for name, value in (("before", before), ("after", after)):
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ValidationError(f"must be JSON-serialisable: {e}", field=name) from None
        at = _num(at, "at")
        with self._scope(write=True) as s:
            res = s.execute(
                insert(AuditEntry)
                .values(at=at, actor=str(actor), operation=operation, target=str(target or ""),
                        before=before, after=after)
                .returning(AuditEntry.id)
            )
            return int(res.scalar_one())

    def audit_log(self, limit: int = 100, offset: int = 0) -> tuple[list[dict], int]:
        """Audit entries newest first (``limit`` from ``offset``) and the total count."""
        q = select(AuditEntry.__table__).order_by(AuditEntry.id.desc()).limit(limit).offset(offset)
        with self._scope() as s:
            total = int(s.execute(select(func.count()).select_from(AuditEntry)).scalar_one())
            return [self._row(r) for r in s.execute(q)], total


__all__ = ["Ledger", "SQLITE_BUSY_TIMEOUT_MS", "INTERVAL_COLUMNS", "WORKLOAD_COLUMNS"]
