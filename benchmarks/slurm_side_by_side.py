"""Slurm 22.05 and jupyter_gpuqueue side by side on the shared job stream (runs on demand).

    sudo .venv/bin/python benchmarks/slurm_side_by_side.py [--n 2000] [--tuned] [--skip-ours]

Sets up Slurm from Debian's packages as ``shared/reference/slurm.md`` describes, on this host:

- packages: ``apt-get install slurmctld slurmd slurmdbd slurm-client munge mariadb-server``
  (installed here if missing and ``--install`` is given; needs root);
- munged as user munge on its default socket; a private MariaDB (``mariadbd`` on port 3307,
  data in the work folder) for slurmdbd; slurmctld (started as ``slurmctld``), and one ``slurmd``
  per virtual node (``slurmd -N gpu01`` ... ``gpu16``, ``NodeAddr=127.0.0.1``, ports 17001-17016);
- ``SlurmdParameters=config_overrides`` (the host has 2 cores), ``gres.conf`` with ``File=``
  symlinks to /dev/null (22.05 drops file-less GPUs), accounts team-a / team-b / team-c with
  ``GrpTRES=gres/gpu=64 / 48 / 32`` and fair-share 50 / 30 / 20, ``AccountingStorageEnforce=
  associations,limits,qos``; backfill, cons_tres, multifactor priority; ``--tuned`` adds the
  high-throughput SchedulerParameters of slurm.md.

Then the stream (:mod:`jupyter_gpuqueue.bench.stream`: seed 42, same draws) is submitted with
``sbatch`` by three submitters in parallel (one per team) into a DOWN partition, the partition is
opened, and the drain is timed: makespan (open → last job end, from ``sacct``, 1 s resolution),
GPU utilisation (Σ GPUs × 1 s / (128 × makespan)), job starts/s, wait per team (start − open).
Finally ``jupyter gpuqueue bench drain`` runs the same stream on this project (without
borrowing: the comparison with GrpTRES; and with borrowing), and one table prints both.

Everything lives under ``--workdir`` (default /tmp/gpuqueue-slurm-bench); the daemons are stopped
at the end (``--keep-running`` leaves them up). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from jupyter_gpuqueue.bench import measure, stream  # noqa: E402

PACKAGES = ["slurmctld", "slurmd", "slurmdbd", "slurm-client", "munge", "mariadb-server"]
NODES, GPUS = 16, 8
DB_PORT = 3307
TUNED = ("SchedulerParameters=default_queue_depth=10000,sched_interval=10,batch_sched_delay=0,"
         "bf_interval=5,bf_continue,bf_max_job_test=20000,bf_window=1440")


def sh(cmd, check=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
    return r


def wait_for(what: str, probe, timeout: float = 60.0, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = probe()
            if v:
                return v
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(interval)


class Slurm:
    def __init__(self, workdir: str, tuned: bool):
        self.w = workdir
        self.tuned = tuned
        self.procs: list[subprocess.Popen] = []

    def p(self, *parts) -> str:
        return os.path.join(self.w, *parts)

    # -- setup -------------------------------------------------------------------------------------
    def write_configs(self) -> None:
        for d in ("state", "spool", "log", "dev", "db", "run"):
            os.makedirs(self.p(d), exist_ok=True)
        for i in range(GPUS):
            link = self.p("dev", f"nvidia{i}")
            if not os.path.lexists(link):
                os.symlink("/dev/null", link)
        conf = f"""ClusterName=bench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdSpoolDir={self.p('spool')}/%n
StateSaveLocation={self.p('state')}
SlurmctldPidFile={self.p('run', 'slurmctld.pid')}
SlurmdPidFile={self.p('run', 'slurmd-%n.pid')}
SlurmctldLogFile={self.p('log', 'slurmctld.log')}
SlurmdLogFile={self.p('log', 'slurmd-%n.log')}
SlurmctldDebug=info
SlurmdDebug=error
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
PriorityWeightAge=1000
PriorityWeightQOS=5000
PreemptType=preempt/qos
PreemptMode=REQUEUE
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu,gres/gpu:a100
JobAcctGatherType=jobacct_gather/none
MaxJobCount=50000
{TUNED if self.tuned else ''}
NodeName=gpu[01-{NODES:02d}] NodeAddr=127.0.0.1 Port=[17001-{17000 + NODES}] CPUs=64 RealMemory=256000 Gres=gpu:a100:{GPUS} State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=DOWN
"""
        with open(self.p("slurm.conf"), "w") as f:
            f.write(conf)
        with open(self.p("gres.conf"), "w") as f:
            f.write(f"NodeName=gpu[01-{NODES:02d}] Name=gpu Type=a100 File={self.p('dev')}/nvidia[0-{GPUS - 1}]\n")
        dbd = f"""AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={DB_PORT}
StorageUser=root
StorageLoc=slurm_acct_db
PidFile={self.p('run', 'slurmdbd.pid')}
LogFile={self.p('log', 'slurmdbd.log')}
"""
        with open(self.p("slurmdbd.conf"), "w") as f:
            f.write(dbd)
        os.chmod(self.p("slurmdbd.conf"), 0o600)

    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": self.p("slurm.conf")}

    def start_munge(self) -> None:
        os.makedirs("/run/munge", exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        if sh(["pgrep", "-x", "munged"], check=False).returncode != 0:
            sh(["runuser", "-u", "munge", "--", "munged"])
        wait_for("munge", lambda: sh(["munge", "-n"], check=False).returncode == 0)

    def start_mariadb(self) -> None:
        datadir = self.p("db")
        if not os.path.exists(os.path.join(datadir, "mysql")):
            sh(["mariadb-install-db", f"--datadir={datadir}", "--user=root", "--auth-root-authentication-method=normal"])
        self.procs.append(subprocess.Popen(
            ["mariadbd", f"--datadir={datadir}", "--user=root", f"--port={DB_PORT}", "--bind-address=127.0.0.1",
             f"--socket={self.p('run', 'mysqld.sock')}", f"--pid-file={self.p('run', 'mysqld.pid')}",
             "--innodb-buffer-pool-size=128M", "--innodb_lock_wait_timeout=900"],
            stdout=open(self.p("log", "mariadb.log"), "ab"), stderr=subprocess.STDOUT, start_new_session=True))
        wait_for("mariadb", lambda: sh(["mariadb", f"--socket={self.p('run', 'mysqld.sock')}", "-uroot", "-e",
                                         "SELECT 1"], check=False).returncode == 0)
        sql = ("CREATE DATABASE IF NOT EXISTS slurm_acct_db; "
               "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); "
               "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1'; FLUSH PRIVILEGES;")
        sh(["mariadb", f"--socket={self.p('run', 'mysqld.sock')}", "-uroot", "-e", sql])

    def start_daemons(self) -> None:
        env = self.env()
        log = open(self.p("log", "daemons.out"), "ab")
        # slurmdbd reads slurmdbd.conf next to $SLURM_CONF (it has no -f option)
        self.procs.append(subprocess.Popen(["slurmdbd", "-D"], env=env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_for("slurmdbd", lambda: sh(["sacctmgr", "-i", "show", "cluster"], check=False, env=env).returncode == 0, 90)
        sh(["sacctmgr", "-i", "add", "cluster", "bench"], check=False, env=env)
        # Started under the name slurmctld (slurm.md: as slurmctld-wlm it crashed at start).
        self.procs.append(subprocess.Popen(["slurmctld", "-D", "-c", "-f", self.p("slurm.conf")], env=env,
                                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_for("slurmctld", lambda: sh(["scontrol", "ping"], check=False, env=env).stdout.count("UP") > 0, 90)
        for i in range(1, NODES + 1):
            self.procs.append(subprocess.Popen(["slurmd", "-D", "-N", f"gpu{i:02d}", "-f", self.p("slurm.conf")],
                                               env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_for("16 idle nodes", lambda: len(sh(["sinfo", "-h", "-N", "-o", "%N %T"], env=env).stdout.split("\n")) >= NODES
                 and "unknown" not in sh(["sinfo", "-h", "-N", "-o", "%T"], env=env).stdout, 120)
        # Accounts and GRES limits only once slurmctld is up (slurm.md).
        for team, quota in stream.QUOTAS.items():
            sh(["sacctmgr", "-i", "add", "account", team, f"fairshare={stream.FAIRSHARE[team]}",
                f"GrpTRES=gres/gpu={quota}"], check=False, env=env)
            sh(["sacctmgr", "-i", "add", "user", "root", f"account={team}"], check=False, env=env)
            sh(["sacctmgr", "-i", "modify", "account", team, "set", f"GrpTRES=gres/gpu={quota}",
                f"fairshare={stream.FAIRSHARE[team]}"], check=False, env=env)
        sh(["scontrol", "reconfigure"], env=env)

    def stop(self) -> None:
        env = self.env()
        sh(["scontrol", "shutdown"], check=False, env=env, timeout=30)
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)

    # -- the stream ------------------------------------------------------------------------------
    def run_stream(self, n: int) -> dict:
        env = self.env()
        jobs = stream.job_stream(n)
        by_team = collections.defaultdict(list)
        for j in jobs:
            by_team[j.team].append(j)

        def submit(team_jobs):
            ids = []
            for j in team_jobs:
                r = sh(["sbatch", "--parsable", "-p", "gpu", f"--account={j.team}", "-N1", "-n1",
                        f"--gres=gpu:a100:{j.gpus}", f"--time={j.time_limit_minutes}", "--output=/dev/null",
                        f"--job-name=s{j.index}", "--wrap", "sleep 1"], env=env)
                ids.append((r.stdout.strip().split(";")[0], j))
            return ids

        t0 = time.time()
        with ThreadPoolExecutor(3) as ex:  # three users in parallel (slurm.md)
            list(ex.map(submit, by_team.values()))  # every sbatch has returned
        submit_seconds = time.time() - t0
        t_open = time.time()
        sh(["scontrol", "update", "PartitionName=gpu", "State=UP"], env=env)
        wait_for("the queue to drain", lambda: sh(["squeue", "-h", "-o", "%i"], env=env).stdout.strip() == "",
                 timeout=3600, interval=2.0)
        time.sleep(2)  # accounting catches up
        out = sh(["sacct", "-X", "-n", "--parsable2", "-S", "now-1days",
                  "--format=JobName,Account,Start,End,State"], env=env).stdout
        rows = {}
        for line in out.strip().splitlines():
            name, account, start, end, state = line.split("|")
            if name.startswith("s") and name[1:].isdigit():
                rows[int(name[1:])] = (account, start, end, state)

        def ts(text):
            return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()

        starts, ends, waits = [], [], collections.defaultdict(list)
        completed = 0
        for i, j in enumerate(jobs):
            if i not in rows or rows[i][1] in ("Unknown", "None"):
                continue
            account, start, end, state = rows[i]
            completed += state == "COMPLETED"
            starts.append(ts(start))
            ends.append(ts(end))
            waits[j.team].append(ts(start) - t_open)
        makespan = max(ends) - t_open if ends else None
        work = sum(j.gpus for j in jobs)
        return {
            "submitSeconds": submit_seconds, "submitRate": n / submit_seconds, "completed": completed,
            "makespan": makespan, "ideal": stream.ideal_makespan(jobs, borrowing=False, capacity=NODES * GPUS),
            "gpuUtilisation": work / (NODES * GPUS * makespan) if makespan else None,
            "jobStartsPerSecond": n / makespan if makespan else None,
            "waitByTeam": {t: {"meanWait": measure.mean(w), "p95Wait": measure.percentile(w, 95)} for t, w in waits.items()},
        }


def ours(n: int, borrowing: bool) -> dict:
    out = f"/tmp/gpuqueue-side-by-side-{'b' if borrowing else 'nb'}.json"
    cmd = [sys.executable, "-m", "jupyter_gpuqueue.cli", "bench", "drain", "--n", str(n), "--json", out,
           "--borrowing" if borrowing else "--no-borrowing"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout, r.stderr, file=sys.stderr)
    with open(out) as f:
        return json.load(f)


def table(slurm: dict, ours_nb: dict | None, ours_b: dict | None, tuned: bool) -> str:
    f = measure.fmt

    def col(r, key, scale=1.0, unit="", d=1):
        v = r.get(key) if r else None
        return f(v * scale if v is not None else None, unit, d)

    rows = [
        ("submit all", f(slurm["submitSeconds"], " s", 1) + f" ({slurm['submitRate']:.0f}/s)",
         col(ours_nb, "submitSeconds", unit=" s"), col(ours_b, "submitSeconds", unit=" s")),
        ("makespan", col(slurm, "makespan", unit=" s"), col(ours_nb, "makespan", unit=" s"), col(ours_b, "makespan", unit=" s")),
        ("ideal", col(slurm, "ideal", unit=" s"), col(ours_nb, "ideal", unit=" s"), col(ours_b, "ideal", unit=" s")),
        ("GPU utilisation", col(slurm, "gpuUtilisation", 100, " %"), col(ours_nb, "gpuUtilisation", 100, " %"),
         col(ours_b, "gpuUtilisation", 100, " %")),
        ("job starts/s", col(slurm, "jobStartsPerSecond"), col(ours_nb, "jobStartsPerSecond"), col(ours_b, "jobStartsPerSecond")),
    ]
    for team in stream.QUOTAS:
        def w(r):
            x = (r or {}).get("waitByTeam", {}).get(team)
            return f"{f(x['meanWait'], ' s', 1)} / {f(x['p95Wait'], ' s', 1)}" if x else "-"
        rows.append((f"{team} wait mean / p95", w(slurm), w(ours_nb), w(ours_b)))
    head = ("measure", f"Slurm 22.05 ({'tuned' if tuned else 'default'}, GrpTRES)", "gpuqueue, no borrowing",
            "gpuqueue, borrowing")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--tuned", action="store_true", help="slurm.md's high-throughput SchedulerParameters")
    ap.add_argument("--workdir", default="/tmp/gpuqueue-slurm-bench")
    ap.add_argument("--install", action="store_true", help="apt-get install the Debian packages if missing")
    ap.add_argument("--skip-ours", action="store_true", help="only Slurm")
    ap.add_argument("--keep-running", action="store_true")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (daemons, munge, apt)", file=sys.stderr)
        return 2
    missing = [b for b in ("slurmctld", "slurmd", "slurmdbd", "sbatch", "munged", "mariadbd") if not shutil.which(b)]
    if missing:
        if not args.install:
            print(f"missing {', '.join(missing)}: apt-get install {' '.join(PACKAGES)} (or --install)", file=sys.stderr)
            return 2
        sh(["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES],
           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if os.path.exists(args.workdir):
        shutil.rmtree(args.workdir)
    os.makedirs(args.workdir)
    s = Slurm(args.workdir, args.tuned)
    s.write_configs()
    try:
        s.start_munge()
        s.start_mariadb()
        s.start_daemons()
        print(f"Slurm is up; submitting {args.n} jobs", file=sys.stderr)
        slurm = s.run_stream(args.n)
    finally:
        if not args.keep_running:
            s.stop()
    print(json.dumps(slurm, indent=1), file=sys.stderr)
    ours_nb = ours_b = None
    if not args.skip_ours:
        ours_nb = ours(args.n, borrowing=False)
        ours_b = ours(args.n, borrowing=True)
    print(f"load average now: {os.getloadavg()[0]:.2f}")
    print(table(slurm, ours_nb, ours_b, args.tuned))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"slurm": slurm, "oursNoBorrowing": ours_nb, "oursBorrowing": ours_b}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
