"""Jobs as their owner on the hub demo (issue 16), end to end: a real JupyterHub started from the
shipped ``jupyterhub_config/local/`` files (the hub and so its
gpuqueue service run as root here), two real OS accounts for the hub users alice and bob (named
by ``GPUQUEUE_OS_ACCOUNT_TEMPLATE``, ``gq<random>-{username}``: created here, removed afterwards).

Each user submits a job through the hub-proxied REST API with their own token; the job writes what
it is and what it can reach to its log, which its owner reads through the logs API. Asserted: it
ran as the owner's uid, gid and home; it cannot read the other user's 0700 home; its environment
carries no hub API token, no database URL, nothing of the service's. Needs root (as in CI) and
useradd; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from hubtools import chp_path, start_hub, stop_hub

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="creates OS accounts and runs the hub service as root: needs root (tests run as root in CI)"),
    pytest.mark.skipif(shutil.which("useradd") is None or shutil.which("userdel") is None,
                       reason="needs useradd / userdel (the passwd package)"),
]

# The jobs' Python: one every account can run (the test's own may live under /root).
JOBPY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)

# What the job reports, as one JSON line in its log.
PROBE = r"""
import json, os, sys
other = sys.argv[1]
out = {"uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid(), "home": os.environ.get("HOME"),
       "user": os.environ.get("USER"), "cwd": os.getcwd(), "env": sorted(os.environ)}
for what, path in (("read_other_secret", os.path.join(other, "secret.txt")), ("list_other_home", other)):
    try:
        if what == "list_other_home":
            os.listdir(path)
        else:
            open(path).read()
        out[what] = "allowed"
    except PermissionError:
        out[what] = "denied"
    except OSError as e:
        out[what] = "error: %s" % e
try:
    with open(os.path.join(other, "planted.txt"), "w") as f:
        f.write("x")
    out["write_other_home"] = "allowed"
except PermissionError:
    out["write_other_home"] = "denied"
with open("made-by-job.txt", "w") as f:
    f.write("mine\n")
print("PROBE " + json.dumps(out), flush=True)
"""


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _pids_of(uid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    out.append(int(entry))
            except OSError:
                pass
    return out


@pytest.fixture(scope="module")
def accounts():
    """OS accounts ``gq<rnd>-alice`` and ``gq<rnd>-bob``, homes 0700 with a secret file in each;
    removed afterwards with their homes and any process of theirs."""
    if JOBPY is None:
        pytest.skip("needs a python3 in /usr/bin or /usr/local/bin that every account can run")
    prefix = f"gq{secrets.token_hex(3)}-"
    made: list[str] = []
    try:
        for user in ("alice", "bob"):
            name = prefix + user
            _run("useradd", "-m", "-s", "/bin/sh", "-c", "GPU queue hub test", name)
            made.append(name)
            pw = pwd.getpwnam(name)
            os.chmod(pw.pw_dir, 0o700)
            secret = Path(pw.pw_dir) / "secret.txt"
            secret.write_text(f"{user}'s secret\n")
            os.chown(secret, pw.pw_uid, pw.pw_gid)
            os.chmod(secret, 0o600)
        yield {"template": prefix + "{username}", "pw": {u: pwd.getpwnam(prefix + u) for u in ("alice", "bob")}}
    finally:
        for name in made:
            try:
                uid = pwd.getpwnam(name).pw_uid
            except KeyError:
                continue
            for pid in _pids_of(uid):  # only processes of the test's own accounts
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["userdel", "-r", "-f", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def owner_hub(tmp_path_factory, accounts):
    """The demo hub (shipped config files) with jobs as their owners and a service holding secrets
    that its jobs must not see: its hub API token (JupyterHub's own) and a database URL."""
    if chp_path() is None:
        pytest.skip("configurable-http-proxy (npm) is not installed; scripts/test.sh installs it")
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    state = tmp_path_factory.mktemp("hub-owner")
    db_url = f"sqlite:///{state}/gpuqueue-secret-url.sqlite"
    h = start_hub(state, env={
        "GPUQUEUE_INVENTORY": str(DEMO_INVENTORY_PATH),
        "GPUQUEUE_OS_ACCOUNT_TEMPLATE": accounts["template"],
        "GPUQUEUE_DB_URL": db_url,
    })
    h.db_url = db_url  # type: ignore[attr-defined]
    yield h
    stop_hub(h)


def _wait_done(hub, token, ns, name, timeout=60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        wl = hub.queue("GET", f"workloads/{ns}/{name}", token).json()
        if wl.get("state") in ("Succeeded", "Failed", "Cancelled"):
            return wl
        assert time.monotonic() < deadline, wl
        time.sleep(0.3)


def _probe(hub, user: str, other_home: str, home: str) -> tuple[dict, dict]:
    token = hub.token_for(user)
    name = f"owner-{user}-{uuid.uuid4().hex[:6]}"
    r = hub.queue("POST", "workloads", token, json={
        "command": [JOBPY, "-c", PROBE, other_home], "workingDir": home,
        "gpus": 1, "maxRuntime": "2m", "name": name,
    })
    assert r.status_code == 201, r.text
    wl = r.json()
    assert wl["owner"] == user
    done = _wait_done(hub, token, wl["namespace"], name)
    log = hub.queue("GET", f"workloads/{wl['namespace']}/{name}/logs", token)
    assert log.status_code == 200, log.text
    text = log.json()["text"]
    assert done["state"] == "Succeeded", (done, text, hub.log_tail())
    lines = [ln for ln in text.splitlines() if ln.startswith("PROBE ")]
    assert lines, text
    return done, json.loads(lines[-1][len("PROBE "):])


@pytest.mark.parametrize("user,other", [("alice", "bob"), ("bob", "alice")])
def test_a_users_job_runs_as_their_account_and_cannot_touch_the_others_files(owner_hub, accounts, user, other):
    pw, other_pw = accounts["pw"][user], accounts["pw"][other]
    _, seen = _probe(owner_hub, user, other_pw.pw_dir, pw.pw_dir)
    # the owner's account, not the service's (root)
    assert (seen["uid"], seen["euid"], seen["gid"]) == (pw.pw_uid, pw.pw_uid, pw.pw_gid), seen
    assert seen["home"] == pw.pw_dir and seen["user"] == pw.pw_name, seen
    assert os.path.realpath(seen["cwd"]) == os.path.realpath(pw.pw_dir), seen
    # the other user's 0700 home: not readable, not listable, not writable
    assert seen["read_other_secret"] == "denied", seen
    assert seen["list_other_home"] == "denied", seen
    assert seen["write_other_home"] == "denied", seen
    assert not (Path(other_pw.pw_dir) / "planted.txt").exists()
    # a file the job makes is its owner's
    made = Path(pw.pw_dir) / "made-by-job.txt"
    st = made.stat()
    assert (st.st_uid, st.st_gid) == (pw.pw_uid, pw.pw_gid)
    # none of the service's environment: no hub token, no database URL, no hub / queue settings
    env = set(seen["env"])
    leaked = {k for k in env if k.startswith(("JUPYTERHUB_", "GPUQUEUE_DB", "JPY_"))}
    assert not leaked, leaked
    assert "GPUQUEUE_HUB_STATE" not in env and "GPUQUEUE_JOBS_AS_OWNER" not in env, env


def test_the_job_log_is_readable_by_its_owner_only(owner_hub, accounts):
    hub = owner_hub
    alice, bob = hub.token_for("alice"), hub.token_for("bob")
    pw = accounts["pw"]["alice"]
    name = f"owner-log-{uuid.uuid4().hex[:6]}"
    r = hub.queue("POST", "workloads", alice, json={
        "command": [JOBPY, "-c", "print('hello from ' + __import__('os').environ['USER'])"],
        "workingDir": pw.pw_dir, "gpus": 1, "maxRuntime": "2m", "name": name})
    assert r.status_code == 201, r.text
    ns = r.json()["namespace"]
    assert _wait_done(hub, alice, ns, name)["state"] == "Succeeded"
    assert f"hello from {pw.pw_name}" in hub.queue("GET", f"workloads/{ns}/{name}/logs", alice).json()["text"]
    # a team-mate sees the job, not its log; another team's user does not see the job at all
    assert hub.queue("GET", f"workloads/{ns}/{name}/logs", hub.token_for("anna")).status_code == 403
    assert hub.queue("GET", f"workloads/{ns}/{name}/logs", bob).status_code == 404


def test_a_hub_user_without_an_os_account_is_refused_with_the_reason(owner_hub):
    # ada (team-a) has no gq<rnd>-ada account
    r = owner_hub.queue("POST", "workloads", owner_hub.token_for("ada"), json={
        "command": [JOBPY or "python3", "-c", "print(1)"], "workingDir": "/tmp", "gpus": 1, "name": "no-account"})
    assert r.status_code == 403, r.text
    assert "ada" in r.json()["message"], r.json()
