"""The served OpenAPI document drives schemathesis against a real running server that has something
to act on: every operation of ``GET gpuqueue/api/openapi.json`` gets generated requests (valid and
invalid ones), and every response must be no 5xx, have a status the document declares, a declared
content type, declared headers and a body that matches the declared schema; a request the document
calls invalid must be refused (``negative_data_rejection``) and one it calls valid must not be
(``positive_data_acceptance``: no 400/413/422 for valid data). Then the document's ``links`` drive
a stateful run (POST workloads → GET / DELETE / timeline / logs / lift-budget-hold of what was
created; PUT budgets → DELETE budgets).

The server is seeded before the run: running workloads (a command that sleeps), pending ones (more
GPUs than are free), finished ones with logs, workloads held by team-b's hard budget, a stored
budget, and NotebookLeases with an idle warning (for ``keep-gpu``: put in their run records while
the server is stopped, as a server that warned would have left them; see ``_seed_idle_warnings``). Every request carries the server's real token (a schemathesis auth provider: the document's
security schemes are kept). The run fails unless every operation got at least one 2xx, and prints
the status counts per operation (``-s``). Then the matrix's other callers (no token, another
team, a team member without admin, an admin in no team, a reduced token) send the same operations
and get the refusals docs/rest-api.md documents (tests/test_schemathesis_callers.py).

Valid data that the server could act on: the document says what is well formed; what exists is the
server's (a LocalQueue, a flavor, a workload name, a program on PATH, Kueue YAML that validates).
For valid (positive) cases a ``usable`` step puts, with probability about 1/2 per value, what the
seeded server has in place of the generated one: a path's ``{namespace}/{name}`` becomes a seeded or
created workload, a command the program ``gpujob`` (the only program on the server's PATH: a
generated command can never name a real one), ``localQueue`` / ``flavor`` / ``priorityClass`` /
``migProfile`` existing ones, a Kueue YAML body the server's own export. The step is applied before
the request is sent, and schemathesis re-checks the case against the document afterwards, so a case
stays "positive" only if it still is.

Size: ``GPUQUEUE_SCHEMATHESIS_EXAMPLES`` examples per operation and generation mode (default 40:
the suite's budget, issue 36; 100 for a deeper run), plus ``GPUQUEUE_SCHEMATHESIS_STATEFUL``
stateful scenarios (default 40); a run sends at least 50 requests per example and operation mode
budget (2,000 at the default; asserted). ``/events`` is a websocket: tests/test_events_fuzz.py fuzzes it.
"""

from __future__ import annotations

import os
import random
import stat
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core import media_types

from servertools import Launcher, ServerSetup

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("GPUQUEUE_SCHEMATHESIS_EXAMPLES", "40"))
STATEFUL = int(os.environ.get("GPUQUEUE_SCHEMATHESIS_STATEFUL", "40"))
MIN_REQUESTS = int(os.environ.get("GPUQUEUE_SCHEMATHESIS_MIN_REQUESTS", str(50 * EXAMPLES if EXAMPLES >= 40 else 0)))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection,
          positive_data_acceptance]

# libyaml's safe loader where PyYAML has it: the pure-Python one took 40 % of the run parsing the
# server's YAML answers (reports and exports of many documents)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

GPUJOB = """#!/bin/sh
# the one program on the fuzzed server's PATH: `gpujob hold` sleeps (a running workload), anything
# else ends at once (a finished one), after a line of log; `gpujob seed-burst` runs 3 s (team-b's
# first cent, spent at once on four H100s: _seed)
echo "gpujob $*"
if [ "$1" = hold ]; then exec /bin/sleep 10800; fi
if [ "$1" = seed-burst ]; then exec /bin/sleep 3; fi
exit 0
"""


@schemathesis.deserializer(*media_types.YAML_MEDIA_TYPES)
def yaml_text(ctx, response):
    """The document declares YAML bodies as ``{type: string}``: the text of a YAML stream (the
    Kueue export has many documents). Check that it parses, then validate the text itself."""
    text = response.content.decode("utf-8")
    for _event in yaml.parse(text, Loader=SAFE_LOADER):  # raises on invalid YAML (libyaml's parser:
        pass  # a third of the CPU of building the objects, 7 of the test's 49 CPU seconds)
    return text


@schemathesis.serializer(*media_types.YAML_MEDIA_TYPES)
def yaml_body(ctx, value):
    """A YAML body (``{type: string}`` in the document) is sent as its text, not as a YAML scalar
    holding the text (schemathesis' default dumps the value)."""
    return (value if isinstance(value, str) else yaml.safe_dump(value)).encode("utf-8")


class Fuzzed:
    """The running server, what it holds (refreshed as the run goes), and the counts per operation."""

    def __init__(self, srv):
        self.srv = srv
        self.by_operation: dict[str, Counter] = defaultdict(Counter)
        self.lock = threading.Lock()
        self.refreshed = 0.0
        self.workloads: list[dict] = []
        self.held: list[dict] = []
        self.export_yaml = ""
        self.cluster_queues: list[str] = []
        self.priority_classes: list[str] = []
        self.flavors: list[str] = []
        self.mig_profiles: list[str] = []
        self.local_queues: list[str] = []
        self.namespaces: list[str] = ["team-a", "team-b"]
        self.seq = 0

    @property
    def requests(self) -> int:
        return sum(sum(c.values()) for c in self.by_operation.values())

    def count(self, label: str, status: int) -> None:
        with self.lock:
            self.by_operation[label][status] += 1

    def refresh(self, force: bool = False) -> None:
        """What exists now (workloads, held ones, the configuration), at most every second."""
        if not force and time.monotonic() - self.refreshed < 1.0:
            return
        self.refreshed = time.monotonic()
        self.workloads = self.srv.request("GET", "workloads").json()["items"]
        self.held = [w for w in self.workloads if w.get("state") == "Pending" and _held(w)]
        self.export_yaml = self.srv.request("GET", "admin/config", params={"format": "yaml"}).content.decode("utf-8")
        docs = [d for d in yaml.load_all(self.export_yaml, Loader=SAFE_LOADER) if isinstance(d, dict)]
        self.cluster_queues = [d["metadata"]["name"] for d in docs if d.get("kind") == "ClusterQueue"]
        self.priority_classes = [d["metadata"]["name"] for d in docs
                                 if d.get("kind") in ("WorkloadPriorityClass", "PriorityClass")]
        self.flavors = [d["metadata"]["name"] for d in docs if d.get("kind") == "ResourceFlavor"]
        self.local_queues = [f"{d['metadata'].get('namespace', 'default')}/{d['metadata']['name']}"
                             for d in docs if d.get("kind") == "LocalQueue"]
        info = self.srv.request("GET", "info").json()
        self.mig_profiles = sorted({p for p in _find_mig_profiles(info)}) or ["1g.10gb"]

    def unique_name(self) -> str:
        with self.lock:
            self.seq += 1
            return f"fz-{os.getpid() % 1000}-{self.seq}"


def _held(workload: dict) -> bool:
    text = repr(workload.get("conditions", "")) + repr(workload.get("reason", "")) + repr(workload.get("status", ""))
    return "BudgetExceeded" in text or workload.get("budgetHold") is True


def _find_mig_profiles(info) -> list[str]:
    found = []
    if isinstance(info, dict):
        for key, value in info.items():
            if key in ("migProfiles", "mig_profiles") and isinstance(value, list):
                found.extend(v if isinstance(v, str) else v.get("name", "") for v in value)
            else:
                found.extend(_find_mig_profiles(value))
    elif isinstance(info, list):
        for value in info:
            found.extend(_find_mig_profiles(value))
    return [f for f in found if f]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH
    from jupyter_gpuqueue.service import DEMO_DIR

    base = tmp_path_factory.mktemp("schemathesis")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    (bin_dir / "gpujob").write_text(GPUJOB)
    (bin_dir / "gpujob").chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP)
    setup = ServerSetup(base, (DEMO_DIR / "cluster.yaml").read_text(), Path(DEMO_INVENTORY_PATH).read_text(),
                        cycle_interval=0.1,
                        # POST extend's 2xx: the running leases (IDLE_LEASES) may be extended
                        extra_config="c.GpuQueueApp.lease_extension_seconds = 60\n"
                                     "c.GpuQueueApp.lease_max_extensions = 100000\n")
    env = setup.env
    setup.env = lambda: {**env(), "PATH": str(bin_dir)}
    launcher = Launcher(zygote=False)
    srv = launcher.start(setup)
    try:
        srv = _seed_idle_warnings(srv, launcher, setup)
        _seed(srv)
        state = Fuzzed(srv)
        state.refresh(force=True)
        yield state
    finally:
        for w in srv.request("GET", "workloads", params={"state": "Pending,Admitted,Running"}).json()["items"]:
            srv.request("DELETE", f"workloads/{w['namespace']}/{w['name']}")
        srv.stop()
        launcher.close()


# The seeds (running jobs, NotebookLeases) must outlive the run: with 10 minutes, a run of 17.6 min
# (four workers beside other sessions' tests, load ~15) found every lease ended by its maximum time
# when it came to POST activity / extend (409 only, "never succeeded"). The fixture cancels them.
SEED_MAX_RUNTIME = "3h"


def _submit(srv, **req) -> dict:
    resp = srv.request("POST", "workloads", json={"maxRuntime": SEED_MAX_RUNTIME, **req})
    assert resp.status_code == 201, resp.text
    return resp.json()


def _wait(srv, ns, name, states, timeout=60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        wl = srv.request("GET", f"workloads/{ns}/{name}").json()
        if wl.get("state") in states:
            return wl
        assert time.monotonic() < deadline, wl
        time.sleep(0.1)


def _seed(srv) -> None:
    """Finished, running and pending workloads in team-a; team-b over a hard budget with held ones."""
    # team-b spends its first cent (the hard budget below) on four H100s for 3 s, while team-a's
    # seeds start: its one running GPU alone took ~16 s to spend it
    _submit(srv, name="seed-b-burst", command=["gpujob", "seed-burst"], gpus=4, flavor="nvidia-h100",
            localQueue="team-b/team-b-queue")
    for i in range(3):
        _submit(srv, name=f"seed-done-{i}", command=["gpujob", "done", str(i)], gpus=1,
                localQueue="team-a/team-a-queue")
    for i in range(3):
        _submit(srv, name=f"seed-run-{i}", command=["gpujob", "hold"], gpus=1, flavor="nvidia-l4",
                localQueue="team-a/team-a-queue")
    for i in range(3):
        _wait(srv, "team-a", f"seed-done-{i}", ("Succeeded",))
        _wait(srv, "team-a", f"seed-run-{i}", ("Running",))
    # more than the cohort has free: stays Pending
    _submit(srv, name="seed-pending", command=["gpujob", "hold"], gpus=4, flavor="nvidia-l4",
            localQueue="team-a/team-a-queue")
    # team-b: a running job, then a hard budget it has already spent: new submissions are held
    _submit(srv, name="seed-b-run", command=["gpujob", "hold"], gpus=1, localQueue="team-b/team-b-queue")
    _wait(srv, "team-b", "seed-b-run", ("Running",))
    _wait(srv, "team-b", "seed-b-burst", ("Succeeded",))
    _hold(srv, "seed-held")
    resp = srv.request("PUT", "budgets/team-a", json={"monthlyUSD": 1000})
    assert resp.status_code == 200, resp.text


IDLE_LEASES = [f"seed-idle-{i}" for i in range(3)]


def _seed_idle_warnings(srv, launcher, setup):
    """Running NotebookLeases of team-a (an admin's idle policy on) that carry an idle warning, for
    ``POST keep-gpu``'s 2xx. A warning needs the owner's activity from the Hub and
    ``idleTimeoutSeconds`` (≥ 300 s) of idleness; a standalone server reads no Hub. The warning
    is persisted in the lease's run record (``run.idle``, kept across restarts: service/idle.py),
    so it is put there while the server is stopped, as a server that had warned would have left
    it; the restarted server keeps it (with no activity source it never releases the lease, and
    each keep ends one warning: 200 once per lease, then 409). Returns the restarted server."""
    from jupyter_gpuqueue.ledger import Ledger

    resp = srv.request("PUT", "admin/idle-policy/team-a",
                       json={"idleTimeoutSeconds": 300, "warnSeconds": 86400, "maxKeeps": 1000})
    assert resp.status_code == 200, resp.text
    for name in IDLE_LEASES:
        _submit(srv, name=name, kind="NotebookLease", migProfile="1g.10gb", localQueue="team-a/team-a-queue")
    for name in IDLE_LEASES:
        assert _wait(srv, "team-a", name, ("Running",))["idleDeadline"] is None
    srv.stop()
    ledger = Ledger(f"sqlite:///{setup.db_path}")
    try:
        now = time.time()
        for name in IDLE_LEASES:
            row = ledger.find_workload("team-a", name)
            ledger.update_workload(row["uid"], run={**(row["run"] or {}), "idle": {
                "warnedAt": now, "deadline": now + 86400, "idleSince": now - 300}})
    finally:
        ledger.close()
    srv = launcher.start(setup)
    for name in IDLE_LEASES:
        w = srv.request("GET", f"workloads/team-a/{name}").json()
        assert w["state"] == "Running" and w["idleDeadline"] is not None and w["idleKeepsLeft"] == 1000, w
    return srv


def _hold(srv, prefix: str, n: int = 8) -> None:
    """team-b over a hard budget (a cent, the least a budget may be, which its running job has
    spent) and ``n`` submissions it holds."""
    deadline = time.monotonic() + 120
    while True:  # seed-b-run's GPU costs a cent within seconds
        teams = {t["namespace"]: t for t in srv.request("GET", "budgets").json()["teams"]}
        if teams["team-b"]["spentUsd"] >= 0.0101:
            break
        assert time.monotonic() < deadline, teams["team-b"]
        time.sleep(0.5)
    resp = srv.request("PUT", "budgets/team-b", json={"monthlyUSD": 0.01, "hard": True})
    assert resp.status_code == 200, resp.text
    for i in range(n):
        wl = _submit(srv, name=f"{prefix}-{i}", command=["gpujob", "x"], gpus=1, localQueue="team-b/team-b-queue")
        assert wl["reason"] == "BudgetExceeded", wl


# -- valid data the server can act on ------------------------------------------------------------


def usable(case, fz: Fuzzed, rnd: random.Random, paths: bool = True) -> None:
    """For a positive case: about half of the values that name something of the server's become
    something it has (see the module docstring). The case is re-checked against the document.
    ``paths`` False: path parameters are kept (a stateful step's come from a link)."""
    fz.refresh()
    label = f"{case.method.upper()} {case.operation.path}"
    params = dict(case.path_parameters or {})
    if not paths:
        pass
    elif "{namespace}" in case.operation.path and "{name}" in case.operation.path and rnd.random() < 0.7:
        idle = [w for w in fz.workloads if w["name"] in IDLE_LEASES]
        if label.endswith("lift-budget-hold") and fz.held and rnd.random() < 0.9:
            pool = fz.held
        elif (label.endswith("keep-gpu") or label.endswith("/activity") or label.endswith("/extend")) \
                and idle and rnd.random() < 0.9:
            pool = idle
        elif label.endswith("/move") and rnd.random() < 0.9:  # only a pending workload moves (held ones too)
            pool = [w for w in fz.workloads if w.get("state") == "Pending"]
        else:  # the held ones are kept for lift-budget-hold, the idle-warned leases for keep-gpu
            pool = ([w for w in fz.workloads if w not in fz.held and w not in idle] if rnd.random() < 0.9
                    else fz.workloads)
        if pool:
            w = rnd.choice(pool)
            params.update(namespace=w["namespace"], name=w["name"])
    elif (label.endswith("/budgets/{namespace}") or label.endswith("/idle-policy/{namespace}")
          or label.endswith("/webhooks/{namespace}") or label.endswith("/runtime-caps/{namespace}")) \
            and rnd.random() < 0.7:
        params["namespace"] = rnd.choice(fz.namespaces)
    elif label.endswith("/cluster-queues/{name}") and fz.cluster_queues and rnd.random() < 0.7:
        params["name"] = rnd.choice(fz.cluster_queues)
    elif label.endswith("/priority-classes/{name}") and fz.priority_classes and rnd.random() < 0.7:
        params["name"] = rnd.choice(fz.priority_classes)
    if params != (case.path_parameters or {}):
        case.path_parameters = params
    # bodies: always (a valid-by-the-document body the server must refuse is no success path)
    body = case.body
    if label in ("PUT /admin/config", "POST /admin/import"):
        # the document says "a string"; only Kueue YAML that validates is usable: the server's own
        # (GAP: the JSON form {"yaml": ...} has no additionalProperties: false)
        if case.media_type and "json" in case.media_type:
            case.body = {"yaml": fz.export_yaml}
        else:
            case.body = fz.export_yaml
    elif label == "POST /workloads" and isinstance(body, str):
        case.body = _manifest(fz, rnd)
    elif label in ("POST /workloads", "POST /estimate") and isinstance(body, dict):
        if isinstance(body.get("items"), list):
            case.body = {"items": [_usable_request(item, fz, rnd) for item in body["items"][:3]]}
        elif "manifest" in body:
            case.body = {"manifest": _manifest(fz, rnd)}
        else:
            case.body = _usable_request(body, fz, rnd)
    elif label == "POST /workloads/{namespace}/{name}/move" and isinstance(body, dict):
        # whole GPUs both teams' queues offer (a MIG workload moved to whole GPUs is a valid move)
        case.body = {"gpus": rnd.choice([1, 2]), "flavor": rnd.choice(["any", "nvidia-a100", "nvidia-l4"])}
    elif label == "PATCH /admin/cluster-queues/{name}" and isinstance(body, dict):
        out = {}  # GAP: ClusterQueuePatch has no additionalProperties: false (the server refuses others)
        if "cohort" in body:  # GAP: cohort is a DNS-1123 subdomain for the server, any string for the document
            out["cohort"] = rnd.choice(["research", None, "fuzz-cohort"])
        if isinstance(body.get("resources"), list):
            out["resources"] = [{"flavor": "nvidia-l4", "resource": "nvidia.com/gpu",
                                 "nominalQuota": str(rnd.randint(2, 8))} for _ in body["resources"][:1]]
        case.body = out
    elif label == "PATCH /admin/priority-classes/{name}" and isinstance(body, dict):
        out = {}  # GAP: PriorityClassPatch has no additionalProperties: false
        if "value" in body:  # GAP: value is an int32 (≤ 1e9 for a PriorityClass) for the server
            out["value"] = rnd.randint(-1000, 100000)
        if isinstance(body.get("description"), str):
            out["description"] = body["description"][:40]
        case.body = out
    elif label == "PUT /admin/runtime-caps/{namespace}" and isinstance(body, dict) and "maxRuntimeSeconds" in body:
        # a cap the other operations' submissions (1 d at most, above) never pass: their 2xx stay
        case.body = {"maxRuntimeSeconds": rnd.choice([None, 400 * 86400, 2**31 - 1])}
    elif label == "PUT /admin/prices" and isinstance(body, dict):
        out = {}  # GAP: PricesUpdate has no additionalProperties: false; flavors are the configuration's
        if "currency" in body:
            out["currency"] = "USD"
        if isinstance(body.get("flavors"), dict):
            out["flavors"] = {f: round(rnd.uniform(0, 10), 2) for f in fz.flavors if rnd.random() < 0.5}
        if "default" in body:
            out["default"] = round(rnd.uniform(0, 10), 2)
        if "migSlicesPerGpu" in body:
            out["migSlicesPerGpu"] = rnd.choice([1, 2, 7])
        case.body = out
    if label == "GET /reports/{kind}" and isinstance(case.query, dict):
        query = dict(case.query)  # month, or from (< to): rules across parameters the document states in words
        if query.get("month") and (query.get("from") or query.get("to")):
            query.pop("from", None), query.pop("to", None)
        if query.get("to") and not query.get("from"):
            query.pop("to")
        if query.get("from") and query.get("to") and query["to"] <= query["from"]:
            query.pop("to")
        if query.get("from") and not query.get("to") and query["from"] >= time.strftime("%Y-%m-%d", time.gmtime()):
            query.pop("from")  # to defaults to now: from must be before it
        if query != case.query:
            case.query = query


def _manifest(fz: Fuzzed, rnd: random.Random) -> str:
    jobs = []
    for _ in range(rnd.randint(1, 2)):
        jobs.append(yaml.safe_dump({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": fz.unique_name(), "namespace": "team-a",
                         "labels": {"kueue.x-k8s.io/queue-name": "team-a-queue"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "python", "command": ["gpujob", "manifest"],
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
        }))
    return "---\n".join(jobs)


def _usable_request(req, fz: Fuzzed, rnd: random.Random):
    if not isinstance(req, dict):
        return req
    out = dict(req)
    out["name"] = fz.unique_name()
    out["localQueue"] = rnd.choice(fz.local_queues or ["team-a/team-a-queue"])
    for key in ("notebook", "parameters", "kernel", "outputDir"):  # a notebook job's (400 on others)
        out.pop(key, None)
    if out.get("kind") == "NotebookLease":
        for key in ("command", "script", "args", "workingDir", "env"):
            out.pop(key, None)
        server = out.get("notebookServer")
        if isinstance(server, dict) and isinstance(server.get("name"), str):
            # the document's pattern ^[^/\x00-\x1F\x7F]*$ read the JSON Schema (ECMA) way: Python's
            # "$" also matches before a final newline, which hypothesis then draws
            out["notebookServer"] = dict(server, name=server["name"].rstrip("\n"))
    else:
        out.pop("script", None)
        out.pop("args", None)
        out.pop("workingDir", None)
        out.pop("notebookServer", None)  # a NotebookLease's only (400 naming it on a Job)
        out["command"] = ["gpujob"] + [str(a) for a in (req.get("command") or [])[1:3]]
    out["gpus"] = min(int(out.get("gpus") or 1), 2)
    for key in ("flavor", "priorityClass", "migProfile", "maxRuntime", "maxRuntimeSeconds", "env", "acceptSpot"):
        if key in out and rnd.random() < 0.5:
            del out[key]
    if "env" in out:
        out["env"] = {"SEED": str(rnd.randint(0, 9))}
    if "maxRuntimeSeconds" in out:
        out["maxRuntimeSeconds"] = rnd.choice([1, 30.5, 600])
    if "flavor" in out:  # whole GPUs both teams' queues offer
        out["flavor"] = rnd.choice(["any", "nvidia-a100", "nvidia-l4"])
    if "priorityClass" in out:
        out["priorityClass"] = rnd.choice(fz.priority_classes or ["low"])
    if out.get("migProfile") is not None:  # a slice both teams' queues offer, in its own flavor
        out["migProfile"] = "1g.10gb"
        out.pop("flavor", None)
    if "maxRuntime" in out:
        out["maxRuntime"] = rnd.choice(["30s", "5m", "2h", "1d"])
    return out


# -- the run ------------------------------------------------------------------------------------


def _schema(fz: Fuzzed):
    doc = fz.srv.request("GET", "openapi.json").json()
    schema = schemathesis.openapi.from_dict(doc).exclude(path="/events")
    token = fz.srv.setup.token

    @schema.auth()
    class ServerToken:
        """The server's own token, in the header the document's ``tokenHeader`` scheme names."""

        def get(self, case, ctx):
            return token

        def set(self, case, data, ctx):
            case.headers = {**(case.headers or {}), "Authorization": f"token {data}"}

    return schema


def _run_operation(op, mode, fz: Fuzzed, failures: list) -> None:
    """``EXAMPLES`` generated requests of ``op`` in ``mode``; failures are collected (no shrinking:
    the first failing case of each operation and mode is reported as it is)."""
    label = f"{op.method.upper()} {op.path}"

    @given(case=op.as_strategy(generation_mode=mode), seed=st.integers(0, 2**32 - 1))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None,
              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    def run(case, seed):
        if mode is GenerationMode.POSITIVE:
            usable(case, fz, random.Random(seed))
        response = case.call(base_url=fz.srv.url.rstrip("/"), timeout=30)
        fz.count(label, response.status_code)
        case.validate_response(response, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        pass  # no invalid input exists for this operation (no parameters, no body)
    except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collected, reported together below
        failures.append(f"{label} ({mode.value}): {exc}")


def _report(fz: Fuzzed) -> str:
    lines = [f"schemathesis: {fz.requests} requests over {len(fz.by_operation)} operations"]
    for label, counts in sorted(fz.by_operation.items()):
        ok = sum(n for s, n in counts.items() if 200 <= s < 300)
        lines.append(f"  {label:55s} 2xx {ok:5d}  {dict(sorted(counts.items()))}")
    return "\n".join(lines)


# No wall-clock limit: pytest-timeout's fired inside hypothesis on a loaded machine (load 10: the
# run took 1,020 s), which reported it as a flaky failure of whatever operation was running, and
# the stateful part ran on past it. The run is bounded by its budget instead: EXAMPLES per
# operation and mode, STATEFUL scenarios of 8 steps, 30 s per request at most.
@pytest.mark.timeout(0)
def test_every_response_matches_the_document(fuzzed):
    schema = _schema(fuzzed)
    assert len(fuzzed.held) >= 5, fuzzed.workloads  # the seed holds team-b's submissions
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20, [op.label for op in operations]
    # keep-gpu first: its idle-warned leases are not yet cancelled (DELETE workloads) nor their
    # warnings ended by a policy turned off (PUT / DELETE admin/idle-policy)
    operations.sort(key=lambda op: not op.path.endswith("keep-gpu"))
    failures: list[str] = []
    started = time.monotonic()
    for op in operations:
        if op.path.endswith("lift-budget-hold"):  # the budget PUTs before it released the seed's
            _hold(fuzzed.srv, "held-again")
            fuzzed.refresh(force=True)
        if op.path.endswith("/move"):  # pending workloads to move: the DELETEs before may have cancelled the seed's
            _hold(fuzzed.srv, "move-me", n=4)
            fuzzed.refresh(force=True)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run_operation(op, mode, fuzzed, failures)
    _run_stateful(schema, fuzzed, failures)
    print(_report(fuzzed) + f"\n  in {time.monotonic() - started:.0f} s")
    assert not failures, "\n\n".join(failures)
    labels = {f"{op.method.upper()} {op.path}" for op in operations}
    without_2xx = sorted(label for label in labels
                         if not any(200 <= s < 300 for s in fuzzed.by_operation.get(label, {})))
    assert not without_2xx, f"operations that never succeeded: {without_2xx}\n{_report(fuzzed)}"
    assert fuzzed.requests >= MIN_REQUESTS, _report(fuzzed)
    assert not any(s >= 500 for c in fuzzed.by_operation.values() for s in c), _report(fuzzed)


def _run_stateful(schema, fz: Fuzzed, failures: list) -> None:
    """Scenarios over the document's links: what POST workloads created is read, its timeline and
    logs fetched, cancelled, its budget hold lifted; a budget set is dropped."""
    if STATEFUL <= 0:
        return
    from schemathesis.generation.stateful.state_machine import StepOutput

    base = schema.as_state_machine()
    rnd = random.Random(18)
    errors: list[str] = []
    scenarios = [0]

    class Workflow(base):
        def before_call(self, case):
            if case.meta is not None and case.meta.generation.mode.is_positive:
                usable(case, fz, rnd, paths=False)  # path parameters come from the links

        def setup(self):
            scenarios[0] += 1

        def get_call_kwargs(self, case):
            return {"base_url": fz.srv.url.rstrip("/"), "timeout": 30}

        def after_call(self, response, case):
            super().after_call(response, case)
            fz.count(f"{case.method.upper()} {case.operation.path}", response.status_code)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs or None)

        def step(self, input):
            # a failure is recorded as it happens: hypothesis replays a failing scenario to report
            # it, and the server's state has moved on, so the replay draws differently
            # ("Inconsistent data generation") and would hide this, the real failure
            case, response = input.case, None
            try:
                self.before_call(case)
                kwargs = self.get_call_kwargs(case)
                response = self.call(case, **kwargs)
                self.after_call(response, case)
                self.validate_response(response, case, **kwargs)
            except (Exception, BaseExceptionGroup) as exc:
                import traceback

                answer = f"{response.status_code} {response.text[:500]}" if response is not None else "no response"
                errors.append(f"{case.method.upper()} {case.formatted_path} query={case.query!r} "
                              f"body={case.body!r:.300} -> {answer}\n"
                              + "".join(traceback.format_exception(exc))[-3000:])
                raise
            return StepOutput(response, case)

    # No replay or shrinking: the server's state moves on, so a scenario cannot be replayed. For
    # the same reason one hypothesis run over many scenarios breaks down sooner or later: what a
    # rule may draw depends on earlier responses (a link's bundle holds what POST workloads
    # created, or nothing when it answered 400), so a choice sequence hypothesis has seen before
    # can draw differently now and it stops with FlakyStrategyDefinition ("Inconsistent data
    # generation"), a property of the generator, not a failure of the server. Such a run is
    # started again (a fresh data tree) for the scenarios left; a real failure is what ``step``
    # recorded (then the run stops).
    from hypothesis.errors import FlakyStrategyDefinition

    restarts = 0
    while scenarios[0] < STATEFUL:
        try:
            Workflow.run(settings=settings(max_examples=STATEFUL - scenarios[0], deadline=None, database=None,
                                           phases=[Phase.generate], report_multiple_bugs=False,
                                           suppress_health_check=list(HealthCheck), stateful_step_count=8))
            break
        except FlakyStrategyDefinition as exc:
            if not errors and restarts < 50:
                restarts += 1
                continue
            failures.append(f"stateful: {errors[0] if errors else exc}")
            break
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001
            import traceback

            failures.append(f"stateful: {errors[0] if errors else ''.join(traceback.format_exception(exc))[-4000:]}")
            break
    print(f"stateful: {scenarios[0]} scenarios, {restarts} restarts of hypothesis after FlakyStrategyDefinition")


def test_tiny_budget_share_is_valid_json(fuzzed):
    """Found by the fuzz: ``PUT budgets/team-a {"monthlyUSD": 2.2e-311}`` (valid by the document:
    exclusiveMinimum 0) answered ``"share": Infinity``, which no JSON parser but Python's accepts;
    now refused (400: a cent at least)."""
    import json

    resp = fuzzed.srv.request("PUT", "budgets/team-a", json={"monthlyUSD": 2.225073858507e-311})
    try:
        assert resp.status_code == 400 and resp.json()["field"].endswith("monthlyUSD"), resp.text
        json.loads(resp.text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    finally:
        fuzzed.srv.request("PUT", "budgets/team-a", json={"monthlyUSD": 1000})
