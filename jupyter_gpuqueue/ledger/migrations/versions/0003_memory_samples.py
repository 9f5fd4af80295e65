"""gpu_memory_samples: the memory NVML saw in use on a running job's devices, over time

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25

One table, ``gpu_memory_samples`` (``orm.MemorySample``): per sample the workload, the device
(GPU or MIG UUID), ``at`` (seconds since the epoch), ``used_mib`` and ``total_mib`` (MiB, from
``nvmlDeviceGetMemoryInfo``; ``total_mib`` null where unknown), taken in the same NVML pass as the
utilization samples, which stay where they are (``gpu_utilization_samples``, unchanged, so the
reports' average utilization is too). A job's page draws them (``GET .../timeline``, ``memory``).
No existing row changes; a downgrade drops the memory samples and nothing else.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_memory_samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("workload_uid", sa.String(64), sa.ForeignKey("workloads.uid", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("device", sa.String(128), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("used_mib", sa.Float, nullable=False),
        sa.Column("total_mib", sa.Float, nullable=True),
    )
    op.create_index("ix_gpu_memory_samples_workload_uid", "gpu_memory_samples", ["workload_uid"])
    op.create_index("ix_gpu_memory_samples_at", "gpu_memory_samples", ["at"])


def downgrade() -> None:
    op.drop_index("ix_gpu_memory_samples_at", table_name="gpu_memory_samples")
    op.drop_index("ix_gpu_memory_samples_workload_uid", table_name="gpu_memory_samples")
    op.drop_table("gpu_memory_samples")
