"""Schema versions of the ledger (``ledger/schema.py``, ``ledger/migrations/``), on SQLite and on
PostgreSQL (``tests/pgtools.py``; those cases are skipped where PostgreSQL is absent).

- The migrations make exactly the ORM's schema (``orm.py``): every schema change goes through a
  revision.
- Every dump in ``tests/ledger_dumps/`` (a ledger made by a release, see its README) upgrades with
  the code of the day with every record kept, and the service restores its state from it (pending
  work queued again, running work adopted).
- A second schema revision (written by the test into a folder of its own, never shipped) proves
  that upgrades really run: an older ledger is refused with the command to run, upgraded (SQLite
  backed up first) keeping every row (a table re-created by batch mode keeps the rows that point
  at it), downgraded again; a ledger newer than the code is refused; the server answers 503
  naming ``jupyter gpuqueue upgrade-db``, and with ``upgrade_db`` starts on the upgraded ledger.
"""

from __future__ import annotations

import glob
import io
import json
import os
import re
import sqlite3
import textwrap

import pytest
from sqlalchemy import MetaData, create_engine, inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from jupyter_gpuqueue.cli.program import run as cli_run
from jupyter_gpuqueue.ledger import Ledger
from jupyter_gpuqueue.ledger import schema
from jupyter_gpuqueue.ledger.orm import Base

DUMPS = os.path.join(os.path.dirname(__file__), "ledger_dumps")
SHIPPED_HEAD = schema.head_revision()  # this release's newest revision (before a test adds one)
API = ("gpuqueue", "api")

#: What tests/ledger_dumps/make_dump.py puts in every dump: (namespace, name) -> state.
EXPECTED_STATES = {
    ("one", "done"): "Succeeded", ("one", "broken"): "Failed", ("two", "runner"): "Running",
    ("one", "waiter"): "Pending", ("one", "dropped"): "Cancelled", ("two", "starter"): "Admitted",
}


# -- helpers -----------------------------------------------------------------------------------------


def load_dump(url: str, path: str) -> None:
    """Load an SQL dump into the empty database ``url`` (psql's meta-commands skipped)."""
    text = open(path, encoding="utf-8").read()
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        con = sqlite3.connect(u.database)
        con.executescript(text)
        con.close()
        return
    import psycopg

    sql = "\n".join(line for line in text.splitlines() if not line.startswith("\\"))
    with psycopg.connect(dbname=u.database, user=u.username, host=u.query.get("host") or u.host,
                         port=int(u.query.get("port") or u.port or 5432), autocommit=True) as conn:
        conn.execute(sql)


def snapshot(url: str) -> dict[str, list[dict]]:
    """Every row of every table but alembic_version, by table, sorted by primary key."""
    engine = create_engine(url, poolclass=NullPool)
    md = MetaData()
    md.reflect(engine)
    out = {}
    with engine.connect() as conn:
        for name, table in md.tables.items():
            if name == "alembic_version":
                continue
            pk = list(table.primary_key.columns) or list(table.columns)
            out[name] = [dict(r._mapping) for r in conn.execute(select(table).order_by(*pk))]
    engine.dispose()
    return out


def revision(url: str) -> str | None:
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        rev = schema.revision_of(conn)
    engine.dispose()
    return rev


def assert_kept(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> None:
    """Every row of ``before`` is in ``after``, with the same values in its columns (new
    columns may be added)."""
    for table, rows in before.items():
        assert table in after, f"table {table} is gone"
        assert len(after[table]) == len(rows), (table, len(rows), len(after[table]))
        for old, new in zip(rows, after[table]):
            for col, value in old.items():
                assert new.get(col) == value, (table, col, value, new.get(col))


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli_run(list(argv), out=out, err=err, stdin=io.StringIO())
    return rc, out.getvalue(), err.getvalue()


def dumps(kind: str) -> list[str]:
    return sorted(glob.glob(os.path.join(DUMPS, f"*.{kind}.sql")))


def dump_params():
    out = []
    for kind in ("sqlite", "postgresql"):
        for path in dumps(kind):
            out.append(pytest.param(kind, path, id=f"{kind}-{os.path.basename(path).split('.')[0]}"))
    return out


@pytest.fixture
def url_of(request, tmp_path):
    """``url_of(kind)``: an empty database of that kind (a new SQLite file each call)."""
    count = iter(range(1000))

    def make(kind: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{tmp_path / f'ledger-{next(count)}.sqlite'}"
        return request.getfixturevalue("postgres_server").create_database("mig")
    return make


# -- the schema is the ORM's ---------------------------------------------------------------------------


def test_migrations_make_the_orm_schema_and_a_new_ledger_is_at_head(ledger_url):
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    engine = create_engine(ledger_url, poolclass=NullPool)
    with schema._schema_transaction(engine, None) as conn:
        schema._run_alembic(conn, __import__("alembic.command", fromlist=["upgrade"]).upgrade, "head")
    with engine.connect() as conn:
        assert schema.revision_of(conn) == schema.head_revision()
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    engine.dispose()
    assert diff == [], f"orm.py and the migrations differ (add a revision): {diff}"
    # A ledger opened on nothing is created (by the ORM) at the newest revision, with the same tables.
    fresh = ledger_url + "_fresh" if ledger_url.startswith("sqlite") else None
    if fresh:
        led = Ledger(fresh)
        assert led.schema_action == "created" and led.schema_revision() == schema.head_revision()
        assert set(inspect(led.engine).get_table_names()) == set(Base.metadata.tables) | {"alembic_version"}
        led.close()
        assert Ledger(fresh).schema_action is None  # the next open does nothing


def test_there_is_a_dump_for_every_revision():
    """Each schema change adds a dump of a ledger made at the revision before it (README there)."""
    for kind in ("sqlite", "postgresql"):
        have = {os.path.basename(p).split(".")[0] for p in dumps(kind)}
        assert schema.FIRST_REVISION in have, kind
        assert have <= set(schema.known_revisions()), (kind, have)
        # every revision but the newest has the dump of a ledger made by the release at it
        assert set(schema.known_revisions()[:-1]) <= have, (kind, have)


# -- the dumps of releases ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind,dump", dump_params())
def test_a_released_ledger_upgrades_with_every_record_and_the_service_restores_it(kind, dump, url_of, tmp_path,
                                                                                monkeypatch):
    from servicetools import stop_jobs

    from jupyter_gpuqueue.service import create_service

    url = url_of(kind)
    load_dump(url, dump)
    before = snapshot(url)
    assert len(before["workloads"]) == len(EXPECTED_STATES)
    assert before["usage_intervals"] and before["audit_log"] and before["config_versions"] and before["budgets"]
    assert before["gpu_utilization_samples"]

    rc, out, err = cli("upgrade-db", "--db-url", url)
    assert rc == 0, err
    assert revision(url) == schema.head_revision()
    assert_kept(before, snapshot(url))
    if kind == "sqlite" and (revision_in_dump(dump) or schema.FIRST_REVISION) != schema.head_revision():
        assert "backed up" in out and glob.glob(make_url(url).database + ".*.bak")

    # The service restores its state from the upgraded ledger.
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / "cluster.yaml").write_text(_make_dump_module().CLUSTER)
    (tmp_path / "svc" / "inventory.yaml").write_text(_make_dump_module().INVENTORY)
    svc = create_service(config_paths=[str(tmp_path / "svc" / "cluster.yaml")],
                         inventory_path=str(tmp_path / "svc" / "inventory.yaml"), db_url=url,
                         root_dir=str(tmp_path), data_dir=str(tmp_path / "svc" / "data"),
                         default_local_queue="one/q", stop_grace_seconds=0.5)
    try:
        rows = {(r["namespace"], r["name"]): r for r in svc.ledger.list_workloads()}
        assert {k: r["state"] for k, r in rows.items()} == EXPECTED_STATES
        runner_uid = rows[("two", "runner")]["uid"]
        real_adopt = svc.backend.adopt
        adopted = []

        def adopt(uid, info):  # the runner's process outlived the server (it was killed for the dump)
            if uid == runner_uid:
                adopted.append(uid)
                return True
            return real_adopt(uid, info)

        monkeypatch.setattr(svc.backend, "adopt", adopt)
        svc.restore()
        assert adopted == [runner_uid]
        assert svc.get_workload("two", "runner")["state"] == "Running"
        waiter = svc.get_workload("one", "waiter")
        assert waiter["state"] == "Pending" and waiter["positionInClusterQueue"] == 0, waiter
        assert svc.get_workload("one", "done")["costUsd"] > 0
        assert svc.get_workload("two", "starter")["state"] != "Pending"  # its admission was kept
        assert svc.load_stored_config() is True
        cq = svc.config.cluster_queues["cq-one"]
        assert "2" in json.dumps(_quota(cq)), _quota(cq)  # the admin's patch (nominalQuota 2)
        assert svc.ledger.budgets()["one"]["monthlyUSD"] == 500
        assert svc.ledger.audit_log()[1] == len(before["audit_log"])
        assert svc.ledger.utilization()[runner_uid][1] == 2
    finally:
        stop_jobs([svc], grace=0.0)
        svc.ledger.close()


def _quota(cq) -> list:
    out = []
    for rg in getattr(cq, "resource_groups", []):
        for fl in getattr(rg, "flavors", []):
            out.append(repr(fl))
    return out or [repr(cq)]


def revision_in_dump(path: str) -> str | None:
    m = re.search(r"alembic_version.*?VALUES\s*\(\s*'([^']+)'", open(path, encoding="utf-8").read(), re.S)
    return m.group(1) if m else None


def _make_dump_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_dump", os.path.join(DUMPS, "make_dump.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_revision_0003_adds_the_memory_samples_and_keeps_the_utilization_samples(kind, url_of):
    """0002 → 0003 (``gpu_memory_samples``) on a ledger made by the release at 0002: its
    utilization samples are kept (and their average, the reports'), memory samples can be
    written; the downgrade drops them and nothing else."""
    url = url_of(kind)
    load_dump(url, os.path.join(DUMPS, f"0002.{kind}.sql"))
    before = snapshot(url)
    assert "gpu_memory_samples" not in before and len(before["gpu_utilization_samples"]) == 2
    rc, out, err = cli("upgrade-db", "--db-url", url, "--revision", "0003", "--no-backup")
    assert rc == 0, err
    assert revision(url) == "0003"
    after = snapshot(url)
    assert_kept(before, after)
    assert after["gpu_memory_samples"] == []
    led = Ledger(url) if schema.head_revision() == "0003" else None
    if led is not None:
        uid = before["gpu_utilization_samples"][0]["workload_uid"]
        mean = led.utilization()[uid]
        assert led.add_memory_samples([(uid, "GPU-00000000-0000-0000-0000-000000000010", 1.0, 2048.0, 81920.0)]) == 1
        assert led.memory_samples(uid)[0]["memoryUsedMiB"] == 2048.0
        assert led.utilization()[uid] == mean  # the average utilization is unchanged
        led.close()
    rc, out, err = cli("upgrade-db", "--db-url", url, "--revision", "0002", "--no-backup")
    assert rc == 0, err
    assert revision(url) == "0002"
    back = snapshot(url)
    assert "gpu_memory_samples" not in back
    assert back == before


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_ledger_made_before_versions_is_the_first_revision(kind, url_of):
    url = url_of(kind)
    load_dump(url, dumps(kind)[0])
    assert revision(url) is None
    if schema.head_revision() == schema.FIRST_REVISION:
        led = Ledger(url)  # no upgrade needed: stamped at open
        assert led.schema_action == "stamped" and led.schema_revision() == schema.FIRST_REVISION
        assert len(led.list_workloads()) == len(EXPECTED_STATES)
        led.close()
    else:
        with pytest.raises(schema.LedgerSchemaError, match="upgrade-db"):
            Ledger(url)
        assert revision(url) == schema.FIRST_REVISION  # stamped all the same


def test_a_ledger_of_unknown_tables_is_refused(tmp_path):
    con = sqlite3.connect(tmp_path / "odd.sqlite")
    con.execute("CREATE TABLE workloads (uid TEXT PRIMARY KEY, something TEXT)")
    con.commit()
    con.close()
    with pytest.raises(schema.LedgerSchemaError, match="lacks the columns"):
        Ledger(str(tmp_path / "odd.sqlite"))


# -- a second revision, made by the test --------------------------------------------------------------


SECOND = '''
"""A test revision: a nullable column on workloads (the table re-created by batch mode on
SQLite) and a new table."""
import sqlalchemy as sa
from alembic import op

revision = "9001"
down_revision = {down!r}
branch_labels = None
depends_on = None


def _recreate():  # SQLite: re-create the table (the hard case); PostgreSQL: plain ALTER
    return "always" if op.get_bind().dialect.name == "sqlite" else "auto"


def upgrade():
    with op.batch_alter_table("workloads", recreate=_recreate()) as batch:
        batch.add_column(sa.Column("test_note", sa.String(64), nullable=True))
    op.create_table("test_extra", sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("note", sa.String(64), nullable=False, server_default="x"))


def downgrade():
    op.drop_table("test_extra")
    with op.batch_alter_table("workloads", recreate=_recreate()) as batch:
        batch.drop_column("test_note")
'''


@pytest.fixture
def second_revision(tmp_path, monkeypatch):
    """Make this code's newest revision a test revision ``9001`` after the shipped head; returns
    ``(old_head, "9001")``."""
    old = schema.head_revision()
    folder = tmp_path / "extra_versions"
    folder.mkdir()
    (folder / "9001_test.py").write_text(textwrap.dedent(SECOND.format(down=old)))
    monkeypatch.setattr(schema, "VERSION_LOCATIONS", [*schema.VERSION_LOCATIONS, str(folder)])
    assert schema.head_revision() == "9001"
    return old, "9001"


def _old_ledger(kind: str, url_of) -> tuple[str, dict]:
    """A released ledger (the first dump) stamped at the shipped head."""
    url = url_of(kind)
    load_dump(url, dumps(kind)[0])
    Ledger(url, upgrade=True).close()
    return url, snapshot(url)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_older_ledger_is_refused_then_upgraded_and_downgraded_keeping_every_row(kind, url_of, monkeypatch,
                                                                                   request):
    url, before = _old_ledger(kind, url_of)
    old, new = request.getfixturevalue("second_revision")
    with pytest.raises(schema.LedgerSchemaError) as e:
        Ledger(url)
    assert f"revision {old}, older" in str(e.value) and "jupyter gpuqueue upgrade-db --db-url" in str(e.value)
    assert e.value.status == 503
    assert revision(url) == old  # nothing changed

    led = Ledger(url, upgrade=True)
    assert led.schema_action == "upgraded" and led.schema_revision() == new
    after = snapshot(url)
    assert_kept(before, after)  # usage intervals kept although workloads was re-created
    assert "test_note" in after["workloads"][0] and after["test_extra"] == []
    if kind == "sqlite":
        backups = glob.glob(make_url(url).database + f".*.rev-{old}.bak")
        assert len(backups) == 1
        assert_kept(before, snapshot("sqlite:///" + backups[0]))
    # the ledger works at the new revision
    led.update_workload(after["workloads"][0]["uid"], message="after the upgrade")
    led.close()

    rc, out, err = cli("upgrade-db", "--db-url", url, "--revision", old, "--no-backup")
    assert rc == 0, err
    assert f"{new} -> {old}" in out
    assert revision(url) == old
    back = snapshot(url)
    assert "test_extra" not in back and "test_note" not in back["workloads"][0]
    assert len(back["usage_intervals"]) == len(before["usage_intervals"])


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_ledger_newer_than_the_code_is_refused(kind, url_of, monkeypatch, request):
    url, _ = _old_ledger(kind, url_of)
    shipped = list(schema.VERSION_LOCATIONS)
    request.getfixturevalue("second_revision")
    Ledger(url, upgrade=True).close()
    monkeypatch.setattr(schema, "VERSION_LOCATIONS", shipped)  # the code of an older release
    with pytest.raises(schema.LedgerSchemaError, match="newer than this version"):
        Ledger(url, upgrade=True)
    rc, out, err = cli("upgrade-db", "--db-url", url)
    assert rc == 2 and "newer than this release" in err


def test_upgrade_db_and_backup_commands(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'l.sqlite'}"
    load_dump(url, dumps("sqlite")[0])
    monkeypatch.setenv("GPUQUEUE_DB_URL", url)  # found without --db-url
    rc, out, err = cli("upgrade-db")
    assert rc == 0, err
    assert revision(url) == schema.head_revision()
    rc, out, err = cli("upgrade-db")
    assert rc == 0 and "nothing to do" in out
    rc, out, err = cli("backup", str(tmp_path / "copy.sqlite"))
    assert rc == 0, err
    assert_kept(snapshot(url), snapshot(f"sqlite:///{tmp_path / 'copy.sqlite'}"))
    rc, out, err = cli("backup", str(tmp_path / "copy.sqlite"))
    assert rc == 2 and "exists" in err
    rc, out, err = cli("backup", str(tmp_path / "x.sqlite"), "--db-url", str(tmp_path / "missing.sqlite"))
    assert rc == 2 and "no ledger" in err


def test_backup_of_postgresql_points_to_pg_dump(postgres_url, tmp_path):
    Ledger(postgres_url).close()
    rc, out, err = cli("backup", str(tmp_path / "x.sql"), "--db-url", postgres_url)
    assert rc == 2 and "pg_dump" in err


def test_backup_while_the_server_writes_is_consistent(tmp_path):
    led = Ledger(str(tmp_path / "busy.sqlite"))
    tx = led.transaction()
    tx.__enter__()  # an open write transaction (WAL): the backup copies the last commit
    led.add_workload({"uid": "u1", "namespace": "n", "name": "a", "owner": "o", "local_queue": "q",
                      "state": "Pending", "spec": {}, "created_at": 1.0})
    dest = led.backup(str(tmp_path / "copy.sqlite"))
    tx.__exit__(None, None, None)
    copy = Ledger(dest)
    assert copy.list_workloads() == [] and copy.schema_revision() == schema.head_revision()
    copy.close()
    assert len(led.list_workloads()) == 1
    led.close()


# -- the server ---------------------------------------------------------------------------------------


async def _call(jp_fetch, *parts):
    from tornado.httpclient import HTTPClientError

    try:
        resp = await jp_fetch(*API, *parts)
    except HTTPClientError as e:
        resp = e.response
    return resp.code, json.loads(resp.body.decode() or "null")


class TestServerWithAnOlderLedger:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config, tmp_path, request):
        url = f"sqlite:///{tmp_path / 'old.sqlite'}"
        load_dump(url, dumps("sqlite")[0])
        Ledger(url, upgrade=True, backup=False).close()  # at the shipped head (stamped, upgraded past 0001)
        request.getfixturevalue("second_revision")  # this code is one revision newer
        return {**gpuqueue_config, "db_url": url}

    async def test_the_queue_does_not_start_and_every_request_names_the_command(self, jp_fetch, started,
                                                                                gpuqueue_config, caplog):
        status, err = await _call(jp_fetch, "info")
        assert status == 503, err
        assert "older than this version" in err["message"] and "jupyter gpuqueue upgrade-db" in err["message"]
        assert started.web_app.settings.get("gpuqueue_service") is None
        assert revision(gpuqueue_config["db_url"]) == SHIPPED_HEAD  # untouched

    class TestWithUpgradeDb:
        @pytest.fixture
        def gpuqueue_config(self, gpuqueue_config):
            return {**gpuqueue_config, "upgrade_db": True}

        async def test_it_is_backed_up_upgraded_and_served(self, jp_fetch, started, gpuqueue_config):
            status, data = await _call(jp_fetch, "workloads")
            assert status == 200, data
            db = make_url(gpuqueue_config["db_url"]).database
            assert revision(gpuqueue_config["db_url"]) == "9001"
            assert len(glob.glob(db + ".*.bak")) == 1


def test_the_commands_find_the_ledger_as_the_server_does(tmp_path, monkeypatch):
    from jupyter_gpuqueue.cli.database import resolve_db_url

    monkeypatch.delenv("GPUQUEUE_DB_URL", raising=False)
    conf = tmp_path / "jupyter-config"
    conf.mkdir()
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(conf))
    (conf / "jupyter_server_config.py").write_text(f"c.GpuQueueApp.state_dir = {str(tmp_path / 'state')!r}\n")
    assert resolve_db_url(None) == f"sqlite:///{tmp_path / 'state' / 'gpuqueue.sqlite'}"
    (conf / "jupyter_server_config.py").write_text("c.GpuQueueApp.db_url = 'postgresql+psycopg://q@db/q'\n")
    assert resolve_db_url(None) == "postgresql+psycopg://q@db/q"
    monkeypatch.setenv("GPUQUEUE_DB_URL", "sqlite:////x.sqlite")
    assert resolve_db_url(None) == "sqlite:////x.sqlite"
    assert resolve_db_url("sqlite:////y.sqlite") == "sqlite:////y.sqlite"
