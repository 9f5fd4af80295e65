"""The shared-machine recipe (jupyterhub_config/shared/, docs/shared-machine.md), as an admin runs it:
as root, from ``setup.sh`` (a system-wide environment made with /usr/bin/python3, the proxy from npm,
the configuration, the state folder), with real OS accounts (created here, removed afterwards)
logging in with their passwords through PAM.

Asserted from the truth (/proc, the files, the processes), not the API's view: alice's and bob's
notebook servers, kernels and jobs run with their own uid and gid; no process of theirs runs as
uid 0; each one's job cannot read the other's 0600 file, write into the other's home or signal the
other's processes, and the API refuses the other's log; a job that forges its exit record and kills
its wrapper is billed at least its real run time; the hub's state is root's (0700) and its
database 0600. Needs root, useradd and chpasswd, Debian's python3 with venv, npm (as in CI);
skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

from jupyter_gpuqueue.ports import free_port
from readme_build import built_once

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / "jupyterhub_config" / "shared"
SYSPY = "/usr/bin/python3"


def _venv_ok() -> bool:
    return os.access(SYSPY, os.X_OK) and subprocess.run([SYSPY, "-c", "import venv, ensurepip"],
                                                        capture_output=True).returncode == 0


pytestmark = [
    pytest.mark.slow,
    # the README's build (tests/readme_build.py, maybe waited for), setup.sh's pip install, the hub:
    # ~4 min at load 10, beyond the suite's default 300 s per test at load 8+
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="sets up the hub as root with real OS accounts (tests run as root in CI)"),
    pytest.mark.skipif(not (shutil.which("useradd") and shutil.which("userdel") and shutil.which("chpasswd")),
                       reason="needs useradd / userdel / chpasswd (the passwd package)"),
    pytest.mark.skipif(not _venv_ok(), reason="needs Debian's /usr/bin/python3 with venv (python3-venv)"),
    pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm for JupyterHub's proxy"),
]

PROBE = r"""
import json, os, signal, sys
other_home, other_pid = sys.argv[1], int(sys.argv[2])
out = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "cwd": os.getcwd()}
def attempt(fn):
    try:
        fn()
        return "allowed"
    except PermissionError:
        return "denied"
    except OSError as e:
        return "error: %s" % e
out["read_other_secret"] = attempt(lambda: open(os.path.join(other_home, "secret.txt")).read())
out["write_other_home"] = attempt(lambda: open(os.path.join(other_home, "planted.txt"), "w").close())
out["signal_other"] = attempt(lambda: os.kill(other_pid, signal.SIGTERM))
print("PROBE " + json.dumps(out), flush=True)
"""

FORGE = r"""
import json, os, signal, sys, time
time.sleep(3)
for fd in os.listdir("/proc/self/fd"):
    try:
        if os.readlink("/proc/self/fd/" + fd).endswith(".exit"):
            os.pwrite(int(fd), json.dumps({"exitCode": 0, "signal": None, "finishedAt": 1.0}).encode(), 0)
    except OSError:
        pass
print("FORGE " + json.dumps({"killed_wrapper_at": time.time()}), flush=True)
os.kill(os.getppid(), signal.SIGKILL)
"""


def _run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw)


def _procs_of_user(user: str) -> list[tuple[int, int, str]]:
    """(pid, uid, cmdline) of every live process whose environment names hub user ``user``
    (JUPYTERHUB_USER: the server, its kernels and terminals) or that runs as ``user``'s account."""
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        uid = None
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}")
            env = Path(f"/proc/{entry}/environ").read_bytes()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"JUPYTERHUB_USER={user}".encode() in env.split(b"\0") or st.st_uid == uid:
            out.append((int(entry), st.st_uid, cmd))
    return out


def _wait(pred, timeout: float, what: str, hub_log: Path | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = hub_log.read_text(errors="replace")[-4000:] if hub_log and hub_log.exists() else ""
            raise AssertionError(f"{what} (after {timeout} s)\n{tail}")
        time.sleep(0.3)


class SharedHub:
    def __init__(self, url: str, log: Path):
        self.url, self.log = url, log

    def login(self, user: str, password: str) -> requests.Session:
        """Log in through the hub's login form (PAM checks the password)."""
        s = requests.Session()
        s.get(self.url + "hub/login", timeout=30)
        r = s.post(self.url + "hub/login", data={"username": user, "password": password,
                                                  "_xsrf": s.cookies.get("_xsrf", "")}, timeout=60,
                   allow_redirects=False)
        assert r.status_code == 302, (r.status_code, r.text[:500])
        return s

    def token(self, session: requests.Session, user: str) -> str:
        r = session.post(self.url + f"hub/api/users/{user}/tokens", json={"note": "shared-machine test"},
                         headers={"X-XSRFToken": session.cookies.get("_xsrf", "")}, timeout=30)
        assert r.status_code == 201, (r.status_code, r.text)
        return r.json()["token"]

    def api(self, method: str, path: str, token: str, **kw) -> requests.Response:
        kw.setdefault("timeout", 30)
        return requests.request(method, self.url + path, headers={"Authorization": f"token {token}"}, **kw)

    def queue(self, method: str, path: str, token: str, **kw) -> requests.Response:
        return self.api(method, "services/gpuqueue/gpuqueue/api/" + path, token, **kw)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """setup.sh into a fresh prefix, two accounts with passwords in teams.yaml, the hub started as root."""
    base = Path(tempfile.mkdtemp(prefix="gq-shared-", dir="/tmp"))
    os.chmod(base, 0o755)  # the environment below it is every account's to run
    prefix, etc, state = base / "opt", base / "etc", base / "state"
    # the package as the README's build block makes it (built once per test run, the install test's too)
    (wheel,) = sorted((Path(built_once(tmp_path_factory)["dir"]) / "dist").glob("*.whl"))
    env = {**os.environ, "GPUQUEUE_PACKAGE": str(wheel), "GPUQUEUE_PREFIX": str(prefix), "GPUQUEUE_ETC": str(etc),
           "GPUQUEUE_HUB_STATE": str(state), "GPUQUEUE_NO_SYSTEMD": "1"}
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(var, None)
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    setup = subprocess.run(["bash", str(SHARED / "setup.sh")], env=env, capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    assert f"{prefix}/bin/jupyterhub -f {etc}/jupyterhub_config.py" in setup.stdout
    rnd = secrets.token_hex(3)
    names = {"alice": f"gqs-alice-{rnd}", "bob": f"gqs-bob-{rnd}"}
    passwords = {k: secrets.token_urlsafe(12) for k in names}
    made: list[str] = []
    proc = None
    try:
        for k, name in names.items():
            _run("useradd", "-m", "-s", "/bin/bash", "-c", "GPU queue shared-machine test", name)
            made.append(name)
            _run("chpasswd", input=f"{name}:{passwords[k]}\n")
            pw = pwd.getpwnam(name)
            os.chmod(pw.pw_dir, 0o700)
            secret = Path(pw.pw_dir) / "secret.txt"
            secret.write_text(f"{k}'s secret\n")
            os.chown(secret, pw.pw_uid, pw.pw_gid)
            os.chmod(secret, 0o600)
        (etc / "teams.yaml").write_text(
            "teams:\n"
            f"  team-a: {{users: [{names['alice']}], localQueues: [team-a/team-a-queue]}}\n"
            f"  team-b: {{users: [{names['bob']}], localQueues: [team-b/team-b-queue]}}\n"
            "admins: []\n")
        ports = {k: free_port() for k in ("hub", "api", "proxy", "service")}
        demo_inventory = subprocess.run(
            [str(prefix / "bin" / "python"), "-c",
             "import jupyter_gpuqueue.demo as d, os; print(os.path.join(os.path.dirname(d.__file__), 'inventory.yaml'))"],
            capture_output=True, text=True, check=True).stdout.strip()
        hub_env = {"PATH": env["PATH"], "LANG": "C.UTF-8", "GPUQUEUE_HUB_STATE": str(state),
                   "GPUQUEUE_HUB_IP": "127.0.0.1", "GPUQUEUE_HUB_PORT": str(ports["hub"]),
                   "GPUQUEUE_HUB_API_PORT": str(ports["api"]), "GPUQUEUE_PROXY_API_PORT": str(ports["proxy"]),
                   "GPUQUEUE_SERVICE_PORT": str(ports["service"]), "GPUQUEUE_INVENTORY": demo_inventory}
        log = base / "jupyterhub.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen([str(prefix / "bin" / "jupyterhub"), "-f", str(etc / "jupyterhub_config.py")],
                                    cwd=state, env=hub_env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        hub = SharedHub(f"http://127.0.0.1:{ports['hub']}/", log)

        def up():
            try:
                return requests.get(hub.url + "services/gpuqueue/gpuqueue/api/info", timeout=5).status_code == 403 \
                    and requests.get(hub.url + "hub/api/", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        _wait(up, 120, "the hub and its gpuqueue service did not come up", log)
        yield {"hub": hub, "names": names, "passwords": passwords, "state": state, "prefix": prefix, "base": base}
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for name in made:
            for pid, _, _ in _procs_of_user(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["userdel", "-r", name], capture_output=True)
        pid_file = state / "jupyterhub-proxy.pid"
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
        # the queue service runs on after the hub by design (jobs outlive it): stop what is left of it
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if str(base).encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                        os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass
        shutil.rmtree(base, ignore_errors=True)


def _submit_and_wait(hub: SharedHub, token: str, ns: str, body: dict, timeout: float = 90) -> dict:
    r = hub.queue("POST", "workloads", token, json=body)
    assert r.status_code == 201, (r.status_code, r.text)
    name = r.json()["name"]

    def done():
        w = hub.queue("GET", f"workloads/{ns}/{name}", token).json()
        return w if w.get("state") in ("Succeeded", "Failed", "Cancelled") else None

    return _wait(done, timeout, f"{name} did not finish", hub.log)


def _log(hub: SharedHub, token: str, ns: str, name: str) -> str:
    r = hub.queue("GET", f"workloads/{ns}/{name}/logs", token)
    assert r.status_code == 200, r.text
    return r.json()["text"]


def test_the_recipe_is_private_and_runs_no_user_code_as_root(shared):
    hub, names, pwds = shared["hub"], shared["names"], shared["passwords"]
    state = shared["state"]
    # the state is root's, the hub's database 0600, the queue's ledger folder 0700
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700 and os.stat(state).st_uid == 0
    assert stat.S_IMODE(os.stat(state / "jupyterhub.sqlite").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(state / "gpuqueue").st_mode) == 0o700
    # a wrong password is refused by PAM; the right one logs in
    s = requests.Session()
    s.get(hub.url + "hub/login", timeout=30)
    r = s.post(hub.url + "hub/login", data={"username": names["alice"], "password": "wrong",
                                            "_xsrf": s.cookies.get("_xsrf", "")}, timeout=60, allow_redirects=False)
    assert r.status_code != 302
    tokens, homes, servers = {}, {}, {}
    for k in ("alice", "bob"):
        session = hub.login(names[k], pwds[k])
        tokens[k] = hub.token(session, names[k])
        homes[k] = pwd.getpwnam(names[k]).pw_dir
        r = hub.api("POST", f"hub/api/users/{names[k]}/server", tokens[k], json={"profile": "cpu"})
        assert r.status_code in (201, 202), (r.status_code, r.text)
    for k in ("alice", "bob"):
        def ready(k=k):
            m = hub.api("GET", f"hub/api/users/{names[k]}", tokens[k]).json()
            return ((m.get("servers") or {}).get("") or {}).get("ready")
        _wait(ready, 120, f"{k}'s server did not start", hub.log)
        # a kernel in the server: as the user too
        r = hub.api("POST", f"user/{names[k]}/api/kernels", tokens[k], json={"name": "python3"})
        assert r.status_code == 201, (r.status_code, r.text)
    for k in ("alice", "bob"):
        pw = pwd.getpwnam(names[k])

        def procs(k=k, pw=pw):
            ps = _procs_of_user(names[k])
            kinds = {"server": any("jupyterhub-singleuser" in c for _, _, c in ps),
                     "kernel": any("ipykernel" in c for _, _, c in ps)}
            return ps if all(kinds.values()) else None

        ps = _wait(procs, 60, f"{k}'s server and kernel processes not found", hub.log)
        for pid, uid, cmd in ps:
            st = Path(f"/proc/{pid}/status").read_text()
            real_uid = int(re.search(r"^Uid:\s+(\d+)", st, re.M).group(1))
            gid = int(re.search(r"^Gid:\s+(\d+)", st, re.M).group(1))
            assert real_uid != 0 and uid != 0, f"{k}'s process runs as root: {pid} {cmd}"
            assert (real_uid, gid) == (pw.pw_uid, pw.pw_gid), (k, pid, cmd, real_uid, gid)
        servers[k] = next(pid for pid, _, c in ps if "jupyterhub-singleuser" in c)

    # jobs: each as its owner, in the owner's home; the other's files and processes are out of reach
    for k, other, ns in (("alice", "bob", "team-a"), ("bob", "alice", "team-b")):
        w = _submit_and_wait(hub, tokens[k], ns, {
            "command": ["/usr/bin/python3", "-c", PROBE, homes[other], str(servers[other])],
            "gpus": 1, "maxRuntime": "2m", "name": f"probe-{k}"})
        assert w["state"] == "Succeeded", w
        out = json.loads(next(ln for ln in _log(hub, tokens[k], ns, f"probe-{k}").splitlines()
                              if ln.startswith("PROBE "))[6:])
        pw = pwd.getpwnam(names[k])
        assert (out["uid"], out["euid"], out["gid"]) == (pw.pw_uid, pw.pw_uid, pw.pw_gid)
        assert out["cwd"] == homes[k]
        assert out["read_other_secret"] == "denied", out
        assert out["write_other_home"] == "denied", out
        assert out["signal_other"] == "denied", out
        assert not Path(homes[other], "planted.txt").exists()
        # the other's log through the API: refused
        r = hub.queue("GET", f"workloads/{ns}/probe-{k}/logs", tokens[other])
        assert r.status_code in (403, 404), (r.status_code, r.text)
    assert os.kill(servers["bob"], 0) is None  # bob's server survived alice's job

    # the forge attack: a job that rewrites its exit record and kills its wrapper is billed its real run time
    w = _submit_and_wait(hub, tokens["alice"], "team-a", {
        "command": ["/usr/bin/python3", "-c", FORGE], "gpus": 1, "maxRuntime": "2m", "name": "forge"})
    out = json.loads(next(ln for ln in _log(hub, tokens["alice"], "team-a", "forge").splitlines()
                          if ln.startswith("FORGE "))[6:])
    assert w["state"] == "Failed", w
    assert w["finishedAt"] >= out["killed_wrapper_at"] - 0.01 and w["finishedAt"] - w["startedAt"] >= 3.0, w
    assert w["costUsd"] >= round(w["pricePerHourUsd"] * 3.0 / 3600, 6) - 2e-6, w

    # no process of either user runs as root, whatever it is
    for k in ("alice", "bob"):
        for pid, uid, cmd in _procs_of_user(names[k]):
            assert uid != 0, f"{k}'s process {pid} runs as root: {cmd}"
