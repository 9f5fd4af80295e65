"""PostgreSQL as docs/postgresql.md sets it up: the driver through the ``postgresql`` extra (a
missing driver is a clear error naming it), the role and database made with ``createuser
--pwprompt`` / ``createdb -O``, the schema by ``jupyter gpuqueue upgrade-db``, and the queue
server writing its ledger there through the documented URL (``c.GpuQueueApp.db_url``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

REPO = Path(__file__).resolve().parent.parent
BINDIR = Path(sys.executable).parent
DEMO_DIR = REPO / "jupyter_gpuqueue" / "demo"
DOC_URL = "postgresql+psycopg://gpuqueue:PASSWORD@localhost/gpuqueue"  # docs/postgresql.md

# -- the extra ----------------------------------------------------------------------------------------


def test_the_postgresql_extra_is_the_driver():
    """``pip install "jupyter_gpuqueue[postgresql]"`` brings psycopg 3 with its libpq (the installed
    distribution's metadata, which pip reads)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in metadata.requires("jupyter_gpuqueue") or []]
    extra = [r for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "postgresql"})
             and not r.marker.evaluate({"extra": ""})]
    assert [(r.name, r.extras, str(r.specifier)) for r in extra] == [("psycopg", {"binary"}, ">=3.1")]


MISSING_DRIVER = """
import io, json, sys
sys.modules["psycopg"] = None  # the driver is not installed: importing it fails
sys.modules["psycopg2"] = None
from jupyter_gpuqueue.cli.program import run
from jupyter_gpuqueue.errors import ValidationError
from jupyter_gpuqueue.service import create_service
out = {{}}
for url in {urls!r}:
    try:
        create_service(config_paths=[{cluster!r}], inventory_path={inventory!r}, db_url=url,
                       root_dir={root!r}, data_dir={data!r})
        service = None
    except ValidationError as e:
        service = [e.field, str(e)]
    err = io.StringIO()
    rc = run(["upgrade-db", "--db-url", url], out=io.StringIO(), err=err, stdin=io.StringIO())
    out[url] = {{"service": service, "cli": [rc, err.getvalue()]}}
print("RESULT " + json.dumps(out))
"""


def test_a_missing_driver_names_the_extra(tmp_path):
    """Without psycopg (a subprocess where importing it fails) the service and the CLI refuse a
    PostgreSQL ledger with ValidationError naming db_url and the pip command, before any connection;
    nothing falls back to SQLite."""
    import json

    urls = [DOC_URL, "postgresql://gpuqueue:PASSWORD@localhost/gpuqueue"]
    script = MISSING_DRIVER.format(cluster=str(DEMO_DIR / "cluster.yaml"), inventory=str(DEMO_INVENTORY_PATH),
                                   urls=urls, root=str(tmp_path), data=str(tmp_path / "data"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUQUEUE_")}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert res.returncode == 0 and lines, (res.stdout, res.stderr)
    results = json.loads(lines[0][len("RESULT "):])
    for url in urls:
        service, (rc, err) = results[url]["service"], results[url]["cli"]
        assert service is not None, url
        field, message = service
        assert field == "db_url"
        assert 'pip install "jupyter_gpuqueue[postgresql]"' in message and "is not installed" in message
        # a URL of another driver than the extra's psycopg 3: the message names the URL that uses it
        other_driver = make_url(url).get_driver_name() != "psycopg"
        assert ("postgresql+psycopg://" in message.split("pip install")[1]) is other_driver, message
        assert rc == 2
        assert "upgrade-db: error: db_url:" in err and 'pip install "jupyter_gpuqueue[postgresql]"' in err, err
        assert "Traceback" not in err
    assert not list(tmp_path.rglob("*.sqlite"))


# -- the role and the database, as documented ---------------------------------------------------------


def _client(server, tool: str, *args: str, **kw) -> subprocess.CompletedProcess:
    """A PostgreSQL client program of ``server``'s installation, as the superuser ``postgres``
    (docs: ``sudo -u postgres createuser ...``; the test server trusts local connections)."""
    argv = [os.path.join(server.bindir, tool), "-h", server.socket_dir, "-p", str(server.port), "-U", "postgres", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


@pytest.fixture
def documented_database(postgres_server):
    """``createuser --pwprompt NAME`` (the password typed twice) and ``createdb -O NAME NAME``,
    then password authentication for that role (scram-sha-256, PostgreSQL's default for
    ``host`` lines on Debian); yields (name, password); drops both after."""
    if postgres_server.external:
        pytest.skip("needs the throw-away server's pg_hba.conf (GPUQUEUE_TEST_PG_URL is set)")
    name = f"gpuqueue_{uuid.uuid4().hex[:8]}"
    password = f"pw-{uuid.uuid4().hex[:12]}"
    # --pwprompt reads the terminal, or stdin where there is none (a new session has none)
    res = _client(postgres_server, "createuser", "--pwprompt", name, input=f"{password}\n{password}\n",
                  start_new_session=True)
    assert res.returncode == 0, res.stderr
    res = _client(postgres_server, "createdb", "-O", name, name)
    assert res.returncode == 0, res.stderr
    hba = Path(postgres_server.base) / "data" / "pg_hba.conf"
    original = hba.read_text()
    hba.write_text(f"local all {name} scram-sha-256\n" + original)  # first match wins: this role only
    postgres_server._check(os.path.join(postgres_server.bindir, "pg_ctl"), "-D",
                           str(Path(postgres_server.base) / "data"), "reload")
    try:
        yield name, password
    finally:
        hba.write_text(original)
        postgres_server._check(os.path.join(postgres_server.bindir, "pg_ctl"), "-D",
                               str(Path(postgres_server.base) / "data"), "reload")
        _client(postgres_server, "dropdb", "--force", name)
        _client(postgres_server, "dropuser", name)


def _documented_url(server, name: str, password: str) -> str:
    """docs' ``postgresql+psycopg://gpuqueue:PASSWORD@localhost/gpuqueue`` with this role, password
    and database; the test server listens on a Unix socket only, so the host becomes its folder."""
    from sqlalchemy.engine import URL

    doc = make_url(DOC_URL)
    assert (doc.drivername, doc.username, doc.host, doc.database) == ("postgresql+psycopg", "gpuqueue", "localhost",
                                                                      "gpuqueue")
    url = URL.create(doc.drivername, username=name, password=password, database=name,
                     query={"host": server.socket_dir, "port": str(server.port)})
    return url.render_as_string(hide_password=False)


@pytest.mark.slow
def test_documented_setup(postgres_server, documented_database, tmp_path):
    from sqlalchemy.exc import OperationalError

    from jupyter_gpuqueue.ledger import Ledger
    from jupyter_gpuqueue.ledger.schema import head_revision

    name, password = documented_database
    url = _documented_url(postgres_server, name, password)

    # the password createuser --pwprompt stored is the one that lets the role in
    with pytest.raises(OperationalError, match="password authentication failed"):
        Ledger(_documented_url(postgres_server, name, "wrong"))

    # jupyter gpuqueue upgrade-db, with the URL in GPUQUEUE_DB_URL
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUQUEUE_", "JUPYTER_"))}
    env.update(GPUQUEUE_DB_URL=url, JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"), JUPYTER_DATA_DIR=str(tmp_path / "data"))
    res = subprocess.run([str(BINDIR / "jupyter"), "gpuqueue", "upgrade-db"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert res.stdout.startswith("created the ledger's tables at postgresql+psycopg://"), res.stdout
    assert f"is at schema revision {head_revision()}" in res.stdout, res.stdout
    assert password not in res.stdout + res.stderr  # the URL is shown without its password

    # the queue server with c.GpuQueueApp.db_url: a submission lands in the role's own database
    from servertools import Launcher, ServerSetup

    setup = ServerSetup(tmp_path / "server", (DEMO_DIR / "cluster.yaml").read_text(),
                        Path(DEMO_INVENTORY_PATH).read_text(),
                        extra_config=f"c.GpuQueueApp.db_url = {url!r}\n", cycle_interval=0.2)
    launcher = Launcher(zygote=False)
    try:
        server = launcher.start(setup)
        try:
            r = server.request("POST", "workloads", json={
                "name": "pg-doc", "localQueue": "team-a/team-a-queue", "gpus": 1,
                "command": ["sleep", "60"], "maxRuntime": "5m"})
            assert r.status_code == 201, r.text
            uid = r.json()["uid"]
        finally:
            server.stop()
    finally:
        launcher.close()
    assert not setup.db_path.exists()  # not the SQLite default

    import psycopg

    u = make_url(url)
    with psycopg.connect(dbname=name, user=name, password=password, host=u.query["host"],
                         port=int(u.query["port"])) as conn:
        owners = {row[0] for row in conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")}
        (count,) = conn.execute("SELECT count(*) FROM workloads WHERE uid = %s", (uid,)).fetchone()
    assert owners == {name}  # createdb -O: the role owns the database, so its tables are its own
    assert count == 1
