"""Crash consistency: a real ``jupyter server`` with the queue is killed with SIGKILL at random
moments, during a burst of concurrent REST submissions and during a drain of short real jobs, and
restarted on the same ledger and state folder. After every restart:

- every acknowledged submission (a 201 the client received) is in the ledger and the API exactly once;
- no GPU or MIG device is assigned to two live workloads (ledger, the service's inventory view, and
  the job processes really alive with their CUDA_VISIBLE_DEVICES);
- every usage interval is closed exactly when its job finished (at the exit time the job's wrapper
  recorded, also when it finished while the server was down), open only for admitted work, and
  never ends before it starts;
- jobs still running are adopted again (Running, the same pid and start time) and later finish
  normally;
- admitted usage never exceeds what the quotas allow (nominal + borrowing within the cohort).

At the end everything drains: every workload ran exactly once (each job appends a line with its
pid to a marker file named by its uid) and succeeded, no interval is open, no device is held.

Scale: ``CRASH_SEEDS`` seeds × ``TRIALS`` kills (21 by default); servers are forked from a
pre-imported Python (tests/server_zygote.py) so that a restart costs about a second.
``GPUQUEUE_CRASH_TRIALS=<n>`` runs n kills per seed instead. One seed runs on PostgreSQL too.

Kills that land inside the group commit, not by chance: ``GPUQUEUE_FAILPOINT`` arms the server to
SIGKILL itself before or after the Nth commit while 8 clients keep submissions outstanding
(5 kills per ledger kind, SQLite and PostgreSQL; every one must land mid-request, and the run
prints how many did and how many rows were committed but unacknowledged); see
``FAILPOINT_KILLS`` below. Kills inside every commit that changes quota or money, and during
preemptions, are in tests/test_crash_commits.py (a file of its own: xdist's ``--dist loadfile``
runs it beside this one). No device is held by two live job processes at any moment of these
trials (tests/liveprocs.py reads /proc).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import requests

import liveprocs
from liveprocs import DeviceWatch
from servertools import Launcher, RunningServer, ServerSetup

pytestmark = pytest.mark.slow

CRASH_SEEDS = [11, 23, 37]
TRIALS = int(os.environ.get("GPUQUEUE_CRASH_TRIALS", "7"))  # kills per seed

CLUSTER = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a}
spec: {nodeLabels: {model: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a-mig}
spec: {nodeLabels: {model: a, mig: mixed}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-one}
spec:
  cohort: lab
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 2, borrowingLimit: 1}]
  - coveredResources: [nvidia.com/mig-1g.10gb]
    flavors:
    - name: gpu-a-mig
      resources: [{name: nvidia.com/mig-1g.10gb, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq-two}
spec:
  cohort: lab
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
  - coveredResources: [nvidia.com/mig-1g.10gb]
    flavors:
    - name: gpu-a-mig
      resources: [{name: nvidia.com/mig-1g.10gb, nominalQuota: 3}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: one}
spec: {clusterQueue: cq-one}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: two}
spec: {clusterQueue: cq-two}
"""

INVENTORY = """
nodes:
- name: box
  labels: {model: a, mig: mixed}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
  - {index: 1, uuid: GPU-00000000-0000-0000-0000-000000000001, product: Model A, memoryMiB: 1024}
  - {index: 2, uuid: GPU-00000000-0000-0000-0000-000000000002, product: Model A, memoryMiB: 1024}
  - {index: 3, uuid: GPU-00000000-0000-0000-0000-000000000003, product: Model A, memoryMiB: 1024}
  - index: 4
    uuid: GPU-00000000-0000-0000-0000-000000000004
    product: Model A
    memoryMiB: 1024
    mig:
""" + "".join(
    f"    - {{uuid: MIG-00000000-0000-0000-0000-00000000000{i}, profile: 1g.10gb}}\n" for i in range(7)
)

# Quotas as configured above (the independent reference the checks use, not the server's view).
NOMINAL = {("cq-one", "gpu-a", "nvidia.com/gpu"): 2, ("cq-one", "gpu-a-mig", "nvidia.com/mig-1g.10gb"): 4,
           ("cq-two", "gpu-a", "nvidia.com/gpu"): 2, ("cq-two", "gpu-a-mig", "nvidia.com/mig-1g.10gb"): 3}
BORROWING_LIMIT = {("cq-one", "gpu-a", "nvidia.com/gpu"): 1}
ACTIVE = ("Pending", "Admitted", "Running")
LIVE = ("Admitted", "Running")
FINISHED = ("Succeeded", "Failed", "Cancelled")


# -- the queue under test ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def launcher():
    la = Launcher(zygote=True)
    yield la
    la.close()


class Queue:
    """A queue's setup, its current server, and what clients were told."""

    def __init__(self, base: Path, launcher: Launcher, rng: random.Random, db_url: str = "",
                 cluster: str = CLUSTER):
        self.db_url = db_url  # "" : the setup's SQLite file
        extra = f"c.GpuQueueApp.db_url = {db_url!r}\n" if db_url else ""
        self.setup = ServerSetup(base, cluster, INVENTORY, extra_config=extra)
        self.marks = base / "marks"
        self.marks.mkdir()
        self.launcher = launcher
        self.rng = rng
        self.server: RunningServer = launcher.start(self.setup)
        self.acked: dict[str, str] = {}  # uid -> "namespace/name" of every 201 received
        self.adopted: set[str] = set()  # uids seen Running right after a restart
        self.cancelled: set[str] = set()  # uids a client cancelled
        self.lock = threading.Lock()
        self.counter = 0
        self.errors: list[BaseException] = []  # raised in submitter threads: re-raised by join()
        self.job_env = {"MARKS": str(self.marks)}  # what tells this queue's job processes (liveprocs)

    def job(self, seconds: str = "") -> dict:
        """A short real job: records its pid and devices in marks/<uid>, then sleeps (0.2 s, one in
        five 1.5 s, or ``seconds``)."""
        with self.lock:
            self.counter += 1
            n = self.counter
        r = self.rng.random()
        seconds = seconds or ("1.5" if r < 0.2 else "0.2")
        # a quarter ignore SIGTERM (a job that checkpoints first): cancelled, they keep running
        trap = "trap '' TERM; " if self.rng.random() < 0.25 else ""
        req = {
            "name": f"job-{n}",
            "localQueue": "one/q" if self.rng.random() < 0.5 else "two/q",
            "command": ["sh", "-c", trap + 'echo "$$ $CUDA_VISIBLE_DEVICES" >> "$MARKS/$GPUQUEUE_WORKLOAD_UID"; '
                        f"exec sleep {seconds}"],
            "env": {"MARKS": str(self.marks)},
            "maxRuntime": "2m",
        }
        if self.rng.random() < 0.35:
            req["migProfile"] = "1g.10gb"
        else:
            req["gpus"] = 2 if self.rng.random() < 0.25 else 1
        return req

    def submit(self, session: requests.Session, req: dict) -> bool:
        """POST one job; remember it if (and only if) the server acknowledged it with 201."""
        try:
            r = self.server.request("POST", "workloads", session, json=req, timeout=10)
        except requests.RequestException:
            return False  # the server died: not acknowledged
        if r.status_code == 201:
            wl = r.json()
            with self.lock:
                assert wl["uid"] not in self.acked
                self.acked[wl["uid"]] = f"{wl['namespace']}/{wl['name']}"
            return True
        assert r.status_code >= 500 or r.status_code == 599, (r.status_code, r.text)
        return False

    def restart(self) -> None:
        self.server.kill9()
        self.server = self.launcher.start(self.setup)


def _submitters(q: Queue, n_threads: int, per_thread: int) -> list[threading.Thread]:
    jobs = [[q.job() for _ in range(per_thread)] for _ in range(n_threads)]

    def run(batch):
        try:
            with requests.Session() as s:
                for req in batch:
                    if not q.submit(s, req):
                        return
        except BaseException as exc:  # an assertion in a thread: pytest would only warn
            q.errors.append(exc)

    threads = [threading.Thread(target=run, args=(b,), daemon=True) for b in jobs]
    for t in threads:
        t.start()
    return threads


def _join(q: Queue, threads: list[threading.Thread]) -> None:
    """Join the submitter threads; the first exception one of them raised is raised here."""
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a submitter thread did not end within 60 s"
    if q.errors:
        raise q.errors[0]


def burst_then_kill(q: Queue) -> None:
    """(a) Concurrent submissions through the REST API; SIGKILL at a random moment of the burst."""
    threads = _submitters(q, n_threads=4, per_thread=6)
    time.sleep(q.rng.uniform(0.0, 0.8))
    q.restart()
    _join(q, threads)


def drain_then_kill(q: Queue) -> None:
    """(b) Short real jobs being admitted, started, reaped, two of them cancelled on the way;
    SIGKILL at a random moment of the drain."""
    # one job of 3 s first: it is running when the server dies (then adopted), unless the
    # server dies before it even started it
    with requests.Session() as session:
        assert q.submit(session, q.job(seconds="3"))
    _join(q, _submitters(q, n_threads=2, per_thread=6))
    kill_at = q.rng.uniform(0.1, 2.0)
    cancel_at = q.rng.uniform(0.0, kill_at)
    time.sleep(cancel_at)
    for uid in q.rng.sample(sorted(q.acked), 2):
        ns, name = q.acked[uid].split("/")
        r = q.server.request("DELETE", f"workloads/{ns}/{name}")
        assert r.status_code == 200, r.text
        if r.json()["state"] == "Cancelled":
            q.cancelled.add(uid)
    time.sleep(kill_at - cancel_at)
    q.restart()


# -- the checks ---------------------------------------------------------------------------------------


def ledger_rows(q: Queue) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """Workloads by uid and usage intervals by workload uid, from one read transaction."""
    if getattr(q, "db_url", None):
        return _ledger_rows_sqlalchemy(q.db_url)
    con = sqlite3.connect(f"file:{q.setup.db_path}?mode=ro", uri=True, timeout=30)
    con.row_factory = sqlite3.Row
    try:
        con.execute("BEGIN")
        rows = {r["uid"]: dict(r) for r in con.execute("SELECT * FROM workloads")}
        intervals = defaultdict(list)
        for r in con.execute("SELECT * FROM usage_intervals ORDER BY id"):
            intervals[r["workload_uid"]].append(dict(r))
        con.execute("COMMIT")
    finally:
        con.close()
    for r in rows.values():
        for k in ("spec", "admission", "run"):
            r[k] = json.loads(r[k]) if r[k] is not None else None
    return rows, intervals


def _ledger_rows_sqlalchemy(url: str) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    """:func:`ledger_rows` of a ledger at a SQLAlchemy URL (PostgreSQL), one REPEATABLE READ
    transaction."""
    import sqlalchemy as sa

    engine = sa.create_engine(url, isolation_level="REPEATABLE READ")
    try:
        with engine.connect() as con:
            rows = {r["uid"]: dict(r) for r in con.execute(sa.text("SELECT * FROM workloads")).mappings()}
            intervals = defaultdict(list)
            for r in con.execute(sa.text("SELECT * FROM usage_intervals ORDER BY id")).mappings():
                intervals[r["workload_uid"]].append(dict(r))
    finally:
        engine.dispose()
    for r in rows.values():
        for k in ("spec", "admission", "run"):
            if isinstance(r[k], str):
                r[k] = json.loads(r[k])
    return rows, intervals


def _start_ticks(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _exit_record(run: dict):
    try:
        with open(run["exitPath"]) as f:
            return json.load(f)
    except (OSError, ValueError, KeyError):
        return None


def live_job_processes(q: Queue) -> dict[str, list[tuple[int, str]]]:
    """uid -> [(pid, CUDA_VISIBLE_DEVICES)] of job processes alive now (from the marker files)."""
    out: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for f in q.marks.iterdir():
        for line in f.read_text().splitlines():
            pid, _, devices = line.partition(" ")
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"sleep" in cmd and _start_ticks(int(pid)) is not None:
                out[f.name].append((int(pid), devices))
    return out


def check_invariants(q: Queue, where: str) -> None:
    t0 = time.time()
    rows, intervals = ledger_rows(q)
    # 1. every acknowledged submission exactly once, in the ledger and in the API
    for uid, key in q.acked.items():
        assert uid in rows, f"{where}: acknowledged {key} ({uid}) lost"
        assert f"{rows[uid]['namespace']}/{rows[uid]['name']}" == key
    keys = Counter(f"{r['namespace']}/{r['name']}" for r in rows.values())
    assert max(keys.values(), default=1) == 1
    listed = Counter(w["uid"] for w in q.server.request("GET", "workloads").json()["items"])
    assert all(listed[uid] == 1 for uid in q.acked), f"{where}: not listed exactly once"
    assert set(listed) == set(rows)

    # 2. no device assigned twice: ledger, the service's inventory view, live processes
    holder: dict[tuple[str, str], str] = {}
    for uid, r in rows.items():
        if r["state"] not in LIVE:
            continue
        for p in r["admission"]["placements"]:
            for d in p["devices"]:
                assert (p["node"], d) not in holder, f"{where}: {d} assigned to {holder[(p['node'], d)]} and {uid}"
                holder[(p["node"], d)] = uid
    view = q.server.request("GET", "inventory").json()
    shown = {}
    for g in view["nodes"][0]["gpus"]:
        if g["mig"] is None:
            shown[("box", str(g["index"]))] = g["assignedTo"]
        else:
            for m in g["mig"]:
                shown[("box", m["uuid"])] = m["assignedTo"]
    after, _ = ledger_rows(q)  # the view was taken between the two reads
    key_of = {uid: f"{r['namespace']}/{r['name']}" for uid, r in after.items()}
    for dev, uid in holder.items():
        if after[uid]["state"] in LIVE:  # held before and after the view: the view shows it
            assert shown[dev] == key_of[uid], (where, dev, shown[dev], key_of[uid])
    for dev, key in shown.items():
        if key is not None:  # nothing is shown held that the ledger does not hold (then or since)
            uid = next(u for u, k in key_of.items() if k == key)
            if after[uid]["state"] == "Cancelled":
                # cancelled while it ran: it keeps its devices until its process is gone
                assert after[uid]["run"] is not None and holder.get(dev) in (None, uid), (where, dev, key)
                continue
            placed = any(dev == (p["node"], d) for p in (after[uid]["admission"] or {}).get("placements") or ()
                         for d in p["devices"])
            # held then, held since, or admitted and finished between the reads (a job run again
            # after its preemption that finds its mark ends at once)
            assert holder.get(dev) == uid or placed and (after[uid]["state"] in LIVE or (
                after[uid]["state"] in FINISHED and (after[uid]["finished_at"] or 0) >= t0)), (where, dev, key)
    liveprocs.check(q.job_env, where)  # the truth: /proc/<pid>/environ of every live job process
    processes = live_job_processes(q)
    busy: dict[str, str] = {}
    for uid, procs in processes.items():
        assert len(procs) == 1, f"{where}: {key_of.get(uid, uid)} runs {len(procs)} times at once: {procs}"
        for d in filter(None, procs[0][1].split(",")):
            assert d not in busy, f"{where}: device {d} used by the jobs of {busy[d]} and {uid} at once"
            busy[d] = uid

    # 3. usage intervals
    for uid, r in rows.items():
        ivs = intervals.get(uid, [])
        for iv in ivs:
            assert iv["end"] is None or iv["end"] >= iv["start"], (where, r["name"], iv)
        open_ = [iv for iv in ivs if iv["end"] is None]
        if r["state"] in LIVE:  # its admission's intervals open (earlier admissions' closed)
            assert open_ and (len(open_) == len(ivs) or r["evictions"]), (where, r["name"], r["state"], ivs)
        else:
            assert not open_, f"{where}: {r['name']} is {r['state']} with an open interval"
        if r["state"] in FINISHED and ivs:
            # closed when the job finished; with preemptions, its earlier admissions' intervals
            # before (when it went back to the queue), its last admission's (if it ended admitted)
            # when it finished
            last = ivs if not r["evictions"] else [
                iv for iv in ivs if r["admitted_at"] is not None and iv["start"] >= r["admitted_at"] - 1e-6]
            for iv in last:
                assert iv["end"] == pytest.approx(max(iv["start"], r["finished_at"]), abs=1e-6), (where, r, iv)
            for iv in ivs:
                assert iv["end"] <= r["finished_at"] + 1e-6, (where, r, iv)
        if r["state"] == "Succeeded":
            assert ivs, f"{where}: {r['name']} ran but has no usage interval"
            rec = _exit_record(r["run"])
            # billed to the end the service observed: never before the job's own end (its exit
            # record), and after it only by the time between two looks (docs/security.md)
            assert rec is not None and rec["finishedAt"] - 1e-6 <= r["finished_at"] <= rec["finishedAt"] + 2.0, \
                f"{where}: {r['name']} closed at {r['finished_at']}, its job ended at {rec}"
            assert r["started_at"] <= r["finished_at"]
        if r["state"] == "Pending":  # never admitted, or back in the queue after a preemption
            assert (not ivs or r["evictions"]) and r["admission"] is None, (where, r)

    # 4. running jobs adopted: the same process (pid and start time), or it ended since
    for uid, r in rows.items():
        if r["state"] == "Running":
            run = r["run"]
            alive = _start_ticks(run["pid"]) == run["startTicks"]
            assert alive or _exit_record(run) is not None, f"{where}: {r['name']} Running but its process is gone"
            q.adopted.add(uid)

    # 5. quota never over-committed
    usage: Counter = Counter()
    for r in rows.values():
        if r["state"] in LIVE:
            cq = r["admission"]["clusterQueue"]
            for psa in r["admission"]["podSetAssignments"]:
                for res, flavor in psa["flavors"].items():
                    usage[(cq, flavor, res)] += int(psa["resourceUsage"][res])
    for k, used in usage.items():
        assert used <= NOMINAL[k] + BORROWING_LIMIT.get(k, NOMINAL[k] * 100), (where, k, used)
    cohort: Counter = Counter()
    for (cq, flavor, res), used in usage.items():
        cohort[(flavor, res)] += used
    for (flavor, res), used in cohort.items():
        assert used <= sum(v for (c, f, r), v in NOMINAL.items() if (f, r) == (flavor, res)), (where, flavor, used)


def drain_and_check_final(q: Queue, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        active = q.server.request("GET", "workloads", params={"state": ",".join(ACTIVE)}).json()["items"]
        if not active:
            break
        assert time.monotonic() < deadline, f"not drained: {[(w['name'], w['state']) for w in active]}"
        time.sleep(0.2)
    check_invariants(q, "final")
    rows, intervals = ledger_rows(q)
    assert not live_job_processes(q)
    for uid, r in rows.items():
        lines = (q.marks / uid).read_text().splitlines() if (q.marks / uid).exists() else []
        if r["state"] == "Cancelled":
            assert uid in q.cancelled and len(lines) <= 1, (r["name"], lines)
        else:
            assert (r["state"], r["exit_code"]) == ("Succeeded", 0), f"{r['name']}: {r['state']} {r['message']}"
            # (a job run again after its preemption finds its mark and ends before writing one:
            # see quota_commit_scenario)
            assert len(lines) == 1, f"{r['name']} ran {len(lines)} times: {lines}"
        assert all(iv["end"] is not None for iv in intervals[uid])
    assert q.adopted <= set(rows)
    view = q.server.request("GET", "inventory").json()
    assert all(s["free"] == s["total"] for s in view["summary"]), view["summary"]


@pytest.mark.parametrize("seed", CRASH_SEEDS)
def test_kill9_during_bursts_and_drains_loses_nothing(tmp_path, launcher, seed):
    _kill9_trials(Queue(tmp_path, launcher, random.Random(seed)), seed)


def test_kill9_during_bursts_and_drains_loses_nothing_postgresql(tmp_path, launcher, postgres_url):
    """The same kills on a real PostgreSQL server (issue 16: crash trials on PostgreSQL)."""
    _kill9_trials(Queue(tmp_path, launcher, random.Random(CRASH_SEEDS[0]), db_url=postgres_url), CRASH_SEEDS[0])


def _kill9_trials(q: Queue, seed: int) -> None:
    watch = DeviceWatch(q.job_env).start()  # the live processes' devices, all along (tests/liveprocs.py)
    try:
        for trial in range(TRIALS):
            kind = (burst_then_kill, drain_then_kill)[(trial + seed) % 2]
            kind(q)
            check_invariants(q, f"seed {seed} trial {trial} ({kind.__name__})")
            watch.check(f"seed {seed} trial {trial} ({kind.__name__})")
        assert q.acked, "no submission was acknowledged at all"
        drain_and_check_final(q)
        assert q.adopted, "no running job was ever adopted after a restart"
        watch.stop()
        assert watch.runs_seen, "the device watch saw no job process"
    except BaseException:
        print(q.server.log_tail(80))
        raise
    finally:
        watch._stop.set()
        q.server.stop()


# -- kills at chosen points inside the group commit (GPUQUEUE_FAILPOINT) ------------------------------
#
# The server itself SIGKILLs at the Nth group commit (ledger/group_commit.py): "before" (the batch
# taken from the queue, nothing of it written: its requests are outstanding) or "after" (committed
# and fsynced, nothing answered: durable but unacknowledged, the case the group commit exists
# for), while 8 clients keep submissions outstanding. Then the server restarts unarmed, and:
# every acknowledged submission is there exactly once; nothing is there that no client sent;
# after an "after" kill at least one row is committed-but-unacknowledged; a client retrying each
# unanswered submission with its own name gets 409 exactly when it was committed (never a second
# workload); quotas are never over-committed (check_invariants); at the end every workload ran once.

FAILPOINT_KILLS = [("before", 1), ("before", 4), ("after", 1), ("after", 3), ("after", 7)]
MIN_MID_REQUEST_KILLS = len(FAILPOINT_KILLS)  # every armed kill must land with requests outstanding


class FailpointRound:
    """What the clients saw during one armed server's life."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent: dict[str, dict] = {}  # name -> request, every request sent
        self.unanswered: dict[str, dict] = {}  # name -> request: sent, the connection died before the answer
        self.refused = 0  # not sent: the server was already gone


def _submit_until_dead(q: Queue, rnd: FailpointRound, stop: threading.Event) -> None:
    with requests.Session() as session:
        while not stop.is_set():
            req = q.job()
            with rnd.lock:
                rnd.sent[req["name"]] = req
            try:
                r = q.server.request("POST", "workloads", session, json=req, timeout=30)
            except requests.ConnectionError as exc:
                with rnd.lock:
                    if "refused" in str(exc).lower():
                        del rnd.sent[req["name"]]
                        rnd.refused += 1
                    else:  # reset / aborted / remote disconnected: it was in flight at the kill
                        rnd.unanswered[req["name"]] = req
                return
            if r.status_code != 201:
                raise AssertionError((r.status_code, r.text))
            wl = r.json()
            with q.lock:
                assert wl["uid"] not in q.acked
                q.acked[wl["uid"]] = f"{wl['namespace']}/{wl['name']}"


def failpoint_kill(q: Queue, point: str, nth: int) -> dict:
    """One armed server's life and death (see above); returns the round's counts."""
    q.server.stop()
    base_env = q.setup.env
    q.setup.env = lambda: {**base_env(), "GPUQUEUE_FAILPOINT": f"group-commit:{point}:{nth}"}
    try:
        q.server = q.launcher.start(q.setup)
    finally:
        q.setup.env = base_env
    rnd, stop = FailpointRound(), threading.Event()
    errors: list[BaseException] = []

    def run():
        try:
            _submit_until_dead(q, rnd, stop)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while q.server.alive():
        assert time.monotonic() < deadline, f"failpoint {point}:{nth} never fired\n{q.server.log_tail()}"
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(40)
        assert not t.is_alive(), f"failpoint {point}:{nth}: a client thread did not end within 40 s"
    if errors:
        raise errors[0]
    q.server.kill9()  # reap it
    assert f"failpoint group-commit:{point}:{nth}" in q.server.log_path.read_text(errors="replace")
    q.server = q.launcher.start(q.setup)  # unarmed

    rows, _ = ledger_rows(q)
    by_name = {f"{r['namespace']}/{r['name']}": uid for uid, r in rows.items()}
    acked_names = {q.acked[u].split("/", 1)[1] for u in q.acked}
    sent_names = {n for n in rnd.sent}
    # nothing in the ledger that no client sent (this round's names are new)
    round_rows = {n for key, n in ((k, k.split("/", 1)[1]) for k in by_name) if n in sent_names}
    committed_unacked = sorted(n for n in round_rows if n not in acked_names)
    assert set(committed_unacked) <= set(rnd.unanswered), (point, nth, committed_unacked, sorted(rnd.unanswered))
    if point == "after":  # the killed batch was committed, none of it answered
        assert committed_unacked, f"after:{nth}: no committed-but-unacknowledged row ({len(rnd.unanswered)} unanswered)"
    # a client retries what got no answer, under the same name: 409 when it was committed
    with requests.Session() as session:
        for name, req in sorted(rnd.unanswered.items()):
            r = q.server.request("POST", "workloads", session, json=req, timeout=30)
            if name in committed_unacked:
                assert r.status_code == 409, (name, r.status_code, r.text)
            else:
                assert r.status_code == 201, (name, r.status_code, r.text)
                wl = r.json()
                q.acked[wl["uid"]] = f"{wl['namespace']}/{wl['name']}"
    for name in committed_unacked:
        key = f"{rnd.sent[name]['localQueue'].split('/')[0]}/{name}"
        q.acked[by_name[key]] = key  # the retry's 409 told the client it is there
    return {"unanswered": len(rnd.unanswered), "committedUnacked": len(committed_unacked),
            "acked": sum(1 for n in sent_names if n in acked_names), "refused": rnd.refused}


def _failpoint_trials(q: Queue) -> None:
    mid_request = 0
    lines = []
    for point, nth in FAILPOINT_KILLS:
        counts = failpoint_kill(q, point, nth)
        mid_request += counts["unanswered"] > 0
        lines.append(f"  {point}:{nth}: {counts}")
        check_invariants(q, f"failpoint {point}:{nth}")
    print(f"failpoint kills: {len(FAILPOINT_KILLS)}, mid-request: {mid_request}\n" + "\n".join(lines))
    assert mid_request >= MIN_MID_REQUEST_KILLS, lines
    drain_and_check_final(q)


def test_failpoint_kills_inside_the_group_commit_sqlite(tmp_path, launcher):
    q = Queue(tmp_path, launcher, random.Random(5))
    try:
        _failpoint_trials(q)
    except BaseException:
        print(q.server.log_tail(80))
        raise
    finally:
        q.server.stop()


def test_failpoint_kills_inside_the_group_commit_postgresql(tmp_path, launcher, postgres_url):
    """The same on a real PostgreSQL server (issue 16: crash trials on PostgreSQL)."""
    q = Queue(tmp_path, launcher, random.Random(6), db_url=postgres_url)
    try:
        _failpoint_trials(q)
    except BaseException:
        print(q.server.log_tail(80))
        raise
    finally:
        q.server.stop()


# -- the same windows, hit exactly: a QueueService that "dies" at a chosen point ----------------------
#
# The server's death is simulated by abandoning a QueueService (no more ticks, its ledger closed)
# at a precise moment and building a new one on the same ledger and state folder, as the restarted
# server does. Its jobs are real processes that outlive it, as they outlive a killed server.

ONE_GPU = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpu-a}
spec: {nodeLabels: {model: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: gpu-a
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: one}
spec: {clusterQueue: cq}
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

ONE_GPU_INVENTORY = """
nodes:
- name: box
  labels: {model: a}
  gpus:
  - {index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, product: Model A, memoryMiB: 1024}
"""


class Crash(BaseException):
    """The simulated death of the server (BaseException: nothing in the service catches it)."""


@pytest.fixture
def make(tmp_path):
    from servicetools import service_factory, stop_jobs

    (tmp_path / "marks").mkdir()
    build = service_factory(tmp_path, ONE_GPU, ONE_GPU_INVENTORY, default_local_queue="one/q",
                            stop_grace_seconds=1.0)
    build.marks = tmp_path / "marks"
    yield build
    stop_jobs(build.services)  # kill what is left (a crashed service's jobs were adopted by the next)


def marked_job(marks: Path, name: str, seconds: float, *, ignore_term: bool = False, once: bool = False,
               priority: str = "low") -> dict:
    """A job that appends its pid to marks/<name>, then sleeps (``once``: only the first time it
    runs; later runs exit at once). ``ignore_term``: it ignores SIGTERM (a job checkpointing)."""
    script = f'echo $$ >> "{marks / name}"; '
    if once:
        script = f'[ -e "{marks / name}" ] && exit 0; ' + script
    if ignore_term:
        script = "trap '' TERM; " + script
    return {"name": name, "command": ["sh", "-c", script + f"exec sleep {seconds}"], "gpus": 1,
            "priorityClass": priority, "maxRuntime": "2m", "env": {"MARKS": str(marks)}}


def tick_until(svc, pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        svc.tick()
        time.sleep(0.05)


def wl_state(svc, name):
    return svc.get_workload("one", name)["state"]


def runs(marks: Path, name: str) -> list[str]:
    return (marks / name).read_text().split() if (marks / name).exists() else []


@pytest.mark.parametrize("ends_before_restart", [False, True])
def test_killed_between_starting_a_job_and_recording_it(make, ends_before_restart):
    """The job was started but its run never reached the ledger (Admitted, no run): the restarted
    service takes that run (adopts it, or records its outcome) instead of starting it again."""
    a = make()
    a.submit(marked_job(make.marks, "j", 0.2 if ends_before_restart else 2.0), user="alice")
    real_update = a.ledger.update_workload

    def dies_when_recording_the_run(uid, **fields):
        if fields.get("run"):
            raise Crash()
        return real_update(uid, **fields)

    a.ledger.update_workload = dies_when_recording_the_run
    with pytest.raises(Crash):
        for _ in range(50):
            a.tick()
            time.sleep(0.02)
    a.ledger.close()
    row = a.ledger.__class__(str(a.ledger.url)).find_workload("one", "j")
    assert (row["state"], row["run"]) == ("Admitted", None)  # what the killed server left
    deadline = time.monotonic() + 10
    while not runs(make.marks, "j") or ends_before_restart and not list((make.marks.parent / "data").rglob("*.exit")):
        assert time.monotonic() < deadline
        time.sleep(0.05)

    b = make()
    wl = b.get_workload("one", "j")
    if ends_before_restart:
        assert (wl["state"], wl["exitCode"]) == ("Succeeded", 0), wl
    else:
        assert wl["state"] == "Running" and wl["visibleDevices"] == "0"
        assert b.ledger.find_workload("one", "j")["run"]["pid"] > 0
        tick_until(b, lambda: wl_state(b, "j") == "Succeeded")
    assert len(runs(make.marks, "j")) == 1  # it ran once
    ivs = b.ledger.intervals(wl["uid"])
    assert len(ivs) == 1 and ivs[0]["end"] == pytest.approx(b.get_workload("one", "j")["finishedAt"])


def test_cancelled_job_still_stopping_keeps_its_gpu_across_a_restart(make):
    """Cancelled (SIGTERM sent; the job ignores it), then the server dies within the grace period:
    the restarted service holds the job's GPU until the process is gone (SIGKILL after the grace),
    instead of giving it to the next job while the cancelled one still runs on it."""
    a = make()
    a.submit(marked_job(make.marks, "stubborn", 30, ignore_term=True), user="alice")
    tick_until(a, lambda: wl_state(a, "stubborn") == "Running" and runs(make.marks, "stubborn"))
    pid = int(runs(make.marks, "stubborn")[0])
    assert a.cancel("one", "stubborn", user="alice")["state"] == "Cancelled"
    a.ledger.close()  # dies within the grace period: the job ignored SIGTERM and still runs

    b = make()
    b.submit(marked_job(make.marks, "next", 0.1), user="alice")
    for _ in range(5):
        b.tick()
    assert _start_ticks(pid) is not None, "the cancelled job should still be running"
    assert wl_state(b, "next") == "Pending"  # the GPU is still in use
    assert b.inventory_view()["nodes"][0]["gpus"][0]["assignedTo"] == "one/stubborn"
    tick_until(b, lambda: wl_state(b, "next") == "Succeeded")
    assert _start_ticks(pid) is None  # killed after the grace period, before "next" started
    assert b.get_workload("one", "stubborn")["state"] == "Cancelled"
    assert b.ledger.open_intervals() == []


@pytest.mark.parametrize("ignore_term", [False, True])
def test_preempted_job_is_requeued_not_failed_across_a_restart(make, ignore_term):
    """A low-priority job is preempted (SIGTERM sent) and the server dies before it sees the job
    end: after the restart the job goes back to the queue (evictions 1) and later runs to
    success, instead of being marked Failed by its SIGTERM exit code. With ``ignore_term`` it is
    still running at the restart: the stop is finished first (SIGKILL after the grace)."""
    a = make()
    a.submit(marked_job(make.marks, "low", 30, ignore_term=ignore_term, once=True), user="alice")
    tick_until(a, lambda: wl_state(a, "low") == "Running" and runs(make.marks, "low"))
    pid = int(runs(make.marks, "low")[0])
    a.submit(marked_job(make.marks, "high", 0.5, priority="high"), user="alice")
    tick_until(a, lambda: "Preempted" in (a.get_workload("one", "low")["message"] or ""))
    a.ledger.close()  # dies before it saw the victim end
    if not ignore_term:
        deadline = time.monotonic() + 10
        while _start_ticks(pid) is not None:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    b = make()
    tick_until(b, lambda: wl_state(b, "high") == "Succeeded")
    tick_until(b, lambda: wl_state(b, "low") == "Succeeded")
    low = b.get_workload("one", "low")
    assert low["evictions"] == 1 and low["exitCode"] == 0, low
    assert len(runs(make.marks, "low")) == 1  # the second run found its marker and exited at once
    ivs = b.ledger.intervals(low["uid"])
    assert len(ivs) == 2 and all(iv["end"] is not None for iv in ivs)
    assert b.ledger.open_intervals() == []


# -- a preemptor starts only after its victims' processes are gone (live processes, liveprocs.py) -----
#
# The ClusterQueue's quota (2 GPUs) is larger than the node (1 GPU): the high-priority job's quota
# fits, its pod does not, so it preempts the low one for its device (placement preemption). The
# victim ignores SIGTERM (a job checkpointing), so it runs on for the whole grace period after it
# was told to stop: its device must stay its own until its process is gone, also when the server
# dies during the preemption. A DeviceWatch reads every live job process's CUDA_VISIBLE_DEVICES
# all along; the test also checks that the victim's process was gone when the preemptor's started.

@pytest.fixture
def make_by_device(tmp_path):
    from servicetools import service_factory, stop_jobs

    (tmp_path / "marks").mkdir()
    build = service_factory(tmp_path, ONE_GPU.replace("nominalQuota: 1", "nominalQuota: 2"), ONE_GPU_INVENTORY,
                            default_local_queue="one/q", stop_grace_seconds=1.5)
    build.marks = tmp_path / "marks"
    yield build
    stop_jobs(build.services)


@pytest.mark.parametrize("restart", [False, True])
def test_preemptor_starts_only_after_its_victims_process_is_gone(make_by_device, restart):
    make, marks = make_by_device, make_by_device.marks
    with DeviceWatch({"MARKS": str(marks)}, interval=0.05) as watch:
        a = make()
        a.submit(marked_job(marks, "low", 30, ignore_term=True, once=True), user="alice")
        tick_until(a, lambda: wl_state(a, "low") == "Running" and runs(marks, "low"))
        victim = int(runs(marks, "low")[0])
        a.submit(marked_job(marks, "high", 2, priority="high"), user="alice")
        tick_until(a, lambda: "Preempted" in (a.get_workload("one", "low")["message"] or ""))
        assert _start_ticks(victim) is not None, "the victim should still be stopping (it ignores SIGTERM)"
        b = a
        if restart:
            a.ledger.close()  # the server dies during the preemption
            b = make()
        victim_gone_first = []

        def high_ran():
            b.tick()
            if runs(marks, "high") and not victim_gone_first:
                victim_gone_first.append(_start_ticks(victim) is None)
                watch.look()  # high runs 2 s: seen, whatever the load does to the watch's thread
            return wl_state(b, "high") == "Succeeded"

        tick_until(b, high_ran)
        watch.check("preemption")
        assert victim_gone_first == [True], "high started on GPU 0 while the preempted low job's process still ran"
        tick_until(b, lambda: wl_state(b, "low") == "Succeeded")
        assert b.get_workload("one", "low")["evictions"] == 1
    assert len(watch.runs_seen) >= 2 and watch.looks > 10, (watch.runs_seen, watch.looks)  # low and high at least
