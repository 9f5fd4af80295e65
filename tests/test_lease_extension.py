"""Extending a notebook lease's maximum time where a hub admin allows it (issue 34 item 1):
service/lease_extension.py on the real QueueService (SQLite ledger, real restarts)."""

from __future__ import annotations

import pytest
from test_leases import env, get, lease, wait  # noqa: F401  (env: the fixture)

from jupyter_gpuqueue.errors import Conflict, Forbidden, ValidationError


def test_a_lease_is_extended_where_allowed_as_often_as_allowed(env):  # noqa: F811
    svc = env()
    svc.submit(lease("nb", maxRuntimeSeconds=600), user="alice")
    wait(svc, lambda: get(svc, "nb")["state"] == "Running")
    w = get(svc, "nb")
    assert (w["leaseExtensionSeconds"], w["leaseExtensionsLeft"]) == (None, None)  # off by default
    with pytest.raises(Conflict, match="not allowed"):
        svc.extend_lease("lab", "nb", user="alice")
    with pytest.raises(ValidationError) as e:
        svc.lease_extensions.configure(-1, 1)
    assert e.value.field == "lease_extension_seconds"

    svc.lease_extensions.configure(300, 2)
    assert get(svc, "nb")["leaseExtensionsLeft"] == 2
    with pytest.raises(Forbidden):
        svc.extend_lease("lab", "nb", user="bob")
    assert get(svc, "nb")["maxRuntimeSeconds"] == 600  # a refusal changes nothing
    w = svc.extend_lease("lab", "nb", user="alice")
    assert (w["maxRuntimeSeconds"], w["leaseExtensionsLeft"]) == (900, 1)
    svc.extend_lease("lab", "nb", user="alice")
    with pytest.raises(Conflict, match="2 times already"):
        svc.extend_lease("lab", "nb", user="alice")
    # kept in the ledger: a restarted service has the longer lease and no extension left
    svc2 = env()
    svc2.lease_extensions.configure(300, 2)
    w = get(svc2, "nb")
    assert (w["state"], w["maxRuntimeSeconds"], w["leaseExtensionsLeft"]) == ("Running", 1200, 0)
