"""Ledger tables (SQLAlchemy 2.x declarative).

Tables:

- ``workloads``: one row per submitted Workload, the durable truth the service rebuilds its state
  from after a restart. ``spec``, ``admission`` and ``run`` are JSON documents owned by the service
  (the ledger stores them opaquely).
- ``usage_intervals``: one row per (workload, flavor, resource) for every period the workload held
  devices. Cost is a query over these rows (DESIGN.md "Costs"), never a counter that can drift.
- ``config_versions`` and ``audit_log``: the configuration admins applied (Kueue YAML and prices)
  and who changed what, when, before → after.
- ``budgets``, ``gpu_utilization_samples``; ``settings`` (revision 0002): small values kept across
  restarts by key, e.g. when the inventory was first known (the start of idle capacity);
  ``gpu_memory_samples`` (revision 0003): the memory NVML saw in use on a running job's devices.

Times are floats, seconds since the Unix epoch. Money is USD; ``usd_per_hour`` is the price of the
whole interval (all its devices) per hour, fixed when the interval is opened.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

WORKLOAD_STATES = ("Pending", "Admitted", "Running", "Succeeded", "Failed", "Cancelled")
FINISHED_STATES = ("Succeeded", "Failed", "Cancelled")


class Base(DeclarativeBase):
    pass


class WorkloadRow(Base):
    __tablename__ = "workloads"
    __table_args__ = (UniqueConstraint("namespace", "name", name="uq_workloads_namespace_name"),)

    uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(253), nullable=False)
    name: Mapped[str] = mapped_column(String(253), nullable=False)
    owner: Mapped[str] = mapped_column(String(256), nullable=False)
    local_queue: Mapped[str] = mapped_column(String(253), nullable=False)
    cluster_queue: Mapped[Optional[str]] = mapped_column(String(253), nullable=True)
    priority_class: Mapped[Optional[str]] = mapped_column(String(253), nullable=True)
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    state: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    reason: Mapped[Optional[str]] = mapped_column(String(64), nullable=True)
    message: Mapped[Optional[str]] = mapped_column(Text, nullable=True)
    spec: Mapped[Any] = mapped_column(JSON, nullable=False)
    admission: Mapped[Optional[Any]] = mapped_column(JSON(none_as_null=True), nullable=True)
    run: Mapped[Optional[Any]] = mapped_column(JSON(none_as_null=True), nullable=True)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    admitted_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    started_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    finished_at: Mapped[Optional[float]] = mapped_column(Float, nullable=True)
    exit_code: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    evictions: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class UsageInterval(Base):
    __tablename__ = "usage_intervals"
    __table_args__ = (Index("ix_usage_intervals_open", "workload_uid", "end"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_uid: Mapped[str] = mapped_column(
        String(64), ForeignKey("workloads.uid", ondelete="CASCADE"), nullable=False, index=True
    )
    flavor: Mapped[str] = mapped_column(String(253), nullable=False)
    resource: Mapped[str] = mapped_column(String(253), nullable=False)
    quantity: Mapped[int] = mapped_column(Integer, nullable=False)
    gpu_equivalent: Mapped[float] = mapped_column(Float, nullable=False)
    usd_per_hour: Mapped[float] = mapped_column(Float, nullable=False)
    start: Mapped[float] = mapped_column(Float, nullable=False)
    end: Mapped[Optional[float]] = mapped_column(Float, nullable=True)


class ConfigVersion(Base):
    """The queue configuration an admin applied: the whole of it as Kueue YAML plus the price
    list. The newest row is the active configuration; at startup it is preferred over the
    config files (``GpuQueueApp.discard_stored_config`` drops it)."""

    __tablename__ = "config_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    actor: Mapped[str] = mapped_column(String(256), nullable=False)
    kueue_yaml: Mapped[str] = mapped_column(Text, nullable=False)
    prices: Mapped[Any] = mapped_column(JSON, nullable=False)


class AuditEntry(Base):
    """One admin change: who (``actor``), when (``at``, seconds since the epoch), what
    (``operation``, e.g. ``patch-cluster-queue``, on ``target``), and the object ``before`` and
    ``after`` (JSON: Kueue documents, or the price list)."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, nullable=False, index=True)
    actor: Mapped[str] = mapped_column(String(256), nullable=False)
    operation: Mapped[str] = mapped_column(String(64), nullable=False)
    target: Mapped[str] = mapped_column(String(512), nullable=False, default="")
    before: Mapped[Optional[Any]] = mapped_column(JSON(none_as_null=True), nullable=True)
    after: Mapped[Optional[Any]] = mapped_column(JSON(none_as_null=True), nullable=True)


class BudgetRow(Base):
    """A team's monthly budget set by an admin through the REST API (``jupyter_gpuqueue.budgets``):
    ``monthly_usd`` (USD per UTC month), ``warn_at`` (share of it, 0-1, that raises the soft
    warning), ``hard`` (new submissions are held with reason BudgetExceeded once it is spent).
    A row here wins over ``GpuQueueApp.budgets`` for its namespace."""

    __tablename__ = "budgets"

    namespace: Mapped[str] = mapped_column(String(253), primary_key=True)
    monthly_usd: Mapped[float] = mapped_column(Float, nullable=False)
    warn_at: Mapped[float] = mapped_column(Float, nullable=False)
    hard: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False)
    updated_by: Mapped[str] = mapped_column(String(256), nullable=False)


class UtilizationSample(Base):
    """One NVML utilization sample of a device a running workload holds: ``percent`` (0-100,
    ``nvmlDeviceGetUtilizationRates().gpu``) at ``at`` (seconds since the epoch). Only written
    where NVML answers; reports average them and never invent a value where none exist."""

    __tablename__ = "gpu_utilization_samples"
    __table_args__ = (Index("ix_gpu_utilization_samples_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_uid: Mapped[str] = mapped_column(
        String(64), ForeignKey("workloads.uid", ondelete="CASCADE"), nullable=False, index=True
    )
    device: Mapped[str] = mapped_column(String(128), nullable=False)
    at: Mapped[float] = mapped_column(Float, nullable=False)
    percent: Mapped[float] = mapped_column(Float, nullable=False)


class MemorySample(Base):
    """One NVML memory sample of a device a running workload holds (revision 0003), taken in the
    same NVML pass as its :class:`UtilizationSample`: ``used_mib`` (MiB in use,
    ``nvmlDeviceGetMemoryInfo(handle).used`` / 2**20; for a MIG device its own handle's, i.e. the
    MIG device's memory) and ``total_mib`` (its ``.total`` / 2**20, None where unknown) at ``at``
    (seconds since the epoch). Only written where NVML answers; never invented. A MIG device,
    whose utilization NVML cannot sample, still has memory samples."""

    __tablename__ = "gpu_memory_samples"
    __table_args__ = (Index("ix_gpu_memory_samples_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_uid: Mapped[str] = mapped_column(
        String(64), ForeignKey("workloads.uid", ondelete="CASCADE"), nullable=False, index=True
    )
    device: Mapped[str] = mapped_column(String(128), nullable=False)
    at: Mapped[float] = mapped_column(Float, nullable=False)
    used_mib: Mapped[float] = mapped_column(Float, nullable=False)
    total_mib: Mapped[Optional[float]] = mapped_column(Float, nullable=True)


WORKLOAD_COLUMNS = tuple(c.name for c in WorkloadRow.__table__.columns)
INTERVAL_COLUMNS = tuple(c.name for c in UsageInterval.__table__.columns)


class Setting(Base):
    """A small value the service keeps across restarts (revision 0002): ``key`` (e.g.
    ``inventory.firstKnownAt``), ``value`` (JSON), ``updated_at`` (seconds since the epoch)."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[Optional[Any]] = mapped_column(JSON(none_as_null=True), nullable=True)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False)
