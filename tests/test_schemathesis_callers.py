"""Schemathesis with the callers of docs/rest-api.md's authorization matrix (tests/test_schemathesis.py
fuzzes with one caller holding every scope; this file is apart so that pytest-xdist's
``--dist loadfile`` runs it beside that one). See the comment below.
"""

from __future__ import annotations

import os
import pwd
import random
import secrets
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from servertools import Launcher, ServerSetup
from test_schemathesis import GPUJOB, Fuzzed, _report, _submit, _wait, usable

pytestmark = pytest.mark.slow


# -- several callers: each gets the answers docs/rest-api.md's authorization matrix documents ------
#
# The run above has one caller, who holds every scope. Here the same operations, with the same
# usable values, are sent by the matrix's other callers on a server in hub-service mode (custom
# scopes enforced, teams from groups: tests/hubusers.py presents the callers as JupyterHub would):
# nobody (no token), bob (team-b), anna (team-a, not the owner, no admin), ops (admin in no team)
# and ops' token reduced to ``access:services``, on alice's resources (her running job, her team's
# LocalQueue, budget and ClusterQueue). A refusal the matrix documents must be that refusal for
# every generated request: ``403 -`` is jupyter_server's 403 before any handler; ``403 scope:…``
# a 403 naming ``scope``; ``404 name`` / ``403 name`` / ``409 name`` / ``403 localQueue`` that
# status naming that field, or a 400 for a value the server refuses first, never a success and
# never 429: submissions are rate-limited (``submit_rate_limit`` 4/h), and a refused request gives
# its rate-limit token back, so a caller who is always refused is never "too many". Every
# response is also checked against the document (status, content type, headers, schema).

CALLER_EXAMPLES = int(os.environ.get("GPUQUEUE_SCHEMATHESIS_CALLER_EXAMPLES", "6"))
DOC = Path(__file__).resolve().parents[1] / "docs" / "rest-api.md"
CALLER_ROLES = ("anonymous", "other", "member", "owner", "admin", "reduced")  # the matrix's columns
SUBMIT, ADMIN = "custom:gpuqueue:submit", "custom:gpuqueue:admin"
CALLERS = {  # role -> (token, user model); ops (the admin) last: its cancels and changes succeed
    "anonymous": None,
    "reduced": {"name": "ops", "scopes": ["access:services!service=gpuqueue"], "groups": []},
    "other": {"name": "bob", "scopes": [SUBMIT], "groups": ["team-b"]},
    "member": {"name": "anna", "scopes": [SUBMIT], "groups": ["team-a"]},
    "admin": {"name": "ops", "scopes": [ADMIN, SUBMIT], "groups": []},
}
CALLER_CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
                 response_headers_conformance, response_schema_conformance]


def doc_matrix() -> dict[tuple[str, str], dict[str, str]]:
    """docs/rest-api.md's "Authorization matrix": (METHOD, path) -> {role: cell} (backticks
    stripped, e.g. ``"403 scope:admin"``)."""
    import re

    section = DOC.read_text().split("\n## Authorization matrix\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`(GET|POST|PUT|PATCH|DELETE) ([^`]+)`\s*\|(.*)\|\s*$", line)
        if m:
            cells = [c.strip().strip("`") for c in m.group(3).split("|")]
            rows[(m.group(1), m.group(2))] = dict(zip(CALLER_ROLES, cells))
    return rows


@pytest.fixture(scope="module")
def callers(tmp_path_factory):
    """A server in hub-service mode with the callers of CALLERS (tests/hubusers.py); alice (the
    setup's own token, both scopes, both teams: for seeding and the state's reads) runs a job."""
    import json

    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH
    from jupyter_gpuqueue.service import DEMO_DIR

    base = tmp_path_factory.mktemp("callers")
    # The jobs' program, in a folder every account can reach (a hub service that runs as root runs
    # jobs as their owners' accounts, always: here the callers' jobs run as one made for the test).
    jobs_dir = Path(tempfile.mkdtemp(prefix="gq-callers-", dir="/tmp"))
    os.chmod(jobs_dir, 0o755)
    bin_dir = jobs_dir / "bin"
    bin_dir.mkdir()
    (bin_dir / "gpujob").write_text(GPUJOB)
    (bin_dir / "gpujob").chmod(0o755)
    extra = """
c.ServerApp.identity_provider_class = "hubusers.TokenUsersIdentityProvider"
c.GpuQueueApp.mode = "hub-service"
c.GpuQueueApp.group_local_queues = {"team-a": ["team-a/team-a-queue"], "team-b": ["team-b/team-b-queue"]}
c.GpuQueueApp.submit_rate_limit = "4/h"
"""
    account = None
    if os.geteuid() == 0:
        account = "gqc-" + secrets.token_hex(4)
        home = jobs_dir / "home"
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", str(home),
                        "--shell", "/usr/sbin/nologin", account], check=True, capture_output=True)
        home.mkdir()
        pw = pwd.getpwnam(account)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        names = sorted({"alice", *(u["name"] for u in CALLERS.values() if u)})
        extra += f"c.GpuQueueApp.os_account_map = {{u: {account!r} for u in {names!r}}}\n"
        extra += f"c.GpuQueueApp.owner_job_path = {str(bin_dir) + ':/usr/local/bin:/usr/bin:/bin'!r}\n"
    setup = ServerSetup(base, (DEMO_DIR / "cluster.yaml").read_text(), Path(DEMO_INVENTORY_PATH).read_text(),
                        cycle_interval=0.1, extra_config=extra)
    tokens = {role: f"{role}-{setup.token}" for role in CALLERS if CALLERS[role]}
    users = {tokens[role]: CALLERS[role] for role in tokens}
    users[setup.token] = {"name": "alice", "scopes": [ADMIN, SUBMIT], "groups": ["team-a"]}
    env = setup.env
    setup.env = lambda: {**env(), "PATH": str(bin_dir), "PYTHONPATH": str(Path(__file__).resolve().parent),
                         "JUPYTERHUB_SERVICE_NAME": "", "GPUQUEUE_TEST_USERS": json.dumps(users)}
    launcher = Launcher(zygote=False)
    srv = launcher.start(setup)
    try:
        for i in range(2):
            _submit(srv, name=f"alice-run-{i}", command=["gpujob", "hold"], gpus=1, flavor="nvidia-l4",
                    localQueue="team-a/team-a-queue")
        _submit(srv, name="alice-done", command=["gpujob", "done"], gpus=1, localQueue="team-a/team-a-queue")
        for i in range(2):
            _wait(srv, "team-a", f"alice-run-{i}", ("Running",))
        _wait(srv, "team-a", "alice-done", ("Succeeded",))
        state = Fuzzed(srv)
        state.refresh(force=True)
        state.tokens = tokens
        yield state
    finally:
        for w in srv.request("GET", "workloads", params={"state": "Pending,Admitted,Running"}).json()["items"]:
            srv.request("DELETE", f"workloads/{w['namespace']}/{w['name']}")
        srv.stop()
        launcher.close()
        if account is not None:
            uid = pwd.getpwnam(account).pw_uid
            for entry in os.listdir("/proc"):  # what is left of its jobs: only this account's
                try:
                    if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                        os.kill(int(entry), 9)
                except OSError:
                    pass
            subprocess.run(["userdel", account], capture_output=True)
        shutil.rmtree(jobs_dir, ignore_errors=True)


def on_alices(case, fz: Fuzzed, rnd: random.Random) -> None:
    """Usable values (``usable``), then alice's resources where the case names one: her running
    job (most of the time), her team's namespace, LocalQueue and ClusterQueue."""
    usable(case, fz, rnd, paths=False)
    params = dict(case.path_parameters or {})
    if "name" in params and "namespace" in params and rnd.random() < 0.85:
        params.update(namespace="team-a", name=rnd.choice(["alice-run-0", "alice-run-1", "alice-done"]))
    elif "namespace" in params and rnd.random() < 0.85:
        params["namespace"] = "team-a"
    elif case.operation.path.endswith("/cluster-queues/{name}") and rnd.random() < 0.85:
        params["name"] = "team-a-cq"
    if params != (case.path_parameters or {}):
        case.path_parameters = params
    body = case.body
    items = body.get("items") if isinstance(body, dict) else None
    for item in (items if isinstance(items, list) else [body]):
        if isinstance(item, dict) and "localQueue" in item:
            item["localQueue"] = "team-a/team-a-queue"


def expected_refusal(cell: str):
    """A matrix cell -> (status, field) of a refusal (field None: jupyter_server's own 403), or
    None for a success cell."""
    code, _, fld = cell.partition(" ")
    if not code.isdigit() or int(code) < 400:
        return None
    if fld == "-":
        return int(code), None
    return int(code), fld.split(":")[0]


def check_refusal(cell: str, response, label: str) -> None:
    want = expected_refusal(cell)
    if want is None:
        return
    status, fld = want
    try:
        body = response.json()
    except ValueError:
        body = None
    seen = (response.status_code, body.get("field") if isinstance(body, dict) else None)
    if fld is None or fld == "scope":  # refused before anything about the request is read
        assert seen[0] == status and (fld is None or seen[1] == fld), \
            f"{label}: documented {cell}, answered {response.status_code} {response.text[:300]}"
        return
    # refused for what the request names (alice's job, her team's queue): that refusal, or an
    # earlier one for a value the server refuses first; a generated name that does not exist: 404
    # (a batch names it items[i].localQueue; a manifest names the queue by its namespace and label)
    same_field = seen[1] is not None and (seen[1] == fld or seen[1].endswith(f".{fld}") or (
        fld == "localQueue" and seen[1].endswith("metadata.namespace")))
    assert (seen[0] == status and same_field) or seen[0] in (400, 404, 409, 413), \
        f"{label}: documented {cell}, answered {response.status_code} {response.text[:300]}"


@pytest.mark.timeout(0)  # bounded by CALLER_EXAMPLES per caller and operation (see above)
def test_every_caller_gets_the_documented_answer(callers):
    fz = callers
    # no auth provider (the setup's token): each caller's token, or none, is put in the case below
    schema = schemathesis.openapi.from_dict(fz.srv.request("GET", "openapi.json").json()).exclude(path="/events")
    matrix = doc_matrix()
    operations = [result.ok() for result in schema.get_all_operations()]
    failures: list[str] = []
    refused: Counter = Counter()
    for role, user in CALLERS.items():
        token = fz.tokens.get(role)
        for op in operations:
            path = op.path if not op.path.startswith("/reports/") else "/reports/jobs"
            cell = matrix.get((op.method.upper(), path), {}).get(role)
            assert cell is not None, f"{op.method.upper()} {op.path} has no row for {role} in {DOC}"
            label = f"{role}: {op.method.upper()} {op.path}"

            @given(case=op.as_strategy(generation_mode=GenerationMode.POSITIVE), seed=st.integers(0, 2**32 - 1))
            @settings(max_examples=CALLER_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                      database=None, phases=[Phase.explicit, Phase.generate])
            def run(case, seed):
                on_alices(case, fz, random.Random(seed))
                headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
                if token:
                    headers["Authorization"] = f"token {token}"
                case.headers = headers
                query = {k: v for k, v in (case.query or {}).items() if k != "token"}
                if query != (case.query or {}):
                    case.query = query
                response = case.call(base_url=fz.srv.url.rstrip("/"), timeout=30)
                sent = response.request.headers.get("Authorization")
                assert sent == (f"token {token}" if token else None), (role, sent)
                fz.count(label, response.status_code)
                refused[role] += response.status_code >= 400
                check_refusal(cell, response, label)
                case.validate_response(response, checks=CALLER_CHECKS)

            try:
                run()
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - reported together below
                failures.append(f"{label}: {exc}")
    print(_report(fz))
    assert not failures, "\n\n".join(failures[:20])
    for role in CALLERS:  # every caller really was one (and refused somewhere)
        assert refused[role] > 0, (role, dict(refused))
    assert refused["anonymous"] == sum(sum(c.values()) for label, c in fz.by_operation.items()
                                       if label.startswith("anonymous:"))
