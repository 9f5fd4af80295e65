"""Ledger tables (SQLAlchemy 2.x declarative).

Two tables:

- ``workloads``: one row per submitted Workload, the durable truth the service rebuilds its state
  from after a restart. ``spec``, ``admission`` and ``run`` are JSON documents owned by the service
  (the ledger stores them opaquely).
- ``usage_intervals``: one row per (workload, flavor, resource) for every period the workload held
  devices. Cost is a query over these rows (DESIGN.md "Costs"), never a counter that can drift.

Times are floats, seconds since the Unix epoch. Money is USD; ``usd_per_hour`` is the price of the
whole interval (all its devices) per hour, fixed when the interval is opened.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
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


WORKLOAD_COLUMNS = tuple(c.name for c in WorkloadRow.__table__.columns)
INTERVAL_COLUMNS = tuple(c.name for c in UsageInterval.__table__.columns)
