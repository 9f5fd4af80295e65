"""The local-process backend with real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from jupyter_gpuqueue.backends import Backend, LaunchSpec, LocalBackend, RunInfo
from jupyter_gpuqueue.backends.local import LOST_MESSAGE, process_start_ticks
from jupyter_gpuqueue.errors import Conflict, ValidationError

PY = sys.executable
WAIT = 20.0  # generous: the machine may be busy


def spec(tmp_path, uid, argv, env=None, cwd=None):
    return LaunchSpec(uid=uid, key=f"team-a/{uid}", argv=argv, cwd=str(cwd or tmp_path), env=env or {},
                      log_path=str(tmp_path / "logs" / f"{uid}.log"))


def read(path):
    with open(path) as f:
        return f.read()


def wait_done(backend, uid, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for st in backend.poll():
            if st.uid == uid:
                return st
        time.sleep(0.02)
    raise AssertionError(f"{uid} did not finish within {timeout} s")


def wait_for_log(path, text, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in read(path):
            return
        time.sleep(0.02)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_success_with_log_and_env(tmp_path):
    b = LocalBackend()
    assert isinstance(b, Backend)
    code = "import os; print('hello from job'); print('CVD=' + os.environ['CUDA_VISIBLE_DEVICES']); print('HOME' in os.environ)"
    info = b.start(spec(tmp_path, "ok", [PY, "-c", code], env={"CUDA_VISIBLE_DEVICES": "3,MIG-abc"}))
    assert b.running() == ["ok"]
    assert info.pgid == info.pid and info.start_ticks > 0
    assert RunInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    st = wait_done(b, "ok")
    assert (st.state, st.exit_code) == ("Succeeded", 0)
    assert st.finished_at >= info.started_at
    log = read(info.log_path)
    assert "hello from job" in log and "CVD=3,MIG-abc" in log and "True" in log  # env added to os.environ
    assert b.running() == [] and b.poll() == []  # reported once


def test_exit_code_and_stderr(tmp_path):
    b = LocalBackend()
    info = b.start(spec(tmp_path, "bad", [PY, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"]))
    st = wait_done(b, "bad")
    assert (st.state, st.exit_code) == ("Failed", 3)
    assert "3" in st.message
    assert "boom" in read(info.log_path)


def test_path_lookup_relative_command_and_working_dir(tmp_path):
    b = LocalBackend()
    work = tmp_path / "work"
    work.mkdir()
    script = work / "run.sh"
    script.write_text("#!/bin/sh\npwd\necho \"args: $1 $2\"\n")
    script.chmod(0o755)
    info = b.start(spec(tmp_path, "sh", ["./run.sh", "a b", "$HOME"], cwd=work))
    st = wait_done(b, "sh")
    assert st.state == "Succeeded"
    log = read(info.log_path)
    assert str(work) in log and "args: a b $HOME" in log  # no shell in between: arguments verbatim


def test_bad_command_and_working_dir_are_validation_errors(tmp_path):
    b = LocalBackend()
    with pytest.raises(ValidationError) as e:
        b.start(spec(tmp_path, "x", ["no-such-command-gpuqueue", "--help"]))
    assert e.value.field == "command" and "no-such-command-gpuqueue" in e.value.message
    with pytest.raises(ValidationError) as e:
        b.start(spec(tmp_path, "x", ["./missing.py"]))
    assert e.value.field == "command"
    (tmp_path / "data.txt").write_text("not executable")
    with pytest.raises(ValidationError) as e:
        b.start(spec(tmp_path, "x", ["./data.txt"]))
    assert e.value.field == "command"
    with pytest.raises(ValidationError) as e:
        b.start(spec(tmp_path, "x", []))
    assert e.value.field == "command"
    with pytest.raises(ValidationError) as e:
        b.start(spec(tmp_path, "x", ["true"], cwd=tmp_path / "nowhere"))
    assert e.value.field == "workingDir"
    with pytest.raises(ValidationError) as e:
        b.start(spec(tmp_path, "x", ["true"], env={"A": 1}))
    assert e.value.field == "env"
    assert b.running() == [] and not (tmp_path / "logs").exists()


def test_duplicate_uid_is_conflict(tmp_path):
    b = LocalBackend()
    b.start(spec(tmp_path, "dup", ["sleep", "30"]))
    try:
        with pytest.raises(Conflict):
            b.start(spec(tmp_path, "dup", ["true"]))
    finally:
        b.stop("dup", "test over", grace_seconds=0)
        wait_done(b, "dup")


def test_stop_terminates_within_grace(tmp_path):
    b = LocalBackend()
    info = b.start(spec(tmp_path, "sleepy", ["sleep", "60"]))
    t0 = time.monotonic()
    b.stop("sleepy", "cancelled by alice", grace_seconds=10)
    st = wait_done(b, "sleepy")
    assert time.monotonic() - t0 < 10  # SIGTERM sufficed
    assert st.state == "Failed" and "cancelled by alice" in st.message
    assert st.exit_code == 128 + signal.SIGTERM
    assert "cancelled by alice" in read(info.log_path)
    with pytest.raises(ProcessLookupError):
        os.kill(info.pid, 0)


def test_sigterm_ignoring_job_is_killed_after_grace(tmp_path):
    b = LocalBackend()
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    info = b.start(spec(tmp_path, "stubborn", [PY, "-c", code]))
    wait_for_log(info.log_path, "ready")
    t0 = time.monotonic()
    b.stop("stubborn", "preempted by team-b/urgent", grace_seconds=0.5)
    time.sleep(0.2)
    assert b.poll() == [] and b.running() == ["stubborn"]  # still inside the grace period
    st = wait_done(b, "stubborn")
    assert time.monotonic() - t0 >= 0.5
    assert st.state == "Failed" and "preempted by team-b/urgent" in st.message
    assert st.exit_code == 128 + signal.SIGKILL
    assert not os.path.exists(info.exit_path)  # the wrapper died with its job


def test_background_processes_of_a_finished_job_are_killed(tmp_path):
    b = LocalBackend()
    pidfile = tmp_path / "bg.pid"
    code = (f"import subprocess; p = subprocess.Popen(['sleep', '60']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))")
    b.start(spec(tmp_path, "bg", [PY, "-c", code]))
    assert wait_done(b, "bg").state == "Succeeded"
    bg = int(pidfile.read_text())
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            st = read(f"/proc/{bg}/stat").split(")")[-1].split()[0]
        except OSError:
            st = "gone"
        if st in ("gone", "Z"):
            break
        time.sleep(0.02)
    else:
        raise AssertionError("the job's background process outlived it")


def test_adopt_after_restart_reports_real_exit_code(tmp_path):
    a = LocalBackend()
    flag = tmp_path / "go"
    code = (f"import os, time\nwhile not os.path.exists({str(flag)!r}): time.sleep(0.02)\n"
            "print('finishing', flush=True)\nraise SystemExit(7)")
    info = a.start(spec(tmp_path, "long", [PY, "-c", code]))
    stored = json.loads(json.dumps(info.to_json()))  # what the ledger keeps

    b = LocalBackend()  # the server restarted
    assert b.adopt("long", RunInfo.from_json(stored)) is True
    assert b.running() == ["long"]
    assert b.poll() == []
    flag.write_text("")
    st = wait_done(b, "long")
    assert (st.state, st.exit_code) == ("Failed", 7)
    assert "finishing" in read(info.log_path)
    assert a.poll()[0].exit_code == 7  # (the original parent still reaps its child)


def test_adopt_rejects_a_reused_pid_and_a_dead_run(tmp_path):
    a = LocalBackend()
    info = a.start(spec(tmp_path, "r", ["sleep", "30"]))
    b = LocalBackend()
    wrong = RunInfo.from_json({**info.to_json(), "startTicks": info.start_ticks + 1})
    assert b.adopt("r", wrong) is False
    assert b.running() == []
    a.stop("r", "done", grace_seconds=0)
    wait_done(a, "r")
    assert b.adopt("r", info) is False


def test_finished_status_from_exit_file_or_lost(tmp_path):
    a = LocalBackend(state_dir=str(tmp_path / "state"))
    info = a.start(spec(tmp_path, "quick", [PY, "-c", "raise SystemExit(0)"]))
    assert info.exit_path.startswith(str(tmp_path / "state"))
    wait_done(a, "quick")
    b = LocalBackend(state_dir=str(tmp_path / "state"))
    assert b.adopt("quick", info) is False
    st = b.finished_status("quick", info)
    assert (st.state, st.exit_code) == ("Succeeded", 0)

    os.unlink(info.exit_path)  # e.g. the wrapper was SIGKILLed while the server was down
    st = b.finished_status("quick", info)
    assert (st.state, st.exit_code) == ("Failed", None)
    assert st.message == LOST_MESSAGE and "lost while the server was down" in st.message
    assert st.finished_at >= info.started_at


def test_wrapper_killed_without_exit_file_is_failed(tmp_path):
    b = LocalBackend()
    info = b.start(spec(tmp_path, "oom", ["sleep", "30"]))
    os.killpg(info.pgid, signal.SIGKILL)  # e.g. the OOM killer, not a stop()
    st = wait_done(b, "oom")
    assert st.state == "Failed" and st.exit_code == 128 + signal.SIGKILL
    assert "wrapper" in st.message and "SIGKILL" in st.message


def test_start_ticks_identify_this_process():
    assert process_start_ticks(os.getpid()) > 0
    assert process_start_ticks(2**22 + 12345) == 0


def test_demo_training_example_runs_as_a_job(tmp_path):
    import jupyter_gpuqueue

    root = os.path.dirname(os.path.dirname(os.path.abspath(jupyter_gpuqueue.__file__)))
    example = os.path.join(root, "examples", "train_digits.py")
    b = LocalBackend()
    env = {"CUDA_VISIBLE_DEVICES": "MIG-1111", "GPUQUEUE_WORKLOAD_NAME": "digits-1", "GPUQUEUE_NAMESPACE": "team-a"}
    info = b.start(spec(tmp_path, "digits", [PY, example, "--epochs", "3", "--seed", "1"], env=env))
    st = wait_done(b, "digits", timeout=120)
    log = read(info.log_path)
    assert st.state == "Succeeded", log
    assert "CUDA_VISIBLE_DEVICES=MIG-1111" in log and "GPUQUEUE_NAMESPACE=team-a" in log
    assert [line.split()[1] for line in log.splitlines() if line.startswith("epoch")] == ["1/3", "2/3", "3/3"]
    with open(tmp_path / "results" / "digits-digits-1.json") as f:
        result = json.load(f)
    assert result["epochs"] == 3 and result["devices"] == "MIG-1111" and len(result["history"]) == 3
    assert 0.8 < result["accuracy"] <= 1.0


def test_exit_records_are_read_without_following_links_or_blocking(tmp_path):
    from jupyter_gpuqueue.backends.local import read_exit_file

    real = tmp_path / "real.exit"
    real.write_text('{"exitCode": 3, "signal": null, "finishedAt": 1.0, "error": "why"}')
    assert read_exit_file(str(real)) == {"exitCode": 3, "signal": None, "finishedAt": 1.0, "error": "why"}
    link = tmp_path / "link.exit"
    link.symlink_to(real)
    assert read_exit_file(str(link)) is None  # a job could point it at a file only the service may read
    fifo = tmp_path / "fifo.exit"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert read_exit_file(str(fifo)) is None  # and never blocks the service
    assert time.monotonic() - started < 5
