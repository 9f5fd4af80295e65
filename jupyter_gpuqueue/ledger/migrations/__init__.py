"""Alembic migrations of the ledger's schema (``ledger/schema.py`` runs them; no alembic.ini).

- ``env.py``: how Alembic runs them: on the connection ``schema.py`` hands over (in
  ``config.attributes["connection"]``, inside one transaction), with batch mode for SQLite's
  ALTER TABLE; ``target_metadata`` is the ORM's (``ledger/orm.py``).
- ``versions/``: one revision per schema change, written and reviewed by hand (autogenerate is a
  start only), each working on SQLite (``op.batch_alter_table``) and PostgreSQL.
- ``script.py.mako``: the template of a new revision.

A schema change is: edit ``orm.py``; add a revision here (``python -m
jupyter_gpuqueue.ledger.migrations revision -m "what changed" --autogenerate``, then read and fix
it: batch mode, server defaults for new NOT NULL columns, data moved by hand); add a dump of a
ledger made by the previous release under ``tests/ledger_dumps/`` (see its README);
``tests/test_migrations.py`` then checks that the migrated schema is the ORM's and that the dumps
upgrade with every record kept.
"""
