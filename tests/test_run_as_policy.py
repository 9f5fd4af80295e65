"""Who jobs run as (issue 31): a hub service that runs as root always runs jobs as their owners,
whatever the setting says; the other cases say at start what they mean. The rule is one function,
backends/accounts.run_as_owner_policy; the server extension logs its messages."""

from __future__ import annotations

import pytest

from jupyter_gpuqueue.backends.accounts import run_as_owner_policy


@pytest.mark.parametrize("setting", [None, True, False])
def test_a_root_hub_service_always_runs_jobs_as_their_owners(setting):
    on, msgs = run_as_owner_policy(setting, "hub-service", "local", 0, "root")
    assert on is True
    if setting is False:
        assert [lvl for lvl, _ in msgs] == ["error"]
        assert "refusing c.GpuQueueApp.run_jobs_as_owner = False" in msgs[0][1] and "root" in msgs[0][1]
    else:
        assert msgs == []


def test_a_hub_service_that_is_not_root_says_every_job_runs_as_its_account():
    on, msgs = run_as_owner_policy(None, "hub-service", "local", 1234, "gpuqueue")
    assert on is False
    assert len(msgs) == 1 and msgs[0][0] == "warning"
    assert "every user's job runs as gpuqueue" in msgs[0][1] and "run the service as root" in msgs[0][1]
    # asking for it without root is passed on: the service then refuses to start (require_root)
    assert run_as_owner_policy(True, "hub-service", "local", 1234, "gpuqueue") == (True, [])


def test_a_standalone_server_as_root_says_its_jobs_run_as_root():
    on, msgs = run_as_owner_policy(None, "standalone", "local", 0, "root")
    assert on is False and msgs[0][0] == "warning" and "run as root too" in msgs[0][1]
    assert run_as_owner_policy(None, "standalone", "local", 1000, "me") == (False, [])


def test_other_backends_run_jobs_in_pods():
    assert run_as_owner_policy(None, "hub-service", "kubernetes", 0, "root") == (False, [])


def test_the_service_logs_the_refusal_and_keeps_jobs_as_owners(caplog):
    """The extension as configured: run_jobs_as_owner = False on a root hub service is refused in the
    log and the Accounts mapping is built all the same."""
    import os

    from jupyter_gpuqueue.server.app import GpuQueueApp

    if os.geteuid() != 0:
        pytest.skip("the refusal applies to a service running as root (tests run as root in CI)")
    import logging

    app = GpuQueueApp()
    app.log = logging.getLogger("gpuqueue-policy-test")
    app.run_jobs_as_owner = False
    app.resolved_mode = "hub-service"
    with caplog.at_level("ERROR"):
        accounts = app._owner_accounts()
    assert accounts is not None
    assert any("refusing c.GpuQueueApp.run_jobs_as_owner = False" in r.getMessage() for r in caplog.records)
