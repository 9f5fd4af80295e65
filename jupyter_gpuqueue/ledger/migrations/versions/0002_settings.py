"""settings: small values the service keeps across restarts, by key

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25

One table, ``settings`` (``key`` → a JSON ``value``, ``updated_at`` in seconds since the epoch).
Its first key is ``inventory.firstKnownAt``: when the service first knew its inventory, the start
of the idle capacity it reports (``service/costs.py``). No existing row changes.
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "settings",
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("value", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("settings")
