"""Alembic's environment for the ledger: run by ``ledger/schema.py`` with the connection (and its
open transaction) in ``config.attributes["connection"]``; a ``sqlalchemy.url`` main option is
used only where Alembic's own commands are run by hand (``schema.py``'s ``revision`` helper)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from jupyter_gpuqueue.ledger.orm import Base

config = context.config


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things: batch mode copies the table ("move and copy").
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # SQLite's DDL is transactional too: the whole upgrade is one transaction everywhere.
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
elif context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=Base.metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=NullPool)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()
