"""The authorization matrix, with a real JupyterHub: every endpoint of the served OpenAPI document ×
{anonymous, a user of another team, a team member, the owner, an admin} → the expected status.

The resource in every row belongs to **alice** (team-a): her running job ``team-a/<job>``, her team's
LocalQueue ``team-a/team-a-queue`` (submissions and estimates name it), her team's budget, the
ClusterQueue ``team-a-cq``. The roles are the example hub's users (jupyterhub_config/local/):

- ``anonymous``: no token; ``other``: bob (team-b); ``member``: anna (team-a, not the owner);
  ``owner``: alice; ``admin``: ada (hub admin with ``custom:gpuqueue:admin``, in team-a).

The endpoint list comes from ``GET openapi.json`` of the running service, so a new endpoint without
a row in ``EXPECTED`` fails the test, naming the row to add (and a row whose endpoint is gone fails
too); ``OUTSIDE_API`` lists what is served outside the API root (``gpuqueue/metrics``).
docs/rest-api.md ("Authorization matrix") has the same table.
"""

from __future__ import annotations

import sys
import uuid

import pytest
import websocket

pytestmark = pytest.mark.slow

ROLES = ("anonymous", "other", "member", "owner", "admin")
USERS = {"other": "bob", "member": "anna", "owner": "alice", "admin": "ada"}
PY = sys.executable

# (method, path) -> statuses for ROLES. Statuses of the allowed roles are what a valid request on
# alice's resource answers (see the bodies in ``request_for``).
R, A = 200, 403  # readable by everyone with a token / refused
EXPECTED: dict[tuple[str, str], tuple[int, ...]] = {
    # read-only views: any token with access to the service
    ("GET", "/info"): (A, R, R, R, R),
    ("GET", "/queues"): (A, R, R, R, R),
    ("GET", "/inventory"): (A, R, R, R, R),
    ("GET", "/prices"): (A, R, R, R, R),
    ("GET", "/openapi.json"): (A, R, R, R, R),
    ("GET", "/openapi.yaml"): (A, R, R, R, R),
    # workloads (custom:gpuqueue:submit): everyone sees positions and costs ...
    ("GET", "/workloads"): (A, R, R, R, R),
    ("GET", "/workloads/{namespace}/{name}"): (A, R, R, R, R),
    ("GET", "/workloads/{namespace}/{name}/timeline"): (A, R, R, R, R),  # a job's page
    ("GET", "/events"): (A, 101, 101, 101, 101),  # websocket handshake
    # ... only the team submits to (and estimates for) its LocalQueue ...
    ("POST", "/workloads"): (A, A, 201, 201, 201),
    ("POST", "/estimate"): (A, A, R, R, R),
    # ... and only the owner reads the logs and cancels (admins too are refused: not their job)
    ("GET", "/workloads/{namespace}/{name}/logs"): (A, A, A, R, A),
    ("DELETE", "/workloads/{namespace}/{name}"): (A, A, A, R, A),
    # costs: everyone with submit reads them; admins change budgets and lift holds
    ("GET", "/reports/{kind}"): (A, R, R, R, R),
    ("GET", "/budgets"): (A, R, R, R, R),
    ("PUT", "/budgets/{namespace}"): (A, A, A, A, R),
    ("DELETE", "/budgets/{namespace}"): (A, A, A, A, R),
    ("POST", "/workloads/{namespace}/{name}/lift-budget-hold"): (A, A, A, A, 409),  # not held: Conflict
    # idle notebook reclaim: only the owner keeps a lease's GPU (alice's job is no lease: Conflict)
    ("POST", "/workloads/{namespace}/{name}/keep-gpu"): (A, A, A, 409, A),
    # admin API (custom:gpuqueue:admin)
    ("GET", "/admin/config"): (A, A, A, A, R),
    ("PUT", "/admin/config"): (A, A, A, A, R),
    ("POST", "/admin/import"): (A, A, A, A, R),
    ("PATCH", "/admin/cluster-queues/{name}"): (A, A, A, A, R),
    ("PATCH", "/admin/priority-classes/{name}"): (A, A, A, A, R),
    ("GET", "/admin/prices"): (A, A, A, A, R),
    ("PUT", "/admin/prices"): (A, A, A, A, R),
    ("GET", "/admin/audit"): (A, A, A, A, R),
    ("GET", "/admin/idle-policy"): (A, A, A, A, R),
    ("PUT", "/admin/idle-policy/{namespace}"): (A, A, A, A, R),
    ("DELETE", "/admin/idle-policy/{namespace}"): (A, A, A, A, R),
    ("PUT", "/admin/webhooks/{namespace}"): (A, A, A, A, R),
}
# Served outside the API root (not in the OpenAPI document): path relative to the service's URL.
OUTSIDE_API = {
    ("GET", "gpuqueue/metrics"): (A, R, R, R, R),  # Prometheus text; any authenticated user
}
# Requests with side effects run after the others, in this order (the owner's cancel last).
LAST = [("PUT", "/budgets/{namespace}"), ("DELETE", "/budgets/{namespace}"),
        ("PUT", "/admin/idle-policy/{namespace}"), ("DELETE", "/admin/idle-policy/{namespace}"),
        ("PUT", "/admin/webhooks/{namespace}"),
        ("DELETE", "/workloads/{namespace}/{name}")]
METHODS = ("get", "post", "put", "patch", "delete")


def served_endpoints(hub) -> set[tuple[str, str]]:
    doc = hub.queue("GET", "openapi.json", hub.token_for("alice")).json()
    return {(m.upper(), path) for path, ops in doc["paths"].items() for m in ops if m in METHODS}


def test_every_served_endpoint_has_a_row(hub):
    served = served_endpoints(hub)
    missing = sorted(served - set(EXPECTED))
    stale = sorted(set(EXPECTED) - served)
    assert not missing, (
        "endpoints without a row in tests/hub/test_authz_matrix.py EXPECTED (and docs/rest-api.md, "
        "'Authorization matrix'); add one per endpoint, statuses for (anonymous, other, member, owner, "
        f"admin): {missing}")
    assert not stale, f"rows for endpoints the service no longer serves: {stale}"


@pytest.fixture(scope="module")
def alices(hub):
    """alice's running job (team-a), and the bodies and paths of her resources."""
    name = f"authz-{uuid.uuid4().hex[:6]}"
    r = hub.queue("POST", "workloads", hub.token_for("alice"),
                  json={"name": name, "command": [PY, "-c", "import time; print('hi'); time.sleep(120)"],
                        "gpus": 1, "maxRuntime": "5m"})
    assert r.status_code == 201, r.text
    yield {"namespace": "team-a", "name": name}
    hub.queue("DELETE", f"workloads/team-a/{name}", hub.token_for("alice"))


def request_for(hub, method: str, path: str, alices: dict) -> tuple[str, dict]:
    """The concrete path (relative to the API root) and request options of a row."""
    concrete = path.format(namespace=alices["namespace"], name=alices["name"], kind="teams")
    if path == "/admin/cluster-queues/{name}":
        concrete = "/admin/cluster-queues/team-a-cq"
    elif path == "/admin/priority-classes/{name}":
        concrete = "/admin/priority-classes/development"
    kw: dict = {}
    job = {"localQueue": "team-a/team-a-queue", "command": [PY, "-c", "pass"], "gpus": 1, "maxRuntime": "1m"}
    if (method, path) == ("POST", "/workloads"):
        kw["json"] = {**job, "name": f"authz-{uuid.uuid4().hex[:8]}"}
    elif (method, path) == ("POST", "/estimate"):
        kw["json"] = job
    elif (method, path) in (("PUT", "/admin/config"), ("POST", "/admin/import")):
        export = hub.queue("GET", "admin/config", hub.token_for("ada"), params={"format": "yaml"})
        kw.update(params={"dryRun": "true"}, data=export.text.encode(),
                  headers={"Content-Type": "application/yaml"})
    elif path == "/admin/cluster-queues/{name}":
        kw["json"] = {}  # changes nothing
    elif path == "/admin/priority-classes/{name}":
        kw["json"] = {"description": "Development and notebooks - lowest priority, uses spare capacity"}
    elif (method, path) == ("PUT", "/admin/prices"):
        prices = hub.queue("GET", "admin/prices", hub.token_for("ada")).json()
        kw["json"] = {"flavors": {e["flavor"]: e["usdPerGpuHour"] for e in prices["effective"]},
                      "default": prices["default"]}  # the same prices again
    elif (method, path) == ("PUT", "/budgets/{namespace}"):
        kw["json"] = {"monthlyUSD": 5000, "warnAt": 0.8, "hard": False}
    elif (method, path) == ("PUT", "/admin/idle-policy/{namespace}"):
        kw["json"] = {"idleTimeoutSeconds": None}  # off, as by default
    elif (method, path) == ("PUT", "/admin/webhooks/{namespace}"):
        kw["json"] = {"url": None}  # none, as by default
    return concrete.lstrip("/"), kw


def status_of(hub, role: str, method: str, path: str, alices: dict) -> int:
    token = hub.token_for(USERS[role]) if role != "anonymous" else None
    concrete, kw = request_for(hub, method, path, alices)
    if path == "/events":
        headers = [f"Authorization: token {token}"] if token else []
        try:
            ws = websocket.create_connection(hub.url.replace("http", "ws") + "services/gpuqueue/gpuqueue/api/events",
                                             header=headers, timeout=20)
        except websocket.WebSocketBadStatusException as e:
            return e.status_code
        ws.close()
        return 101
    return hub.queue(method, concrete, token, **kw).status_code


def test_authorization_matrix(hub, alices):
    served = served_endpoints(hub)
    rows = [k for k in EXPECTED if k in served and k not in LAST] + [k for k in LAST if k in served]
    wrong = []
    for method, path in rows:
        got = tuple(status_of(hub, role, method, path, alices) for role in ROLES)
        if got != EXPECTED[(method, path)]:
            wrong.append(f"{method} {path}: expected {EXPECTED[(method, path)]}, got {got}")
    for (method, path), expected in OUTSIDE_API.items():
        got = tuple(hub.request(method, "services/gpuqueue/" + path,
                                hub.token_for(USERS[role]) if role != "anonymous" else None).status_code
                    for role in ROLES)
        if got != expected:
            wrong.append(f"{method} {path}: expected {expected}, got {got}")
    assert not wrong, "(anonymous, other, member, owner, admin)\n" + "\n".join(wrong)
