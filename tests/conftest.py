"""Shared fixtures: a pytest-jupyter server with jupyter_gpuqueue enabled.

Fixtures (stable names; tests/browser/conftest.py builds on them):

- ``gpuqueue_config``: the ``GpuQueueApp`` config dict merged into ``jp_server_config``: the demo
  cluster (``config_files`` empty), the demo inventory (``inventory_file``, so that a machine with
  real GPUs still tests against the same devices), a SQLite ledger in ``tmp_path``
  (``db_url``), a state folder in ``tmp_path``, a fast ``cycle_interval``, and the user
  ``alice`` (``standalone_user``). Override it, or extend it, to change the queue's setup.
- ``gpuqueue_server_config``: extra ``ServerApp`` config (default ``{}``), e.g. an identity
  provider; override it in a test module or class.
- ``jp_server_config``: enables ``jupyter_gpuqueue`` with the two above.
- ``started``: the ``jp_serverapp`` with its extensions *started* (pytest-jupyter never calls
  ``_start_jupyter_server_extension``; this runs ``start_all_extensions()`` on ``jp_asyncio_loop``),
  so the QueueService's background loop runs whenever the test awaits.
- ``gpuqueue_service``: the started server's QueueService.
- ``gpuqueue_env``: ``{"GPUQUEUE_URL": ..., "GPUQUEUE_TOKEN": ...}`` for the CLI, the client and
  kernels (the test server is not in the runtime dir, so discovery cannot find it); it binds the
  HTTP port.

Do not set ``asyncio_mode = auto``: pytest-jupyter runs ``async def`` tests on ``jp_asyncio_loop``.
"""

from __future__ import annotations

import os

import pytest

import xdist_schedule

pytest_plugins = ("pytest_jupyter.jupyter_server",)


# -- pytest-xdist: longest units first, tests/k8s/real as one unit (tests/xdist_schedule.py) ------------


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: unknown with -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist", None) == "loadfile":
        return xdist_schedule.make_scheduler(config, log)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # in a worker (xdist sets its --dist to "no" there): the order the controller's units go out in
    if os.environ.get("PYTEST_XDIST_WORKER"):
        by_id = {item.nodeid: item for item in items}
        items[:] = [by_id[nodeid] for nodeid in xdist_schedule.longest_first(list(by_id))]

TEST_USER = "alice"


@pytest.fixture
def gpuqueue_config(tmp_path, monkeypatch) -> dict:
    """The ``GpuQueueApp`` config (see the module docstring)."""
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    for var in ("GPUQUEUE_CONFIG", "GPUQUEUE_INVENTORY", "GPUQUEUE_DB_URL", "GPUQUEUE_URL", "GPUQUEUE_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    state = tmp_path / "gpuqueue-state"
    return {
        "db_url": f"sqlite:///{tmp_path / 'gpuqueue-test.sqlite'}",
        "state_dir": str(state),
        "inventory_file": DEMO_INVENTORY_PATH,
        "cycle_interval": 0.1,
        "standalone_user": TEST_USER,
    }


@pytest.fixture
def gpuqueue_server_config() -> dict:
    """Extra ``ServerApp`` config merged into ``jp_server_config``."""
    return {}


@pytest.fixture
def jp_server_config(gpuqueue_config, gpuqueue_server_config):
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_gpuqueue": True},
            **gpuqueue_server_config,
        },
        "GpuQueueApp": gpuqueue_config,
    }


@pytest.fixture
def started(jp_serverapp, jp_asyncio_loop):
    """The server app with its extensions started (the queue's background loop running)."""
    jp_asyncio_loop.run_until_complete(jp_serverapp.extension_manager.start_all_extensions())
    return jp_serverapp


@pytest.fixture
def gpuqueue_service(started):
    return started.web_app.settings["gpuqueue_service"]


@pytest.fixture
def gpuqueue_env(started, http_server_client, jp_http_port, jp_base_url) -> dict:
    """GPUQUEUE_URL / GPUQUEUE_TOKEN of the test server (its port is bound)."""
    return {
        "GPUQUEUE_URL": f"http://127.0.0.1:{jp_http_port}{jp_base_url}",
        "GPUQUEUE_TOKEN": started.identity_provider.token,
    }


# -- databases: a throw-away PostgreSQL server (tests/pgtools.py) ------------------------------------


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server for the session (``tests/pgtools.py``); the test is skipped, with the
    reason, where none can be had (no PostgreSQL binaries, no psycopg)."""
    import pgtools

    reason = pgtools.unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = pgtools.PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server, request):
    """SQLAlchemy URL of a new, empty PostgreSQL database for this test (dropped after it)."""
    url = postgres_server.create_database(request.node.name[:30])
    yield url
    postgres_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request, tmp_path):
    """A ledger URL of each kind: a SQLite file in ``tmp_path``, a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return request.getfixturevalue("postgres_url")
