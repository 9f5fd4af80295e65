"""Jobs as their owner (issue 16): the local backend of the hub service runs each job as its owner's
OS account. Real OS accounts (created here with useradd and removed afterwards), a real
QueueService with a real ledger, real processes and real restarts. Needs root (as in CI); skipped
with the reason otherwise."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from servicetools import service_factory, stop_jobs, tick_until as wait

from jupyter_gpuqueue.backends.accounts import DEFAULT_PATH, Accounts, secure_state_dir, tljh_system_username
from jupyter_gpuqueue.errors import Forbidden, NotFound, ValidationError

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="creates OS accounts and runs jobs as them: needs root (tests run as root in CI)"),
    pytest.mark.skipif(shutil.which("useradd") is None or shutil.which("userdel") is None,
                       reason="needs useradd / userdel (the passwd package)"),
]

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-one}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: one}
spec: {clusterQueue: cq-one}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
"""

INVENTORY = """
nodes:
- name: box
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-000000000001, product: Model A, memoryMiB: 1024}
"""

# The jobs' Python: one every account can run (the test's own may live under /root).
JOBPY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
SECRETS = {"JUPYTERHUB_API_TOKEN": "hub-secret-token", "GPUQUEUE_DB_URL": "postgresql://svc:pw@db/gq",
           "GPUQUEUE_TEST_SERVICE_ONLY": "service-only"}


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


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(")") + 2:].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


@pytest.fixture(scope="module")
def accounts():
    """Two OS accounts gq-alice-<rnd> (in an extra group, umask=027 in GECOS) and gq-bob-<rnd>
    (home 0700 with a secret file); removed afterwards with their homes and processes."""
    if JOBPY is None:
        pytest.skip("needs a python3 in /usr/bin or /usr/local/bin that every account can run")
    rnd = secrets.token_hex(3)
    group = f"gq-g-{rnd}"
    names = {"alice": f"gq-alice-{rnd}", "bob": f"gq-bob-{rnd}"}
    made: list[str] = []
    _run("groupadd", group)
    try:
        _run("useradd", "-m", "-s", "/bin/sh", "-c", "GPU queue test,umask=027", "-G", group, names["alice"])
        made.append(names["alice"])
        _run("useradd", "-m", "-s", "/bin/sh", "-c", "GPU queue test", names["bob"])
        made.append(names["bob"])
        bob = pwd.getpwnam(names["bob"])
        os.chmod(bob.pw_dir, 0o700)
        secret = Path(bob.pw_dir) / "secret.txt"
        secret.write_text("bob's secret\n")
        os.chown(secret, bob.pw_uid, bob.pw_gid)
        os.chmod(secret, 0o600)
        yield {"rnd": rnd, "group": group, "names": names,
               "pw": {k: pwd.getpwnam(v) for k, v in names.items()}, "gid": __import__("grp").getgrnam(group).gr_gid}
    finally:
        for name in made:
            uid = pwd.getpwnam(name).pw_uid
            for pid in _pids_of(uid):  # only processes of the test's own accounts
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["userdel", "-r", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["groupdel", group], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture
def env(accounts, monkeypatch):
    """A hub-service-like QueueService whose jobs run as their owners: hub users alice and bob map to
    gq-alice-<rnd> / gq-bob-<rnd> by the template, carol by os_account_map to alice's account."""
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)  # the service's environment: no job may see it
    base = Path(tempfile.mkdtemp(prefix="gq-owner-", dir="/tmp"))
    os.chmod(base, 0o755)  # the jobs' folders are reachable; the service's state folder is made 0700
    mapping = Accounts("gq-{username}-" + accounts["rnd"], {"carol": accounts["names"]["alice"]})
    make = service_factory(base, CLUSTER, INVENTORY, default_local_queue="one/q", stop_grace_seconds=2.0,
                           db_url=f"sqlite:///{base / 'data' / 'gpuqueue.sqlite'}", owner_accounts=mapping)
    (base / "root").chmod(0o755)
    yield make, base, accounts
    stop_jobs(make.services, grace=0.5)
    for svc in make.services:
        svc.ledger.close()
    shutil.rmtree(base, ignore_errors=True)


def state(svc, name):
    return svc.get_workload("one", name)["state"]


def finished(svc, name):
    return state(svc, name) in ("Succeeded", "Failed", "Cancelled")


def job_output(svc, name, user):
    text = svc.read_log("one", name, user=user)["text"]
    line = next(ln for ln in text.splitlines() if ln.startswith("{"))
    return json.loads(line)


PROBE = r"""
import json, os, sys
home = os.environ.get("HOME")
with open(os.path.join(sys.argv[1], "made-by-job.txt"), "w") as f:
    f.write("x")
def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return type(e).__name__
ledger, data = sys.argv[2], os.path.dirname(sys.argv[2])
print(json.dumps({
    "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
    "umask": os.umask(0o022), "cwd": os.getcwd(), "env": dict(os.environ),
    "read_bob_secret": attempt(lambda: open(sys.argv[3]).read()),
    "list_bob_home": attempt(lambda: os.listdir(os.path.dirname(sys.argv[3]))),
    "write_ledger": attempt(lambda: open(ledger, "r+b").close()),
    "read_ledger": attempt(lambda: open(ledger, "rb").close()),
    "create_in_state_dir": attempt(lambda: open(os.path.join(data, "planted"), "w").close()),
}), flush=True)
"""


def test_a_job_runs_as_its_owner_with_a_fresh_environment_and_the_owners_umask(env):
    make, base, acc = env
    svc = make()
    alice = acc["pw"]["alice"]
    bob_secret = os.path.join(acc["pw"]["bob"].pw_dir, "secret.txt")
    ledger = str(base / "data" / "gpuqueue.sqlite")
    svc.submit({"name": "probe", "command": [JOBPY, "-c", PROBE, alice.pw_dir, ledger, bob_secret],
                "workingDir": alice.pw_dir, "env": {"MY_SETTING": "1"}}, user="alice")
    wait(svc, lambda: finished(svc, "probe"))
    w = svc.get_workload("one", "probe")
    assert w["state"] == "Succeeded", w
    out = job_output(svc, "probe", "alice")
    # uid, gid, supplementary groups and umask of the account (umask=027 from its GECOS field)
    assert (out["uid"], out["euid"], out["gid"]) == (alice.pw_uid, alice.pw_uid, alice.pw_gid)
    assert acc["gid"] in out["groups"] and 0 not in out["groups"]
    assert out["umask"] == 0o027
    assert out["cwd"] == alice.pw_dir
    # a fresh environment: the account's HOME, USER, PATH, the job's own variables; nothing of the service
    job_env = out["env"]
    assert (job_env["HOME"], job_env["USER"], job_env["LOGNAME"], job_env["PATH"]) == (
        alice.pw_dir, alice.pw_name, alice.pw_name, DEFAULT_PATH)
    assert job_env["MY_SETTING"] == "1" and job_env["GPUQUEUE_WORKLOAD_NAME"] == "probe"
    for k in SECRETS:
        assert k not in job_env, k
    extra = {k for k in job_env if not k.startswith(("GPUQUEUE_", "CUDA_", "NVIDIA_"))} - {
        "HOME", "USER", "LOGNAME", "SHELL", "PATH", "MY_SETTING", "LC_CTYPE"}  # LC_CTYPE: Python's own coercion
    assert not extra, f"the job saw the service's environment: {sorted(extra)}"
    # cannot read bob's 0700 home, cannot read or write the ledger nor plant files beside it
    assert out["read_bob_secret"] == "PermissionError"
    assert out["list_bob_home"] == "PermissionError"
    assert out["write_ledger"] == "PermissionError"
    assert out["read_ledger"] == "PermissionError"
    assert out["create_in_state_dir"] == "PermissionError"
    assert not (base / "data" / "planted").exists()
    # a file it creates is alice's, with her umask; its log is hers and readable by her only
    made = os.stat(os.path.join(alice.pw_dir, "made-by-job.txt"))
    assert (made.st_uid, made.st_gid, stat.S_IMODE(made.st_mode)) == (alice.pw_uid, alice.pw_gid, 0o640)
    run = svc.ledger.find_workload("one", "probe")["run"]
    lst = os.stat(run["logPath"])
    assert (lst.st_uid, stat.S_IMODE(lst.st_mode)) == (alice.pw_uid, 0o600)
    assert stat.S_IMODE(os.stat(base / "data").st_mode) == 0o700
    with pytest.raises(Forbidden):
        svc.read_log("one", "probe", user="bob")


def test_the_working_directory_is_checked_as_the_owner(env):
    make, base, acc = env
    svc = make()
    bob_home = acc["pw"]["bob"].pw_dir
    # The folder exists (the service, as root, could enter it) but alice may not: her job fails, saying why.
    svc.submit({"name": "peek", "command": [JOBPY, "-c", "print('inside')"], "workingDir": bob_home}, user="alice")
    wait(svc, lambda: finished(svc, "peek"))
    w = svc.get_workload("one", "peek")
    assert w["state"] == "Failed"
    assert "cannot enter the working directory" in w["message"] and acc["names"]["alice"] in w["message"]
    assert "Permission denied" in w["message"]
    assert "inside" not in svc.read_log("one", "peek", user="alice")["text"]
    # bob himself may
    svc.submit({"name": "home", "command": [JOBPY, "-c", "import os; print(os.getcwd())"],
                "workingDir": bob_home}, user="bob")
    wait(svc, lambda: finished(svc, "home"))
    assert state(svc, "home") == "Succeeded"
    assert bob_home in svc.read_log("one", "home", user="bob")["text"]
    # a command the account cannot execute fails as the job's failure, naming the account
    secret_tool = Path(bob_home) / "tool.sh"
    secret_tool.write_text("#!/bin/sh\necho ran\n")
    secret_tool.chmod(0o755)
    svc.submit({"name": "tool", "command": [str(secret_tool)], "workingDir": acc["pw"]["alice"].pw_dir},
               user="alice")
    wait(svc, lambda: finished(svc, "tool"))
    w = svc.get_workload("one", "tool")
    assert w["state"] == "Failed" and w["exitCode"] == 126, w
    assert "cannot execute" in w["message"] and acc["names"]["alice"] in w["message"]


def test_a_submission_cannot_probe_folders_closed_to_its_owner(env):
    """The service (root) checks no path a request names: a folder of bob's that exists and one
    that does not are answered alike (accepted), and both jobs fail as alice's, saying why."""
    make, base, acc = env
    svc = make()
    bob_home = Path(acc["pw"]["bob"].pw_dir)
    (bob_home / "exists").mkdir(mode=0o700)
    (bob_home / "exists").chmod(0o700)
    for name, wd in (("probe-yes", bob_home / "exists"), ("probe-no", bob_home / "missing")):
        w = svc.submit({"name": name, "command": [JOBPY, "-c", "print(1)"], "workingDir": str(wd)}, user="alice")
        assert w["state"] == "Pending", w
    for name in ("probe-yes", "probe-no"):
        wait(svc, lambda name=name: finished(svc, name))
        w = svc.get_workload("one", name)
        assert w["state"] == "Failed" and "cannot enter the working directory" in w["message"], w
    # Same for a script: no "no such file" from the service.
    w = svc.submit({"name": "probe-script", "script": str(bob_home / "missing.py")}, user="alice")
    assert w["state"] == "Pending", w


def test_a_hub_user_without_an_os_account_is_refused_and_nothing_is_queued(env):
    make, base, acc = env
    svc = make()
    with pytest.raises(Forbidden) as e:
        svc.submit({"name": "orphan", "command": [JOBPY, "-c", "pass"]}, user="dave")
    assert "'dave'" in e.value.message and f"gq-dave-{acc['rnd']}" in e.value.message
    assert e.value.field == "user"
    with pytest.raises(NotFound):
        svc.get_workload("one", "orphan")
    assert svc.list_workloads(owner="dave") == []
    # carol is mapped explicitly (os_account_map) to alice's account
    svc.submit({"name": "mapped", "command": [JOBPY, "-c", "import os; print(os.getuid())"]}, user="carol")
    wait(svc, lambda: finished(svc, "mapped"))
    assert state(svc, "mapped") == "Succeeded"
    assert str(acc["pw"]["alice"].pw_uid) in svc.read_log("one", "mapped", user="carol")["text"]


TREE = "sleep 300 & (sleep 300 &) ; echo started; sleep 300"


def _tree(svc, name, uid):
    run = svc.ledger.find_workload("one", name)["run"]
    deadline = time.time() + 10
    while time.time() < deadline:
        members = _group_members(run["pgid"])
        if len(members) >= 4:  # wrapper, sh, and its sleeps
            break
        time.sleep(0.05)
    assert len(members) >= 4, members
    for pid in members:
        assert os.stat(f"/proc/{pid}").st_uid == uid
    return run["pgid"], members


def _gone(pids, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        alive = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                        alive.append(pid)
            except OSError:
                pass
        if not alive:
            return
        time.sleep(0.05)
    raise AssertionError(f"still running: {alive}")


def test_cancel_and_preemption_stop_the_owners_whole_process_tree(env):
    make, base, acc = env
    svc = make()
    alice_uid = acc["pw"]["alice"].pw_uid
    svc.submit({"name": "tree", "command": ["sh", "-c", TREE]}, user="alice")
    wait(svc, lambda: state(svc, "tree") == "Running")
    _, pids = _tree(svc, "tree", alice_uid)
    svc.cancel("one", "tree", user="alice")
    wait(svc, lambda: finished(svc, "tree"))
    _gone(pids)
    # preemption: alice's low-priority job holds both GPUs; bob's high-priority one takes them
    svc.submit({"name": "low", "command": ["sh", "-c", TREE], "gpus": 2, "priorityClass": "low"}, user="alice")
    wait(svc, lambda: state(svc, "low") == "Running")
    _, pids = _tree(svc, "low", alice_uid)
    svc.submit({"name": "high", "command": [JOBPY, "-c", "import os; print('urgent', os.getuid())"],
                "gpus": 2, "priorityClass": "high"}, user="bob")
    wait(svc, lambda: state(svc, "high") == "Succeeded", timeout=30)
    _gone(pids)
    assert svc.get_workload("one", "low")["evictions"] == 1
    assert f"urgent {acc['pw']['bob'].pw_uid}" in svc.read_log("one", "high", user="bob")["text"]
    wait(svc, lambda: state(svc, "low") == "Running")  # requeued, runs again as alice
    _, pids = _tree(svc, "low", alice_uid)
    svc.cancel("one", "low", user="alice")
    wait(svc, lambda: finished(svc, "low"))
    _gone(pids)


def test_a_restarted_service_adopts_its_owners_jobs(env):
    make, base, acc = env
    a = make()
    alice_uid = acc["pw"]["alice"].pw_uid
    a.submit({"name": "long", "command": ["sh", "-c", TREE]}, user="alice")
    wait(a, lambda: state(a, "long") == "Running")
    pgid, pids = _tree(a, "long", alice_uid)
    uid = a.get_workload("one", "long")["uid"]
    a.ledger.close()  # the service goes away; its jobs do not
    b = make()
    assert state(b, "long") == "Running"
    assert uid in b.backend.running()
    assert set(pids) <= set(_group_members(pgid))
    b.cancel("one", "long", user="alice")
    wait(b, lambda: finished(b, "long"))
    _gone(pids)
    # and a job that finished while the service was down reports its own outcome
    b.submit({"name": "short", "command": ["sh", "-c", "sleep 1; exit 3"]}, user="alice")
    wait(b, lambda: state(b, "short") == "Running")
    b.ledger.close()
    time.sleep(1.5)
    c = make()
    wait(c, lambda: finished(c, "short"))
    w = c.get_workload("one", "short")
    assert (w["state"], w["exitCode"]) == ("Failed", 3), w


def test_account_mapping_presets_and_refusals(accounts):
    assert Accounts("tljh").account_name("alice") == "jupyter-alice"
    long = "a-very-long-hub-user-name-of-someone"
    name = Accounts("tljh").account_name(long)
    assert name == tljh_system_username("jupyter-" + long) and len(name) <= 32 and name.startswith("jupyter-a-very")
    assert Accounts("systemd").account_name("bob") == "bob"
    assert Accounts("{username}", {"bob": "robert"}).account_name("bob") == "robert"
    for bad in ("", "jupyter", "{USERID}-{USERNAME}", "{user}"):
        with pytest.raises(ValidationError) as e:
            Accounts(bad)
        assert e.value.field == "os_account_template"
    with pytest.raises(ValidationError) as e:
        Accounts("{username}", {"bob": ""})
    assert e.value.field == "os_account_map"
    with pytest.raises(Forbidden, match="root"):
        Accounts("{username}", {"admin": "root"}).lookup("admin")
    with pytest.raises(Forbidden, match="system account"):
        Accounts("{username}").lookup("daemon")  # uid 1: only when mapped explicitly
    assert Accounts("{username}", {"daemon": "daemon"}).lookup("daemon").name == "daemon"
    a = Accounts("gq-{username}-" + accounts["rnd"]).lookup("alice")
    assert (a.uid, a.umask) == (accounts["pw"]["alice"].pw_uid, 0o027)
    b = Accounts("gq-{username}-" + accounts["rnd"]).lookup("bob")
    assert b.umask in (0o022, 0o002)  # login.defs' UMASK, group bits as the owner's for a user-private group


def test_the_state_folder_must_be_the_services_own(tmp_path):
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)  # writable by everyone, not sticky: a job could swap the state folder
    with pytest.raises(ValidationError) as e:
        secure_state_dir(str(open_parent / "state"))
    assert e.value.field == "state_dir" and str(open_parent) in e.value.message
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    secure_state_dir(str(sticky / "state"))
    assert stat.S_IMODE(os.stat(sticky / "state").st_mode) == 0o700


def test_asking_for_it_without_root_is_refused_with_the_reason(accounts):
    """Run as alice (a real non-root account): the backend refuses, naming the setting and why."""
    import jupyter_gpuqueue

    repo = str(Path(jupyter_gpuqueue.__file__).resolve().parents[1])
    alice = accounts["pw"]["alice"]
    probe = subprocess.run([JOBPY, "-I", "-c", f"import os; print(os.access({repo!r}, os.R_OK | os.X_OK))"],
                           user=alice.pw_uid, group=alice.pw_gid, extra_groups=[], cwd="/",
                           env={"PATH": DEFAULT_PATH}, capture_output=True, text=True)
    if probe.stdout.strip() != "True":
        pytest.skip(f"the package at {repo} is not readable by other accounts")
    code = (f"import sys; sys.path.insert(0, {repo!r})\n"
            "from jupyter_gpuqueue.backends.accounts import Accounts\n"
            "from jupyter_gpuqueue.backends.local import LocalBackend\n"
            "from jupyter_gpuqueue.errors import ValidationError\n"
            "try:\n    LocalBackend(accounts=Accounts())\nexcept ValidationError as e:\n"
            "    print(e.field + ' | ' + e.message)\n")
    out = subprocess.run([JOBPY, "-I", "-c", code], user=alice.pw_uid, group=alice.pw_gid, extra_groups=[],
                         cwd="/", env={"PATH": DEFAULT_PATH}, capture_output=True, text=True, timeout=60)
    field, _, message = out.stdout.strip().partition(" | ")
    assert field == "run_jobs_as_owner", (out.stdout, out.stderr)
    assert "needs the service to run as root" in message and f"uid {alice.pw_uid}" in message


# The job tries to bill itself less (issue 31): it looks for the exit record among its own
# descriptors and through its wrapper's, writes a record that says it ended one second after it
# started (and one a day before it started), then kills its wrapper so that no honest record follows.
FORGE = r"""
import json, os, signal, sys, time
time.sleep(float(sys.argv[1]))
found, via_wrapper = [], "none"
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    if target.endswith(".exit"):
        found.append(target)
        os.pwrite(int(fd), json.dumps({"exitCode": 0, "signal": None, "finishedAt": 1.0}).encode(), 0)
wrapper = os.getppid()
for fd in os.listdir("/proc/%d/fd" % wrapper) if os.access("/proc/%d/fd" % wrapper, os.R_OK) else []:
    try:
        target = os.readlink("/proc/%d/fd/%s" % (wrapper, fd))
    except OSError as e:
        via_wrapper = "readlink: " + type(e).__name__
        continue
    if target.endswith(".exit"):
        try:
            with open("/proc/%d/fd/%s" % (wrapper, fd), "w") as f:
                f.write(json.dumps({"exitCode": 0, "signal": None, "finishedAt": 1.0}))
            via_wrapper = "written"
        except OSError as e:
            via_wrapper = type(e).__name__
print(json.dumps({"inherited": found, "via_wrapper": via_wrapper, "killed_wrapper_at": time.time()}), flush=True)
os.kill(wrapper, signal.SIGKILL)
time.sleep(0.5)
"""


def test_a_job_cannot_forge_its_exit_record_or_its_bill(env):
    """The job never holds the exit record (close-on-exec in the wrapper), cannot reopen it through
    its wrapper's descriptors (the record is the service's, 0600), and its end time is the one the
    service observed: killing the wrapper after a forged record bills at least the real run time."""
    make, base, acc = env
    svc = make()
    svc.submit({"name": "forge", "command": [JOBPY, "-c", FORGE, "3"], "gpus": 1}, user="alice")
    wait(svc, lambda: finished(svc, "forge"), timeout=60)
    w = svc.get_workload("one", "forge")
    out = job_output(svc, "forge", "alice")
    assert out["inherited"] == [], "the job inherited the exit record's descriptor"
    assert out["via_wrapper"] != "written", "the job reopened the exit record through its wrapper"
    # Failed (its wrapper was killed), not the Succeeded the forged record claims; billed for the
    # whole time it ran, not the 1 s (or less than nothing) of the record
    assert w["state"] == "Failed", w
    rec = svc.ledger.find_workload("one", "forge")
    ran = out["killed_wrapper_at"] - rec["started_at"]
    assert ran >= 3.0
    assert rec["finished_at"] >= out["killed_wrapper_at"] - 0.01, (rec["finished_at"], out)
    assert w["costUsd"] >= round(2.00 * ran / 3600, 6) - 2e-6, w


def test_a_record_written_while_the_service_was_down_is_held_to_what_it_saw(env):
    """After a restart the end time lies between the last sighting on record and now, whatever the
    exit record says (here a record rewritten, as root, to a day before the job started)."""
    make, base, acc = env
    a = make()
    a.submit({"name": "gone", "command": ["sh", "-c", "sleep 4"]}, user="alice")
    wait(a, lambda: state(a, "gone") == "Running")
    started = a.ledger.find_workload("one", "gone")["started_at"]
    sightings = base / "data" / "local-runs.seen"
    # the service watches it for a while: its sightings are recorded
    wait(a, lambda: sightings.exists() and sightings.stat().st_mtime >= started + 1.0)
    seen = sightings.stat().st_mtime
    assert state(a, "gone") == "Running"
    run = a.ledger.find_workload("one", "gone")["run"]
    a.ledger.close()  # the service goes away; the job ends meanwhile
    pid = run["pid"]
    deadline = time.time() + 20
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.05)
    Path(run["exitPath"]).write_text(json.dumps({"exitCode": 0, "signal": None, "finishedAt": started - 86400}))
    b = make()
    wait(b, lambda: finished(b, "gone"))
    rec = b.ledger.find_workload("one", "gone")
    assert rec["finished_at"] >= seen - 0.01, (rec["finished_at"], seen)
    assert rec["finished_at"] >= rec["started_at"]


def test_a_job_without_a_working_directory_runs_in_its_owners_home(env):
    """Never in a folder of the service (the hub's state folder, the service's root_dir): the owner's
    home by default, and a relative workingDir is taken from it (issue 31)."""
    make, base, acc = env
    svc = make()
    alice = acc["pw"]["alice"]
    sub = Path(alice.pw_dir) / "proj"
    sub.mkdir(exist_ok=True)
    os.chown(sub, alice.pw_uid, alice.pw_gid)
    code = "import os; open('out.txt', 'w').write('x'); print(os.getcwd())"
    svc.submit({"name": "nowd", "command": [JOBPY, "-c", code]}, user="alice")
    svc.submit({"name": "relwd", "command": [JOBPY, "-c", code], "workingDir": "proj"}, user="alice")
    wait(svc, lambda: finished(svc, "nowd") and finished(svc, "relwd"))
    for name, where in (("nowd", alice.pw_dir), ("relwd", str(sub))):
        w = svc.get_workload("one", name)
        assert w["state"] == "Succeeded", w
        assert w["workingDir"] == where
        assert svc.read_log("one", name, user="alice")["text"].strip().splitlines()[0] == where
        assert os.stat(os.path.join(where, "out.txt")).st_uid == alice.pw_uid


def test_a_notebook_job_runs_as_its_owner_and_the_service_reads_none_of_its_files(env):
    """Notebook jobs (issue 37) as their owners: the service (root) opens neither the notebook nor
    its kernelspec (a missing kernel is the job's failure, papermill's reason in its log, as the
    owner sees kernels); papermill runs as the owner, and the executed notebook is the owner's."""
    make, base, acc = env
    svc = make()
    alice = acc["pw"]["alice"]
    home = Path(alice.pw_dir)

    def notebook(path, kernel, *sources, tags=None):
        cells = [{"cell_type": "code", "metadata": {"tags": (tags or {}).get(i, [])}, "source": s,
                  "outputs": [], "execution_count": None} for i, s in enumerate(sources)]
        path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": cells, "metadata": {
            "kernelspec": {"name": kernel, "display_name": kernel, "language": "python"}}}))
        os.chown(path, alice.pw_uid, alice.pw_gid)

    notebook(home / "nokernel.ipynb", "no-such-kernel", "x = 1")
    w = svc.submit({"name": "nb-nokernel", "notebook": "nokernel.ipynb"}, user="alice")
    assert w["state"] == "Pending", w  # not refused by root's view of alice's files
    notebook(home / "mine.ipynb", "python3", "n = 1", "import os\nprint('uid', os.getuid(), 'n', n)",
             tags={0: ["parameters"]})
    w = svc.submit({"name": "nb-mine", "notebook": "mine.ipynb", "parameters": {"n": 7}}, user="alice")
    for name in ("nb-nokernel", "nb-mine"):
        wait(svc, lambda name=name: finished(svc, name), timeout=180)
    bad = svc.get_workload("one", "nb-nokernel")
    assert bad["state"] == "Failed", bad
    assert "no-such-kernel" in svc.read_log("one", "nb-nokernel", user="alice")["text"]
    good = svc.get_workload("one", "nb-mine")
    assert good["state"] == "Succeeded", (good, svc.read_log("one", "nb-mine", user="alice")["text"])
    out = home / "mine-nb-mine.ipynb"
    assert out.stat().st_uid == alice.pw_uid
    assert f"uid {alice.pw_uid} n 7" in out.read_text()
