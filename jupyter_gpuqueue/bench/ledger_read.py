"""Read-only SQL on a bench server's ledger, SQLite or PostgreSQL (the checks of bench submit and
drain, and killing the jobs left running)."""

from __future__ import annotations


def ledger_rows(url: str, sql: str) -> list[tuple]:
    """Rows of the read-only query ``sql`` on the ledger at the SQLAlchemy ``url``."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as con:
            return [tuple(r) for r in con.execute(text(sql))]
    finally:
        engine.dispose()
