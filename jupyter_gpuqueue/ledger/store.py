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

from sqlalchemy import case, create_engine, delete, event, func, insert, select, update
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ..errors import Conflict, NotFound, ValidationError
from .orm import (
    INTERVAL_COLUMNS,
    WORKLOAD_COLUMNS,
    WORKLOAD_STATES,
    Base,
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
    """Durable store of workloads and their usage intervals.

    ``url``: a SQLAlchemy URL (``sqlite:////abs/path/gpuqueue.db``, ``postgresql+psycopg://…``) or a
    plain file path (taken as SQLite). Tables are created if missing; for a SQLite file the parent
    directory is created. Rows are returned as plain dicts keyed by column name with the JSON columns
    (``spec``, ``admission``, ``run``) decoded.
    """

    def __init__(self, url: str):
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
        self.engine: Engine = create_engine(parsed, **kwargs)
        if _is_sqlite(parsed):
            self._configure_sqlite(self.engine)
        Base.metadata.create_all(self.engine)
        self._Session = sessionmaker(bind=self.engine, expire_on_commit=False)
        self._local = threading.local()

    @staticmethod
    def _configure_sqlite(engine: Engine) -> None:
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
            conn.exec_driver_sql("BEGIN")

    # ------------------------------------------------------------------ transactions

    @property
    def _tx(self) -> Optional[Session]:
        return getattr(self._local, "tx", None)

    @contextmanager
    def _scope(self) -> Iterator[Session]:
        tx = self._tx
        if tx is not None:
            yield tx
            return
        with self._Session() as s, s.begin():
            yield s

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
        with self._Session() as s, s.begin():
            self._local.tx = s
            try:
                yield self
            finally:
                self._local.tx = None

    def close(self) -> None:
        """Release every pooled connection. The Ledger must not be used afterwards."""
        self.engine.dispose()

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
        with self._scope() as s:
            self._check_unique(s, rec["uid"], rec["namespace"], rec["name"])
            try:
                with s.begin_nested():
                    s.execute(insert(WorkloadRow), [values])
            except IntegrityError:  # a concurrent writer won the race
                self._check_unique(s, rec["uid"], rec["namespace"], rec["name"])
                raise

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
        with self._scope() as s:
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

    def delete_workload(self, uid: str) -> bool:
        """Delete a workload and its usage intervals. Returns False if it did not exist."""
        with self._scope() as s:
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
            r = s.execute(
                select(WorkloadRow.__table__).where(
                    WorkloadRow.namespace == namespace, WorkloadRow.name == name
                )
            ).first()
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
        with self._scope() as s:
            if s.get(WorkloadRow, uid) is None:
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
        with self._scope() as s:
            s.execute(
                update(UsageInterval)
                .where(UsageInterval.workload_uid == uid, UsageInterval.end.is_(None))
                .values(end=case((UsageInterval.start > end, UsageInterval.start), else_=end))
            )

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


__all__ = ["Ledger", "SQLITE_BUSY_TIMEOUT_MS", "INTERVAL_COLUMNS", "WORKLOAD_COLUMNS"]
