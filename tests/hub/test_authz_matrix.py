"""The authorization matrix, with a real JupyterHub: every endpoint of the served OpenAPI document (each
report kind on its own) × {anonymous, a user of another team, a team member, the owner, an admin in no
team, the admin's token reduced to ``access:services``} → the status and, for a refusal, the body's
``reason`` and ``field``.

The expectation is the table of docs/rest-api.md ("Authorization matrix"), read here: a cell of the
document and the server disagreeing fails the test, as does a served endpoint without a row (or a row
of none). The resource in every row belongs to **alice** (team-a): her running job ``team-a/<job>``,
her team's LocalQueue ``team-a/team-a-queue`` (submissions and estimates name it), her team's budget,
the ClusterQueue ``team-a-cq``. The roles are the example hub's users (jupyterhub_config/local/):
``other``: bob (team-b); ``member``: anna (team-a, not the owner); ``owner``: alice; ``admin``: ops
(hub admin with ``custom:gpuqueue:admin``, in no team); ``reduced``: a token of ops with only
``access:services!service=gpuqueue``.

Beyond the codes: the reports and budgets are checked for what each caller sees of alice's job and
team (:func:`content_problem`); a cancel that the table allows runs on a job of alice's that is
running at that moment (a new one each), and the admin's is in the audit log.
"""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from pathlib import Path

import pytest
import websocket

pytestmark = pytest.mark.slow

DOC = Path(__file__).resolve().parents[2] / "docs" / "rest-api.md"
ROLES = ("anonymous", "other", "member", "owner", "admin", "reduced")
USERS = {"other": "bob", "member": "anna", "owner": "alice", "admin": "ops", "reduced": "ops"}
TEAMS = {"other": ["team-b"], "member": ["team-a"], "owner": ["team-a"], "admin": []}  # GET budgets' myTeams
ACCESS_ONLY = ["access:services!service=gpuqueue"]
REASONS = {403: "Forbidden", 404: "NotFound", 409: "Conflict", 400: "Invalid"}
PY = sys.executable
METHODS = ("get", "post", "put", "patch", "delete")

# Requests with side effects run after the others, in this order.
LAST = [("PUT", "/budgets/{namespace}"), ("DELETE", "/budgets/{namespace}"),
        ("PUT", "/admin/idle-policy/{namespace}"), ("DELETE", "/admin/idle-policy/{namespace}"),
        ("PUT", "/admin/webhooks/{namespace}"),
        ("PUT", "/admin/runtime-caps/{namespace}"), ("DELETE", "/admin/runtime-caps/{namespace}"),
        ("DELETE", "/workloads/{namespace}/{name}")]


def doc_matrix() -> dict[tuple[str, str], tuple[str, ...]]:
    """The rows of docs/rest-api.md's "Authorization matrix" table: (method, path) -> a cell per role
    of ROLES (backticks stripped), e.g. ``("GET", "/reports/jobs") -> ("403 -", "200", ...)``."""
    text = DOC.read_text()
    section = text.split("\n## Authorization matrix\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[str, str], tuple[str, ...]] = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`(GET|POST|PUT|PATCH|DELETE) ([^`]+)`\s*\|(.*)\|\s*$", line)
        if not m:
            continue
        cells = tuple(c.strip().strip("`") for c in m.group(3).split("|"))
        assert len(cells) == len(ROLES), f"docs/rest-api.md matrix row with {len(cells)} cells: {line}"
        key = (m.group(1), m.group(2))
        assert key not in rows, f"docs/rest-api.md has two matrix rows for {key}"
        rows[key] = cells
    assert rows, "no table in docs/rest-api.md's 'Authorization matrix'"
    return rows


def served_endpoints(hub) -> set[tuple[str, str]]:
    """(METHOD, path) of the served OpenAPI document, a path parameter with an enum (the report
    kinds) expanded into one path per value."""
    doc = hub.queue("GET", "openapi.json", hub.token_for("alice")).json()
    out = set()
    for path, ops in doc["paths"].items():
        for m, op in ops.items():
            if m not in METHODS:
                continue
            paths = [path]
            for p in op.get("parameters", []) + ops.get("parameters", []):
                values = p.get("in") == "path" and (p.get("schema") or {}).get("enum")
                if values:
                    paths = [q.replace("{" + p["name"] + "}", v) for q in paths for v in values]
            out.update((m.upper(), q) for q in paths)
    return out


def test_every_served_endpoint_has_a_row(hub):
    served = served_endpoints(hub)
    documented = {k for k in doc_matrix() if k[1].startswith("/")}
    missing = sorted(served - documented)
    stale = sorted(documented - served)
    assert not missing, (
        "endpoints without a row in docs/rest-api.md's 'Authorization matrix' (read by "
        f"tests/hub/test_authz_matrix.py); add one per endpoint, a cell per role {ROLES}: {missing}")
    assert not stale, f"rows for endpoints the service no longer serves: {stale}"


def token(hub, role: str):
    if role == "anonymous":
        return None
    return hub.token_for(USERS[role], ACCESS_ONLY if role == "reduced" else None)


def submit_running_job(hub) -> dict:
    """A new job of alice's (team-a, 1 GPU), once it is Running: ``{"namespace", "name"}``."""
    name = f"authz-{uuid.uuid4().hex[:6]}"
    alice = hub.token_for("alice")
    r = hub.queue("POST", "workloads", alice,
                  json={"name": name, "command": [PY, "-c", "import time; print('hi'); time.sleep(120)"],
                        "gpus": 1, "maxRuntime": "5m"})
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 60
    while (state := hub.queue("GET", f"workloads/team-a/{name}", alice).json()["state"]) != "Running":
        assert state in ("Pending", "Admitted") and time.monotonic() < deadline, f"team-a/{name}: {state}"
        time.sleep(0.2)
    return {"namespace": "team-a", "name": name}


@pytest.fixture(scope="module")
def alices(hub):
    """alice's running job (team-a)."""
    job = submit_running_job(hub)
    yield job
    hub.queue("DELETE", f"workloads/team-a/{job['name']}", hub.token_for("alice"))


def request_for(hub, method: str, path: str, job: dict) -> tuple[str, dict]:
    """The concrete path (relative to the API root) and request options of a row, on ``job``."""
    concrete = path.format(namespace=job["namespace"], name=job["name"])
    if path == "/admin/cluster-queues/{name}":
        concrete = "/admin/cluster-queues/team-a-cq"
    elif path == "/admin/priority-classes/{name}":
        concrete = "/admin/priority-classes/development"
    kw: dict = {}
    admin = hub.token_for(USERS["admin"])
    spec = {"localQueue": "team-a/team-a-queue", "command": [PY, "-c", "pass"], "gpus": 1, "maxRuntime": "1m"}
    if (method, path) == ("POST", "/workloads"):
        kw["json"] = {**spec, "name": f"authz-{uuid.uuid4().hex[:8]}"}
    elif (method, path) == ("POST", "/estimate"):
        kw["json"] = spec
    elif (method, path) in (("PUT", "/admin/config"), ("POST", "/admin/import")):
        export = hub.queue("GET", "admin/config", admin, params={"format": "yaml"})
        kw.update(params={"dryRun": "true"}, data=export.text.encode(),
                  headers={"Content-Type": "application/yaml"})
    elif path == "/admin/cluster-queues/{name}":
        kw["json"] = {}  # changes nothing
    elif path == "/admin/priority-classes/{name}":
        kw["json"] = {"description": "Development and notebooks - lowest priority, uses spare capacity"}
    elif (method, path) == ("PUT", "/admin/prices"):
        prices = hub.queue("GET", "admin/prices", admin).json()
        kw["json"] = {"flavors": {e["flavor"]: e["usdPerGpuHour"] for e in prices["effective"]},
                      "default": prices["default"]}  # the same prices again
    elif (method, path) == ("PUT", "/budgets/{namespace}"):
        kw["json"] = {"monthlyUSD": 5000, "warnAt": 0.8, "hard": False}
    elif (method, path) == ("PUT", "/admin/idle-policy/{namespace}"):
        kw["json"] = {"idleTimeoutSeconds": None}  # off, as by default
    elif (method, path) == ("POST", "/workloads/{namespace}/{name}/activity"):
        kw["json"] = {"busy": False, "idleSeconds": 0}
    elif (method, path) == ("PUT", "/admin/webhooks/{namespace}"):
        kw["json"] = {"url": None}  # none, as by default
    elif (method, path) == ("PUT", "/admin/runtime-caps/{namespace}"):
        kw["json"] = {"maxRuntimeSeconds": None}  # no cap, as by default
    return concrete.lstrip("/"), kw


def cell_of(status: int, body) -> str:
    """A response in the notation of the document's cells: ``"200"``; a refusal with a JSON body
    ``{"reason", "field"}`` as ``"403 name"`` (``"403 scope:submit"`` / ``"403 scope:admin"``: field
    ``scope`` and the scope the message names; ``"403 -"``: reason null, no field); a reason other
    than the status's own is spelled out (``"403 reason=Conflict"``, never in the document)."""
    if status < 400 or not isinstance(body, dict):
        return str(status)
    if body.get("reason") is None and "field" not in body:
        return f"{status} -"
    if body.get("reason") != REASONS.get(status):
        return f"{status} reason={body.get('reason')}"
    field = body.get("field")
    if field == "scope":
        held = [s for s in ("admin", "submit") if f"custom:gpuqueue:{s}" in body.get("message", "")]
        return f"{status} scope:{held[0] if held else '?'}"
    return f"{status} {field}"


def content_problem(hub, role: str, method: str, path: str, body, job: dict) -> str | None:
    """What is wrong with an allowed answer's content (None: nothing): each report shows alice's job
    (or team) with her name to her team and the admin, and to bob (another team) the team totals
    only (docs/rest-api.md, "Who sees what"); the workload list holds her job for the same readers;
    budgets list team-a, ``myTeams`` the caller's; a cancel leaves alice's job Cancelled, and an
    admin's is in the audit log."""
    name = job["name"]
    sees = role != "other"
    if path.startswith("/reports/"):
        items = body["items"]
        kind = path.rsplit("/", 1)[1]
        checks = {
            "jobs": lambda i: i["name"] == name and i["owner"] == "alice" and i["costUsd"] > 0,
            "users": lambda i: i["owner"] == "alice" and i["namespace"] == "team-a" and i["jobs"] >= 1,
            "teams": lambda i: i["namespace"] == "team-a" and any(t["name"] == name and t["owner"] == "alice"
                                                                  for t in i["topJobs"]),
            "flavors": lambda i: i["jobs"] >= 1 and i["costUsd"] > 0,
            "idle": lambda i: i["usedGpuHours"] > 0,
            "months": lambda i: i["namespace"] == "team-a" and i["jobs"] >= 1,
            "daily": lambda i: i["byNamespace"].get("team-a", 0) > 0,
            # team totals (no names): alice's job was admitted this month
            "waits": lambda i: i["namespace"] == "team-a" and i["admissions"] >= 1,
        }
        found = any(checks[kind](i) for i in items)
        if kind in ("jobs", "users", "teams") and not sees:
            if found:
                return f"bob (team-b) sees alice's job or name in the {kind} report: {str(items)[:400]}"
            if any(i.get("namespace") == "team-a" and (i.get("owner") or i.get("name")) for i in items):
                return f"bob (team-b) sees a team-a job or user in the {kind} report: {str(items)[:400]}"
            if kind == "teams" and not any(i["namespace"] == "team-a" and i["costUsd"] > 0 for i in items):
                return f"team-a's totals not in the teams report: {str(items)[:400]}"
            return None
        return None if found else f"alice's job or team not in the {kind} report: {str(items)[:400]}"
    if (method, path) == ("GET", "/workloads"):
        listed = any(w["namespace"] == "team-a" and w["name"] == name for w in body["items"])
        if listed != sees:
            return f"alice's job {'not ' if sees else ''}in the list of {role}"
        if not sees and any(w["namespace"] != "team-b" for w in body["items"]):
            return f"bob (team-b) lists another team's workloads: {[w['namespace'] for w in body['items']]}"
    if path == "/budgets":
        teams = {t["namespace"]: t for t in body["teams"]}
        if "team-a" not in teams or not teams["team-a"]["spentUsd"] > 0:
            return f"team-a's spend not in the budgets: {body['teams']}"
        if body["myTeams"] != TEAMS[role]:
            return f"myTeams {body['myTeams']}, expected {TEAMS[role]}"
    if (method, path) == ("DELETE", "/workloads/{namespace}/{name}"):
        if (body["state"], body["owner"]) != ("Cancelled", "alice"):
            return f"not cancelled: {body['state']} {body.get('message')}"
        if role == "admin":
            entry = hub.queue("GET", "admin/audit", hub.token_for("ops"), params={"limit": 1}).json()["items"][0]
            got = (entry["operation"], entry["actor"], entry["target"], entry["before"])
            want = ("cancel-workload", "ops", f"workload/team-a/{name}", {"state": "Running", "owner": "alice"})
            if got != want:
                return f"audit entry {got}, expected {want}"
    return None


def answer(hub, role: str, method: str, path: str, job: dict):
    """(status, JSON body or None) of ``role``'s request of a row on ``job``."""
    tok = token(hub, role)
    if path == "/events":
        headers = [f"Authorization: token {tok}"] if tok else []
        try:
            ws = websocket.create_connection(hub.url.replace("http", "ws") + "services/gpuqueue/gpuqueue/api/events",
                                             header=headers, timeout=20)
        except websocket.WebSocketBadStatusException as e:
            return e.status_code, None
        ws.close()
        return 101, None
    if not path.startswith("/"):  # outside the API root
        r = hub.request(method, "services/gpuqueue/" + path, tok)
    else:
        concrete, kw = request_for(hub, method, path, job)
        r = hub.queue(method, concrete, tok, **kw)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, None


def test_authorization_matrix(hub, alices):
    matrix = doc_matrix()
    rows = [k for k in matrix if k not in LAST] + [k for k in LAST if k in matrix]
    alice = hub.token_for("alice")
    wrong = []
    for method, path in rows:
        expected = matrix[(method, path)]
        got = []
        for role, cell in zip(ROLES, expected):
            # a cancel the table allows gets a job of its own, running now; the refused ones alice's
            job = submit_running_job(hub) if method == "DELETE" and "{name}" in path and cell == "200" else alices
            status, body = answer(hub, role, method, path, job)
            got.append(cell_of(status, body))
            if status < 300 and got[-1] == cell:
                problem = content_problem(hub, role, method, path, body, job)
                if problem:
                    wrong.append(f"{method} {path} as {role}: {problem}")
            elif got[-1] != cell and body:
                wrong.append(f"{method} {path} as {role}: {str(body)[:300]}")
        if tuple(got) != expected:
            wrong.append(f"{method} {path}: docs/rest-api.md {expected}, served {tuple(got)}")
    # what was refused changed nothing: alice's job still runs
    assert hub.queue("GET", f"workloads/team-a/{alices['name']}", alice).json()["state"] == "Running"
    assert not wrong, f"{ROLES}\n" + "\n".join(wrong)


def workload_events(ws, done, timeout: float = 30.0) -> list[tuple[str, str]]:
    """(namespace, name) of the workload events read from ``ws`` until ``done(seen)``."""
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    while not done(seen):
        assert time.monotonic() < deadline, f"not seen in {timeout} s; seen {seen}"
        msg = json.loads(ws.recv())
        for e in msg["events"] if msg["type"] == "batch" else [msg]:
            if e["type"] == "workload":
                seen.append((e["workload"]["namespace"], e["workload"]["name"]))
    return seen


def test_another_teams_jobs_are_not_heard_and_their_gpus_not_named(hub, alices):
    """docs/rest-api.md, "Who sees what", over the real hub: bob's event stream carries his own
    workloads and none of team-a's (anna's carries alice's new job), and the GPU alice's job holds
    is "team-a" to bob, "team-a/<name>" to anna and to the admin."""
    url = hub.url.replace("http", "ws", 1) + "services/gpuqueue/gpuqueue/api/events?batch=1"
    streams = {u: websocket.create_connection(url, header=[f"Authorization: token {hub.token_for(u)}"], timeout=20)
               for u in ("anna", "bob")}
    job = None
    try:
        job = submit_running_job(hub)  # alice's, once both streams are open
        mine = f"authz-b-{uuid.uuid4().hex[:6]}"
        r = hub.queue("POST", "workloads", hub.token_for("bob"),
                      json={"name": mine, "localQueue": "team-b/team-b-queue", "command": [PY, "-c", "pass"],
                            "gpus": 1, "maxRuntime": "1m"})
        assert r.status_code == 201, r.text
        workload_events(streams["anna"], lambda seen: ("team-a", job["name"]) in seen)
        # bob's own submission came after alice's job started: whatever of it bob was sent came first
        heard = workload_events(streams["bob"], lambda seen: ("team-b", mine) in seen)
        assert {ns for ns, _ in heard} == {"team-b"}, heard

        def holders(user: str) -> set:
            inv = hub.queue("GET", "inventory", hub.token_for(user)).json()
            return {h for n in inv["nodes"] for g in n["gpus"]
                    for h in [g["assignedTo"]] + [d["assignedTo"] for d in g["mig"] or []] if h}
        held = f"team-a/{job['name']}"
        assert held in holders("anna") and held in holders("ops")
        assert held not in holders("bob") and "team-a" in holders("bob")
        assert not any(h.startswith("team-a/") for h in holders("bob"))
    finally:
        for ws in streams.values():
            ws.close()
        if job:
            hub.queue("DELETE", f"workloads/team-a/{job['name']}", hub.token_for("alice"))
