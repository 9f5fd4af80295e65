"""Crash consistency, continued (tests/test_crash.py has the queue, its checks and the kills
during bursts and drains; this file is apart so that pytest-xdist's ``--dist loadfile`` can run it
beside that one):

- kills inside every commit that changes quota or money (``GPUQUEUE_FAILPOINT=<commit>:…``,
  ledger/failpoints.py), counted per commit, on SQLite and PostgreSQL;
- kill -9 of the server during preemptions, with the devices of the live job processes watched
  all along (tests/liveprocs.py).
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
import requests

import liveprocs
from liveprocs import DeviceWatch
from servertools import Launcher, ServerSetup
from test_crash import (
    ACTIVE,
    CLUSTER,
    ONE_GPU,
    ONE_GPU_INVENTORY,
    Queue,
    _start_ticks,
    check_invariants,
    drain_and_check_final,
    ledger_rows,
    runs,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def launcher():
    la = Launcher(zygote=True)
    yield la
    la.close()


# -- kills inside every commit that changes quota or money (ledger/failpoints.py) --------------------
#
# GPUQUEUE_FAILPOINT=<commit>:<before|after>:<N> arms the server to SIGKILL itself at the Nth
# admission, finish, cancel, requeue (a preempted job back to the queue) or preemption (the
# eviction recorded before the victim is stopped) commit. One scenario hits each of them: short
# jobs (admitted, finished), a long low-priority job preempted by a high one in the same
# ClusterQueue (preempt, then requeue once it is gone), and a long job cancelled by its owner.
# The server restarts unarmed; then check_invariants (every acknowledged submission once, no device
# twice in the ledger, the API or the live processes, intervals closed exactly when the job ended,
# quotas never over-committed), and every cancel the client saw answered is Cancelled in the ledger
# (acknowledged => written); a cancel killed at its commit was never answered. Every armed kill
# must land: kills are counted per commit and each count asserted > 0.

QUOTA_COMMIT_KILLS = [("admit", "before", 1), ("admit", "after", 2), ("finish", "before", 1),
                      ("finish", "after", 2), ("cancel", "before", 1), ("cancel", "after", 1),
                      ("preempt", "before", 1), ("preempt", "after", 1), ("requeue", "before", 1),
                      ("requeue", "after", 1)]

# test_crash's CLUSTER without the cohort (no borrowing: the high job must preempt), preempting
QUOTA_CLUSTER = CLUSTER.replace("  cohort: lab\n", "  preemption: {withinClusterQueue: LowerPriority}\n").replace(
    ", borrowingLimit: 1", "") + """
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


class ServerDied(Exception):
    pass


def quota_commit_scenario(q: Queue, tag: str, cancels: dict) -> None:
    """Drive the server through every commit kind (see above) until it dies (ServerDied) or the
    scenario ends. ``cancels``: name -> "answered" / "unanswered", the cancels the client sent."""
    session = requests.Session()

    def call(method, path, **kw):
        try:
            return q.server.request(method, path, session, timeout=30, **kw)
        except requests.RequestException as exc:
            raise ServerDied(str(exc)) from exc

    def submit(name, seconds, queue="one/q", priority="low", gpus=1):
        # a job run again after its preemption finds its mark and ends at once
        req = {"name": name, "localQueue": queue, "priorityClass": priority, "gpus": gpus, "maxRuntime": "2m",
               "env": {"MARKS": str(q.marks)},
               "command": ["sh", "-c", '[ -s "$MARKS/$GPUQUEUE_WORKLOAD_UID" ] && exit 0; '
                           'echo "$$ $CUDA_VISIBLE_DEVICES" >> "$MARKS/$GPUQUEUE_WORKLOAD_UID"; '
                           f"exec sleep {seconds}"]}
        r = call("POST", "workloads", json=req)
        assert r.status_code == 201, r.text
        wl = r.json()
        with q.lock:
            q.acked[wl["uid"]] = f"{wl['namespace']}/{wl['name']}"

    def state(ns, name):
        return call("GET", f"workloads/{ns}/{name}").json()["state"]

    def wait(pred, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    try:
        for i in range(2):  # admissions, then finishes
            submit(f"{tag}-short-{i}", "0.2")
        wait(lambda: all(state("one", f"{tag}-short-{i}") == "Succeeded" for i in range(2)), "short jobs")
        submit(f"{tag}-low", "30", queue="two/q", gpus=2)  # all of cq-two's quota
        wait(lambda: state("two", f"{tag}-low") == "Running", "low job")
        submit(f"{tag}-high", "0.2", queue="two/q", priority="high")  # preempts it
        wait(lambda: state("two", f"{tag}-high") == "Succeeded", "preemptor")
        submit(f"{tag}-long", "30")
        wait(lambda: state("one", f"{tag}-long") == "Running", "long job")
        cancels[f"one/{tag}-long"] = "unanswered"
        r = call("DELETE", f"workloads/one/{tag}-long")
        assert r.status_code == 200 and r.json()["state"] == "Cancelled", r.text
        cancels[f"one/{tag}-long"] = "answered"
    finally:
        session.close()


def quota_commit_kill(q: Queue, commit: str, point: str, nth: int, trial: int) -> dict:
    """One armed server's life: the scenario until the failpoint kills it; restart unarmed."""
    q.server.stop()
    base_env = q.setup.env
    q.setup.env = lambda: {**base_env(), "GPUQUEUE_FAILPOINT": f"{commit}:{point}:{nth}"}
    try:
        q.server = q.launcher.start(q.setup)
    finally:
        q.setup.env = base_env
    cancels: dict[str, str] = {}
    try:
        quota_commit_scenario(q, f"t{trial}", cancels)
        died = False
    except ServerDied:
        died = True
    deadline = time.monotonic() + 30
    while q.server.alive():  # the scenario may end just before the kill (e.g. after a finish)
        assert time.monotonic() < deadline, f"failpoint {commit}:{point}:{nth} never fired\n{q.server.log_tail()}"
        time.sleep(0.02)
    q.server.kill9()  # reap it
    fired = f"failpoint {commit}:{point}:{nth}" in q.server.log_path.read_text(errors="replace")
    assert fired, f"{commit}:{point}:{nth}: the server died, not at the failpoint\n{q.server.log_tail()}"
    q.server = q.launcher.start(q.setup)  # unarmed
    check_invariants(q, f"failpoint {commit}:{point}:{nth}")
    rows, _ = ledger_rows(q)
    by_key = {f"{r['namespace']}/{r['name']}": r for r in rows.values()}
    for key, seen in cancels.items():
        if seen == "answered":  # acknowledged => written
            assert by_key[key]["state"] == "Cancelled", (commit, point, key, by_key[key]["state"])
    if commit == "cancel":  # the kill was inside the cancel's request: never answered
        assert list(cancels.values()) == ["unanswered"], (point, cancels)
        cancelled = [key for key in cancels if by_key[key]["state"] == "Cancelled"]
        assert bool(cancelled) == (point == "after"), (point, cancelled)
    # what is left of the scenario is cancelled, so that the next trial starts from an idle queue
    # (no job ending while the server is down: the next armed server's restore commits nothing)
    for r in q.server.request("GET", "workloads", params={"state": ",".join(ACTIVE)}).json()["items"]:
        d = q.server.request("DELETE", f"workloads/{r['namespace']}/{r['name']}")
        assert d.status_code == 200, d.text
        if d.json()["state"] == "Cancelled":
            q.cancelled.add(r["uid"])
    for key, seen in cancels.items():
        if by_key[key]["state"] == "Cancelled":
            q.cancelled.add(by_key[key]["uid"])
    deadline = time.monotonic() + 60
    while liveprocs.job_processes(q.job_env) or q.server.request(
            "GET", "workloads", params={"state": ",".join(ACTIVE)}).json()["items"]:
        assert time.monotonic() < deadline, f"{commit}:{point}:{nth}: the queue did not become idle"
        time.sleep(0.05)
    check_invariants(q, f"failpoint {commit}:{point}:{nth}, idle")
    return {"died": died, "fired": fired}


def _quota_commit_trials(q: Queue, kills: list) -> None:
    landed: Counter = Counter()
    for trial, (commit, point, nth) in enumerate(kills):
        landed[commit] += quota_commit_kill(q, commit, point, nth, trial)["fired"]
    print(f"kills per commit: {dict(landed)}")
    for commit in {c for c, _, _ in kills}:
        assert landed[commit] > 0, f"no kill landed in the {commit} commit"
    drain_and_check_final(q)


def test_failpoint_kills_in_every_quota_commit_sqlite(tmp_path, launcher):
    q = Queue(tmp_path, launcher, random.Random(7), cluster=QUOTA_CLUSTER)
    try:
        _quota_commit_trials(q, QUOTA_COMMIT_KILLS)
    except BaseException:
        print(q.server.log_tail(80))
        raise
    finally:
        q.server.stop()


def test_failpoint_kills_in_every_quota_commit_postgresql(tmp_path, launcher, postgres_url):
    """The same on PostgreSQL, one point per commit (the other point on SQLite's run only)."""
    q = Queue(tmp_path, launcher, random.Random(8), db_url=postgres_url, cluster=QUOTA_CLUSTER)
    try:
        _quota_commit_trials(q, QUOTA_COMMIT_KILLS[1::2])
    except BaseException:
        print(q.server.log_tail(80))
        raise
    finally:
        q.server.stop()


PREEMPTION_ROUNDS = 4


def test_kill9_during_preemptions_never_gives_a_device_twice(tmp_path, launcher):
    """The same on a real server killed with SIGKILL at a random moment of each preemption (before
    the victim is chosen, while it stops, or after the preemptor started): a DeviceWatch reads the
    live job processes all along; every round, the preemptor and the victim (run again) succeed."""
    rng = random.Random(41)
    marks = tmp_path / "marks"
    marks.mkdir()
    setup = ServerSetup(tmp_path / "q", ONE_GPU.replace("nominalQuota: 1", "nominalQuota: 2"), ONE_GPU_INVENTORY)
    server = launcher.start(setup)
    env = {"MARKS": str(marks)}

    def job(name, priority, script):
        return {"name": name, "localQueue": "one/q", "priorityClass": priority, "gpus": 1, "maxRuntime": "2m",
                "env": env, "command": ["sh", "-c", f'echo $$ >> "$MARKS/{name}"; ' + script]}

    def state(name):
        return server.request("GET", f"workloads/one/{name}").json()["state"]

    def wait_for(pred, what, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() >= deadline:  # what the server holds, to tell a slow machine from a loss
                held = server.request("GET", "workloads").json().get("items", [])
                view = [(w["name"], w["state"], w.get("reason"), w.get("message")) for w in held]
                raise AssertionError(f"{what}\n{view}\nruns: { {p.name: p.read_text().split() for p in marks.iterdir()} }\n"
                                     f"{server.log_tail()}")
            time.sleep(0.05)

    kills_while_stopping = 0
    try:
        with DeviceWatch(env, interval=0.05) as watch:
            for i in range(PREEMPTION_ROUNDS):
                low, high = f"low-{i}", f"high-{i}"
                # the victim checkpoints for 1.5 s when told to stop (SIGTERM), then exits; run
                # again after its preemption, it finds its mark and ends at once
                r = server.request("POST", "workloads", json=job(low, "low", (
                    f'[ "$(wc -l < "$MARKS/{low}")" -gt 1 ] && exit 0; '
                    "trap 'sleep 1.5; exit 0' TERM; sleep 60 & wait")))
                assert r.status_code == 201, r.text
                wait_for(lambda: state(low) == "Running" and runs(marks, low), f"{low} never ran")
                victim = int(runs(marks, low)[0])
                r = server.request("POST", "workloads", json=job(high, "high", "exec sleep 1.5"))
                assert r.status_code == 201, r.text
                time.sleep(rng.uniform(0.0, 2.0))
                kills_while_stopping += _start_ticks(victim) is not None and not runs(marks, high)  # noqa: E501
                server.kill9()
                server = launcher.start(setup)
                looked: list = []

                def high_succeeded() -> bool:
                    if not looked and runs(marks, high):  # a look while it runs, whatever the load
                        watch.look()  # does to the watch's thread (37 looks in a whole test, once)
                        looked.append(True)
                    return state(high) == "Succeeded"

                wait_for(high_succeeded, f"{high} never succeeded")
                wait_for(lambda: state(low) == "Succeeded", f"{low} never succeeded after its preemption")
                assert server.request("GET", f"workloads/one/{low}").json()["evictions"] == 1
                watch.check(f"round {i}")
        assert len(watch.runs_seen) >= 2 * PREEMPTION_ROUNDS, watch.runs_seen
        print(f"kills while the victim was stopping: {kills_while_stopping} of {PREEMPTION_ROUNDS}")
        assert kills_while_stopping > 0, "no kill landed while a victim was stopping"
    except BaseException:
        print(server.log_tail(80))
        raise
    finally:
        server.stop()


def test_failpoint_values_are_parsed_or_refused():
    from jupyter_gpuqueue.ledger.failpoints import parse

    assert parse(None) is None and parse("") is None
    assert parse("group-commit:after:3") is None  # the group commit's own (ledger/group_commit.py)
    assert parse("finish:after:2") == ("finish", "after", 2)
    assert parse("cancel:before") == ("cancel", "before", 1)
    for bad in ("finish:during", "admit:after:0", "requeue:after:x", "preempt"):
        with pytest.raises(ValueError, match="GPUQUEUE_FAILPOINT"):
            parse(bad)
