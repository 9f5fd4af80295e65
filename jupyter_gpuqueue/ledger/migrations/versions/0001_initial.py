"""The ledger as the first release made it (before schema versions existed).

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Tables: workloads, usage_intervals, config_versions, audit_log, budgets,
gpu_utilization_samples, frozen here as ``Base.metadata.create_all`` made them (names of
indexes and constraints included): a later change of ``orm.py`` gets a revision of its own and
never edits this one.

A ledger made before versions existed (its tables, no ``alembic_version``) is this revision:
``schema.py`` runs :func:`upgrade` on it, which creates only the tables it lacks (as
``create_all`` did at every start of those releases), and stamps it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def tables() -> sa.MetaData:
    """This revision's schema (a fresh MetaData each call)."""
    md = sa.MetaData()
    sa.Table(
        "workloads", md,
        sa.Column("uid", sa.String(64), primary_key=True),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("local_queue", sa.String(253), nullable=False),
        sa.Column("cluster_queue", sa.String(253), nullable=True),
        sa.Column("priority_class", sa.String(253), nullable=True),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("admission", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("run", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("admitted_at", sa.Float, nullable=True),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("evictions", sa.Integer, nullable=False),
        sa.UniqueConstraint("namespace", "name", name="uq_workloads_namespace_name"),
    )
    sa.Table(
        "usage_intervals", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workload_uid", sa.String(64), sa.ForeignKey("workloads.uid", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("flavor", sa.String(253), nullable=False),
        sa.Column("resource", sa.String(253), nullable=False),
        sa.Column("quantity", sa.Integer, nullable=False),
        sa.Column("gpu_equivalent", sa.Float, nullable=False),
        sa.Column("usd_per_hour", sa.Float, nullable=False),
        sa.Column("start", sa.Float, nullable=False),
        sa.Column("end", sa.Float, nullable=True),
        sa.Index("ix_usage_intervals_open", "workload_uid", "end"),
    )
    sa.Table(
        "config_versions", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("kueue_yaml", sa.Text, nullable=False),
        sa.Column("prices", sa.JSON, nullable=False),
    )
    sa.Table(
        "audit_log", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False, index=True),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("before", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("after", sa.JSON(none_as_null=True), nullable=True),
    )
    sa.Table(
        "budgets", md,
        sa.Column("namespace", sa.String(253), primary_key=True),
        sa.Column("monthly_usd", sa.Float, nullable=False),
        sa.Column("warn_at", sa.Float, nullable=False),
        sa.Column("hard", sa.Boolean, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("updated_by", sa.String(256), nullable=False),
    )
    sa.Table(
        "gpu_utilization_samples", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workload_uid", sa.String(64), sa.ForeignKey("workloads.uid", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("device", sa.String(128), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("percent", sa.Float, nullable=False),
        sa.Index("ix_gpu_utilization_samples_at", "at"),
    )
    return md


def upgrade() -> None:
    # checkfirst: on a ledger made before versions existed, only the tables it lacks.
    tables().create_all(op.get_bind(), checkfirst=True)


def downgrade() -> None:
    tables().drop_all(op.get_bind())
