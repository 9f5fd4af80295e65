"""The group commit of submissions (ledger/group_commit.py) and the plumbing of
``jupyter gpuqueue bench`` at a tiny scale. Correctness only: no timing is asserted anywhere
(performance figures live in BENCHMARKS.md)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from jupyter_gpuqueue.cli import run
from jupyter_gpuqueue.errors import Conflict, ValidationError
from jupyter_gpuqueue.ledger import Ledger
from jupyter_gpuqueue.ledger.group_commit import GroupCommitter


def _row(i: int, name: str | None = None, ns: str = "team-a") -> dict:
    return {"uid": f"uid-{i:05d}", "namespace": ns, "name": name or f"job-{i:05d}", "owner": "alice",
            "local_queue": "q", "state": "Pending", "spec": {"command": ["sleep", "1"], "n": i},
            "created_at": 1_700_000_000.0 + i}


def _uids_on_disk(path: str) -> set:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT uid FROM workloads")}
    finally:
        con.close()


# -- group commit --------------------------------------------------------------------------------


def test_concurrent_submissions_share_a_commit_and_each_is_durable_when_acknowledged(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    ledger = Ledger(path)
    gc = GroupCommitter(ledger)
    gc.start()
    # Hold the ledger's write lock (as a long transaction of the service's loop would) while 20
    # submissions arrive: the writer thread can take at most the first before it blocks, so the
    # others are queued and must go out together in the next commit.
    with ledger._write_lock:
        futures = [gc.submit([_row(i)]) for i in range(20)]
        time.sleep(0.2)
        assert not any(f.done() for f in futures)  # nothing acknowledged before its commit
    for f in futures:
        f.result(timeout=30)
        # acknowledged => durable: another connection sees it at once
    assert _uids_on_disk(path) == {f"uid-{i:05d}" for i in range(20)}
    assert gc.groups == 20 and gc.commits <= 2 and gc.largest_batch >= 10
    gc.close()
    ledger.close()


def test_a_failing_group_fails_alone(tmp_path):
    ledger = Ledger(str(tmp_path / "ledger.sqlite"))
    ledger.add_workload(_row(0, name="taken"))
    gc = GroupCommitter(ledger)
    with ledger._write_lock:  # one batch
        ok1 = gc.submit([_row(1)])
        clash = gc.submit([_row(2, name="taken")])
        bad = gc.submit([{**_row(3), "state": "Bogus"}])
        both = gc.submit([_row(4), _row(5, name="job-00004")])  # one group: all or nothing
        ok2 = gc.submit([_row(6), _row(7)])
    ok1.result(30)
    ok2.result(30)
    with pytest.raises(Conflict) as e:
        clash.result(30)
    assert e.value.field == "name"
    with pytest.raises(ValidationError) as e:
        bad.result(30)
    assert e.value.field == "state"
    with pytest.raises(Conflict):
        both.result(30)
    names = {r["name"] for r in ledger.list_workloads()}
    assert names == {"taken", "job-00001", "job-00006", "job-00007"}
    gc.close()
    with pytest.raises(RuntimeError):
        gc.submit([_row(8)]).result(1)
    ledger.close()


def test_close_commits_what_is_queued(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    ledger = Ledger(path)
    gc = GroupCommitter(ledger)
    gc.start()
    futures = [gc.submit([_row(i)]) for i in range(30)]
    gc.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert len(_uids_on_disk(path)) == 30
    ledger.close()


_WRITER = textwrap.dedent("""
    import sys, threading
    from jupyter_gpuqueue.ledger import Ledger
    from jupyter_gpuqueue.ledger.group_commit import GroupCommitter
    ledger = Ledger(sys.argv[1])
    gc = GroupCommitter(ledger)
    lock = threading.Lock()
    def ack(i):
        def done(f):
            if f.exception() is None:
                with lock:
                    sys.stdout.write(f"ACK uid-{i:05d}\\n"); sys.stdout.flush()
        return done
    def client(k):
        for i in range(k, 100000, 4):
            rows = [{"uid": f"uid-{i:05d}", "namespace": "ns", "name": f"job-{i:05d}", "owner": "o",
                     "local_queue": "q", "state": "Pending", "spec": {"i": i}, "created_at": float(i)}]
            gc.submit(rows).add_done_callback(ack(i))
            if i % 64 == k:
                import time; time.sleep(0.001)
    for k in range(4):
        threading.Thread(target=client, args=(k,), daemon=True).start()
    threading.Event().wait()
""")


def test_kill_9_loses_no_acknowledged_submission(tmp_path):
    """A process submitting through the group commit from 4 threads prints an ACK line once each
    commit has returned; it is killed with SIGKILL mid-stream. Every acknowledged uid must be in
    the ledger afterwards (SQLite WAL, synchronous=FULL)."""
    path = str(tmp_path / "ledger.sqlite")
    Ledger(path).close()  # create the tables first
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, path], stdout=subprocess.PIPE, text=True)
    acked: list[str] = []

    def read():
        for line in proc.stdout:
            if line.startswith("ACK "):
                acked.append(line.split()[1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while len(acked) < 300 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(10)
    assert len(acked) >= 300, "the writer did not get going"
    on_disk = _uids_on_disk(path)
    lost = set(acked) - on_disk
    assert not lost, f"{len(lost)} acknowledged submissions lost"


# -- bench plumbing, tiny scale -----------------------------------------------------------------


def _bench(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = run(["bench", *argv], out=out, err=err, stdin=io.StringIO())
    return rc, out.getvalue() + err.getvalue()


def test_bench_submit_acknowledges_every_submission_exactly_once(tmp_path):
    res = tmp_path / "submit.json"
    rc, text = _bench("submit", "--n", "50", "--clients", "2", "--nodes", "2", "--json", str(res))
    assert rc == 0, text
    r = json.loads(res.read_text())
    assert r["acknowledged"] == 50 and r["distinctUids"] == 50 and r["ledgerRows"] == 50
    assert r["errorCount"] == 0
    assert r["ackedWithPosition"] + r["ackedAdmitted"] == 50  # every ack carried a position or an admission
    assert r["secondsUntilAllPlaced"] is not None
    for key in ("submissionsPerSecond", "ackLatencyP50Ms", "ackLatencyP99Ms", "serverCpuSeconds"):
        assert r[key] is not None
    assert "submissions" in text or "/s" in text


def test_bench_eta_runs_a_tiny_stream_and_reports_against_the_rate(tmp_path):
    """``bench eta`` (issue 35) at a tiny scale: every job ends (the cancelled ones Cancelled, the
    others Succeeded: they really slept), every figure is reported, and no estimate read lay
    outside its own range or in the past. No figure is checked against a target."""
    res = tmp_path / "eta.json"
    rc, text = _bench("eta", "--n", "8", "--time-scale", "0.15", "--mean-gap", "0.3", "--poll-interval", "0.5",
                      "--json", str(res))
    assert rc == 0, text
    r = json.loads(res.read_text())
    assert r["jobs"] == 8 and r["ended"] == 8 and r["errorCount"] == 0
    assert r["succeeded"] + r["cancelled"] == 8
    assert r["consistency"]["pointOutsideRange"] == 0 and r["consistency"]["inThePast"] == 0
    for key in ("coverageAtSubmission", "submission", "halfWait", "rangeCoverage", "cost"):
        assert key in r
    assert "at submission" in text


@pytest.mark.parametrize("borrowing", ["--borrowing", "--no-borrowing"])
def test_bench_drain_runs_every_job_to_success(tmp_path, borrowing):
    res = tmp_path / "drain.json"
    rc, text = _bench("drain", "--n", "20", "--nodes", "2", borrowing, "--json", str(res))
    assert rc == 0, text
    r = json.loads(res.read_text())
    assert r["succeeded"] == 20 and r["jobs"] == 20 and r["errorCount"] == 0
    assert r["peakGpus"] <= 16  # never more GPUs in use than the 2 x 8 that exist
    for key in ("makespan", "ideal", "gpuUtilisation", "jobStartsPerSecond", "overheadMean"):
        assert r[key] is not None and r[key] > 0
    assert set(r["waitByTeam"]) == {"team-a", "team-b", "team-c"}


def test_bench_drain_backlog_admits_nothing_until_the_release(tmp_path):
    """``bench drain --backlog``: the jobs wait in held ClusterQueues until every one is
    acknowledged, then an admin change releases them all at once."""
    res = tmp_path / "drain.json"
    rc, text = _bench("drain", "--n", "20", "--nodes", "2", "--backlog", "--json", str(res))
    assert rc == 0, text
    r = json.loads(res.read_text())
    assert r["backlog"] is True and r["succeeded"] == 20 and r["errorCount"] == 0
    assert r["admittedBeforeRelease"] == 0  # the hold held
    assert r["peakGpus"] <= 16
    assert "a backlog released at once" in text
    rc, text = _bench("drain", "--backlog", "--url", "http://127.0.0.1:9/", "--token", "x")
    assert rc == 2 and "--backlog" in text and "--url" in text


@pytest.mark.parametrize("borrowing", [False, True])
def test_bench_drain_without_borrowing_keeps_every_team_within_its_quota(borrowing):
    """Quotas of 8 GPUs per team on 24 GPUs (3 nodes of 8; the stream's largest job is 8): without a
    cohort no team ever holds more than its 8 (Slurm's GrpTRES cap), and with one the same jobs
    borrow beyond it, so the bound is one that borrowing breaks. The stream's default quotas
    (64 / 48 / 32) are all above the cluster and could not show it.

    The 20 jobs wait in held ClusterQueues until all are in (``backlog``), and the cluster has room
    for more than the quotas' first wave: team-a's first four jobs (13 GPUs) are then admitted in the
    first cycle, borrowing, whatever the machine's load. With jobs admitted as they trickle in, or on
    16 GPUs where the borrowing waits for the first jobs to end, whether anyone borrows depends on
    timing (CI once saw 7 / 8 / 7)."""
    from jupyter_gpuqueue.bench import stream
    from jupyter_gpuqueue.bench.drain import run_drain
    from jupyter_gpuqueue.bench.server import BenchServer

    quotas = {"team-a": 8, "team-b": 8, "team-c": 8}
    with BenchServer(config_yaml=stream.cluster_yaml(borrowing=borrowing, quotas=quotas, hold=True),
                     inventory_yaml=stream.inventory_yaml(3, 8)) as server:
        r = asyncio.run(run_drain(server, n=20, borrowing=borrowing, capacity=24, quotas=quotas, timeout=120,
                                  backlog=True))
    assert r["succeeded"] == 20 and r["errorCount"] == 0, r["errors"]
    assert r["quotas"] == quotas and r["peakGpus"] <= 24
    over = {team: peak for team, peak in r["peakGpusByTeam"].items() if peak > quotas[team]}
    if borrowing:
        assert over, f"no team borrowed beyond its quota: {r['peakGpusByTeam']}"
    else:
        assert not over, f"teams above their quota of 8 GPUs without borrowing: {over}"


def test_bench_panels_every_client_gets_every_event(tmp_path):
    res = tmp_path / "panels.json"
    rc, text = _bench("panels", "--clients", "3", "--n", "10", "--nodes", "2", "--json", str(res))
    assert rc == 0, text
    r = json.loads(res.read_text())
    assert r["drain"]["succeeded"] == 10
    assert r["streamErrorCount"] == 0 and r["queryErrors"] == 0
    assert r["workloadEventsPerClientMin"] == r["workloadEventsPerClientMax"] > 0


def test_stream_matches_slurm_reference():
    from jupyter_gpuqueue.bench import stream

    jobs = stream.job_stream(2000)
    assert round(stream.ideal_makespan(jobs, borrowing=True, capacity=128), 1) == 69.7
    assert round(stream.ideal_makespan(jobs, borrowing=False, capacity=128), 1) == 97.2
    assert jobs[0].team in stream.TEAMS and all(1 <= j.gpus <= 8 for j in jobs)


def test_generated_name_clash_with_a_finished_workload_is_drawn_again(tmp_path, monkeypatch):
    """With the group commit, generated names are checked in memory only; a clash with a name in
    the ledger is found by the commit, and the name is drawn again (never a 409 for a name the
    user did not choose)."""
    from jupyter_gpuqueue import service as service_mod
    from jupyter_gpuqueue.bench import stream
    from jupyter_gpuqueue.service import names

    (tmp_path / "c.yaml").write_text(stream.cluster_yaml(borrowing=True))
    (tmp_path / "i.yaml").write_text(stream.inventory_yaml(1, 8))
    svc = service_mod.create_service(config_paths=[str(tmp_path / "c.yaml")], inventory_path=str(tmp_path / "i.yaml"),
                                     db_url=f"sqlite:///{tmp_path / 'l.sqlite'}", root_dir=str(tmp_path),
                                     data_dir=str(tmp_path / "state"), lease_priority_class=None)
    # A finished workload holds the name the first draw gives.
    svc.ledger.add_workload({**_row(0, name="sleep-aaaaaa"), "state": "Succeeded", "finished_at": 1.0})
    draws = iter(["aaaaaa", "bbbbbb"])
    monkeypatch.setattr(names, "random_hex", lambda digits: next(draws))

    async def scenario():
        await svc.start()
        try:
            req = {"localQueue": "team-a/team-a-queue", "gpus": 1, "command": ["sleep", "0"]}
            wl = await svc.submit_async(req, user="alice")
            assert wl["name"] == "sleep-bbbbbb" and wl["state"] == "Pending"
            assert svc.ledger.find_workload("team-a", "sleep-bbbbbb")["uid"] == wl["uid"]
        finally:
            await svc.stop()

    asyncio.run(scenario())


# This test forks the test process on purpose (what a forked server does); pyproject.toml makes
# Python 3.12's warning about forking a multi-threaded process an error everywhere else.
@pytest.mark.filterwarnings("ignore:This process:DeprecationWarning")
def test_forked_processes_draw_different_uids():
    """Workload uids come from a PRNG seeded from the OS (os.urandom is slow on the benchmark VM);
    a server forked from a process that imported the service must not repeat its parent's uids."""
    from jupyter_gpuqueue.service import names

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(w, names.new_uid().encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    child = os.read(r, 100).decode()
    os.close(r)
    assert child != names.new_uid()


def test_devices_held_twice_reads_overlaps_from_the_ledger(tmp_path):
    import sqlite3

    from jupyter_gpuqueue.bench.drain import devices_held_twice

    db = tmp_path / "ledger.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE workloads (name TEXT, admission TEXT, admitted_at REAL, finished_at REAL)")

    def adm(node, *devs):
        return json.dumps({"placements": [{"node": node, "devices": list(devs)}]})

    con.executemany("INSERT INTO workloads VALUES (?, ?, ?, ?)", [
        ("a", adm("gpu01", "0", "1"), 0.0, 10.0),
        ("b", adm("gpu01", "1"), 10.0, 20.0),  # starts as a ends: fine
        ("c", adm("gpu02", "0"), 0.0, None),  # still running
        ("d", adm("gpu02", "0"), 5.0, 6.0),  # while c holds it: twice
        ("e", None, None, None),  # never admitted
    ])
    con.commit()
    con.close()
    assert devices_held_twice(str(db)) == ["gpu02/0: c until inf and d from 5.000"]
