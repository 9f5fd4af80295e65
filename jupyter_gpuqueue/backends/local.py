"""The local-process backend: each admitted workload runs as a process on this machine.

A run is ``python -I -S <this folder>/runner.py --exit-file PATH -- argv...`` started in a new session
(its own process group, so it survives a restart of the Jupyter server and a Ctrl-C in the server's
terminal), with stdin from /dev/null and stdout + stderr appended to the log file. The wrapper records
the job's exit code in the exit file, which is how a restarted server learns the outcome of a run it
adopted (see runner.py).

Lifecycle, driven by the service without threads: :meth:`LocalBackend.start`, then
:meth:`LocalBackend.poll` every second or so (reaps finished runs, escalates stops), and
:meth:`LocalBackend.stop` to cancel or preempt: SIGTERM to the process group now, SIGKILL when the
grace period is over. When a run this backend started ends, whatever is left in its process group
(processes the job started in the background) is killed, so that no GPU stays in use after its
quota is released.

Jobs as their owner (``accounts``, the hub service's ``run_jobs_as_owner``; docs/security.md): the
wrapper is started with the owner's uid, gid, supplementary groups and umask and a fresh
environment (accounts.py), and enters the working directory itself, as the owner. The service,
which must then run as root, keeps every file it reads in its own folder: it creates the log file
(owned by the job's owner, mode 0600) and the exit file (its own, 0600) there and hands both to the
wrapper already open, so that a job can neither replace them (e.g. by a link to a file only root may
read, which the service would then serve as the job's log) nor write anything else of the service.

Not thread-safe: one thread (the service's event loop) calls it. Linux: pid reuse is detected with
the start time in ``/proc/<pid>/stat``; where /proc is absent only the pid is checked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ..errors import Conflict, ValidationError
from .accounts import Account, Accounts, require_root
from .base import FAILED, SUCCEEDED, LaunchSpec, RunInfo, RunStatus

log = logging.getLogger(__name__)

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")
LOST_MESSAGE = "lost while the server was down: the run ended without recording an exit code"


def _read_stat(pid: int) -> Optional[tuple[str, int]]:
    """(state letter, start time in clock ticks since boot) from /proc/<pid>/stat, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # "pid (comm) state ppid ..." - comm may contain spaces and ')', so split after the last ')'.
    fields = data[data.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[19])  # field 3 (state) and field 22 (starttime)
    except (IndexError, ValueError):
        return None


def _boot_time() -> float:
    """Seconds since the epoch at which the system booted (``btime`` in /proc/stat); 0.0 if unknown."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def process_start_ticks(pid: int) -> int:
    """Start time of ``pid`` in clock ticks since boot (/proc/<pid>/stat field 22); 0 if unknown."""
    st = _read_stat(pid)
    return st[1] if st else 0


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _describe_code(code: int, sig: Optional[int]) -> str:
    if sig is not None:
        return f"killed by {_signal_name(sig)} (exit code {code})"
    return f"exited with code {code}"


def read_exit_file(path: str) -> Optional[dict]:
    """The runner's exit record ``{"exitCode": int, "signal": int | None, "finishedAt": float}``,
    or None when the file is missing or unreadable (a bare integer is accepted too)."""
    try:
        # No link, FIFO or device (a job might leave one where it could write): never block on it.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        text = os.read(fd, 65536).decode("utf-8", "replace").strip()
        mtime = st.st_mtime
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, int) and not isinstance(data, bool):
        data = {"exitCode": data}
    if not isinstance(data, dict) or not isinstance(data.get("exitCode"), int):
        return None
    data.setdefault("signal", None)
    if not isinstance(data.get("error"), str):
        data.pop("error", None)
    if not isinstance(data.get("finishedAt"), (int, float)):
        data["finishedAt"] = mtime
    return data


def _with_job_env(env: dict, extra: Optional[dict]) -> dict:
    """``env`` updated with the job's ``extra`` variables (ValidationError naming ``env`` for a
    name or value that is not a string, or a name with '=' or NUL)."""
    for k, v in (extra or {}).items():
        if not isinstance(k, str) or not k or "=" in k or "\0" in k:
            raise ValidationError(f"invalid environment variable name {k!r}", field="env")
        if not isinstance(v, str) or "\0" in v:
            raise ValidationError(f"value of {k} must be a string without NUL characters", field="env")
        env[k] = v
    return env


def _usable_by_everyone(path: str) -> bool:
    """Whether any account may run ``path``: every folder on the way (links followed) searchable
    and the file executable and readable by others."""
    real = os.path.realpath(path)
    try:
        if (os.stat(real).st_mode & 0o005) != 0o005:
            return False
        for link in (os.path.abspath(path), real):
            d = os.path.dirname(link)
            while True:
                if not os.stat(d).st_mode & 0o001:
                    return False
                if d == os.path.dirname(d):
                    break
                d = os.path.dirname(d)
    except OSError:
        return False
    return True


def _python_for_everyone(python: str) -> str:
    """``python`` if every account can run it, else the first python3 in /usr/local/bin, /usr/bin,
    /bin that every account can run (the wrapper needs the standard library only, Python ≥ 3.8)."""
    if _usable_by_everyone(python):
        return python
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        cand = os.path.join(d, "python3")
        if os.path.isfile(cand) and _usable_by_everyone(cand):
            log.info("jobs run as their owners: the job wrapper runs under %s (%s is not usable by every account)",
                     cand, python)
            return cand
    raise ValidationError(
        f"{python} cannot be run by every account (a folder on its way or the file itself is closed to others), "
        "and no python3 in /usr/local/bin, /usr/bin or /bin can: jobs run as their owners need one for their "
        "wrapper", field="python_executable")


@dataclass
class _Run:
    uid: str
    info: RunInfo
    popen: Optional[subprocess.Popen] = None  # None: adopted after a restart (not our child)
    stop_reason: Optional[str] = None
    grace: float = 0.0
    kill_at: Optional[float] = None  # time.monotonic() deadline for SIGKILL
    killed: bool = False
    pidfd: Optional[int] = None  # watched by the event loop while the run lives (set_wakeup)
    ended: bool = False  # its pidfd said the process ended (poll checks it)
    last_alive: float = 0.0  # time.time() at which this backend last saw the process alive


def _observed_end(recorded: Optional[float], last_alive: float, seen_gone: float) -> float:
    """The end time the service bills for a run: the exit record's ``recorded`` time (None: none
    to go by) held between the last moment the service saw the run alive and the moment it saw it
    gone. A job runs as the account that could write (or make its wrapper write) the record, so a
    time outside what the service observed is never taken: at worst a run is billed up to the time
    between two looks (``full_poll_interval``, or since the last sighting before a restart) more.
    Source of the rule: docs/security.md, "Trust boundary"."""
    lo = min(last_alive, seen_gone)
    if recorded is None:
        return seen_gone
    return min(max(float(recorded), lo), seen_gone)


class LocalBackend:
    """Runs workloads as local processes (the standalone mode's backend). (About 500
    lines: start (also as the owner), the pidfd wake-up, stop with its escalation and adoption after a restart act on
    the same runs; the wrapper process itself is ``runner.py``.)

    ``python_executable``: the Python that runs the wrapper (any Python ≥ 3.8; it only needs the
    standard library). ``state_dir``: where exit files go (``<state_dir>/<uid>.exit``); by default
    next to the log (``<log_path>.exit``). Raises ValidationError(field="python_executable") if that
    Python is not an executable file.

    ``accounts``: run each job as its owner (``spec.workload["owner"]``) mapped to an OS account
    (accounts.py); needs root (ValidationError(field="run_jobs_as_owner") otherwise). The wrapper's
    Python must then be one every account can run: ``python_executable`` if it is, else the first
    such ``python3`` in /usr/local/bin, /usr/bin, /bin (ValidationError if none).

    ``sightings_file``: a file in the service's private folder whose modification time this
    backend sets at every full :meth:`poll` (the last moment it saw each of its runs alive). After
    a restart, a run that ended while the service was down is billed to no earlier than that
    moment (:meth:`finished_status`), whatever its exit record says; without it, to no earlier
    than the run's start.
    """

    def __init__(self, python_executable: str = sys.executable, state_dir: Optional[str] = None,
                 accounts: Optional[Accounts] = None, sightings_file: Optional[str] = None):
        if not python_executable or not os.path.isfile(python_executable) or not os.access(python_executable, os.X_OK):
            raise ValidationError(f"{python_executable!r} is not an executable file", field="python_executable")
        self.accounts = accounts
        if accounts is not None:
            require_root()
            python_executable = _python_for_everyone(python_executable)
        self.python_executable = python_executable
        self.state_dir = os.path.abspath(state_dir) if state_dir else None
        if self.state_dir:
            os.makedirs(self.state_dir, exist_ok=True)
        self._runs: dict[str, _Run] = {}
        self._wakeup: Optional[Callable[[], None]] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._next_full_poll = 0.0  # time.monotonic() of poll's next look at every run
        self.sightings_file = os.path.abspath(sightings_file) if sightings_file else None
        # The previous server process's last sighting of its runs (read before this one writes).
        self.previous_sighting = 0.0
        if self.sightings_file:
            try:
                self.previous_sighting = os.stat(self.sightings_file).st_mtime
            except OSError:
                pass

    # ------------------------------------------------------------------ wake-up on exit

    def set_wakeup(self, callback: Optional[Callable[[], None]]) -> None:
        """Call ``callback()`` on the running asyncio loop's thread as soon as a run ends, so that
        the service reaps it at once instead of at its next periodic :meth:`poll` (a job of 1 s
        would otherwise lose up to a whole poll interval). Linux ≥ 5.3: a pidfd per run
        (``os.pidfd_open``) watched with ``loop.add_reader``; elsewhere, or without a running loop
        when a run starts, only :meth:`poll` finds ended runs. Must be called on the loop's thread
        (the service does it in ``start``); None turns it off."""
        self._wakeup = callback
        try:
            self._loop = asyncio.get_running_loop() if callback is not None else None
        except RuntimeError:
            self._loop = None
        for run in self._runs.values():
            self._unwatch(run)
            self._watch(run)

    def _watch(self, run: _Run) -> None:
        if self._wakeup is None or self._loop is None or not hasattr(os, "pidfd_open") or run.pidfd is not None:
            return
        try:
            fd = os.pidfd_open(run.info.pid)
        except OSError:  # gone already (poll finds it), or no pidfd support in this kernel
            return
        try:
            self._loop.add_reader(fd, self._on_exit, run)
        except (OSError, RuntimeError, ValueError):
            os.close(fd)
            return
        run.pidfd = fd

    def _on_exit(self, run: _Run) -> None:
        # A pidfd stays readable once its process has ended: stop watching it now (it is closed
        # when poll reaps the run), then wake the service.
        if run.pidfd is not None and self._loop is not None:
            self._loop.remove_reader(run.pidfd)
        run.ended = True
        if self._wakeup is not None:
            self._wakeup()

    def _unwatch(self, run: _Run) -> None:
        fd, run.pidfd = run.pidfd, None
        if fd is None:
            return
        if self._loop is not None:
            try:
                self._loop.remove_reader(fd)
            except (RuntimeError, ValueError, OSError):
                pass
        os.close(fd)

    # ------------------------------------------------------------------ start

    @staticmethod
    def _resolve(cmd: str, cwd: str, path_env: Optional[str]) -> str:
        if "/" in cmd:
            path = cmd if os.path.isabs(cmd) else os.path.join(cwd, cmd)
            if not os.path.exists(path):
                raise ValidationError(
                    f"{cmd!r} not found (relative to the working directory {cwd})", field="command"
                )
            if os.path.isdir(path) or not os.access(path, os.X_OK):
                raise ValidationError(f"{cmd!r} is not an executable file", field="command")
            return os.path.abspath(path)
        found = shutil.which(cmd, path=path_env)
        if not found:
            raise ValidationError(f"executable {cmd!r} not found on PATH", field="command")
        return os.path.abspath(found)

    def _exit_path(self, spec: LaunchSpec, log_path: str) -> str:
        if self.state_dir:
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.uid)
            return os.path.join(self.state_dir, f"{safe}.exit")
        return log_path + ".exit"

    def owner_account(self, user: str) -> Optional[Account]:
        """With ``accounts``: the OS account ``user``'s jobs run as (Forbidden naming the user and the
        account looked for when there is none, accounts.py); None when jobs run as the service."""
        return self.accounts.lookup(user) if self.accounts is not None else None

    def start(self, spec: LaunchSpec) -> RunInfo:
        """Start ``spec.argv`` in ``spec.cwd`` with ``os.environ`` + ``spec.env``; returns its RunInfo.
        With ``accounts``: as the owner's account with its environment + ``spec.env`` (see
        :meth:`_start_as_owner`).

        Raises ValidationError naming ``command`` (empty, not a list of strings, argv[0] not found on
        PATH / relative to cwd, or not executable), ``workingDir`` (not a folder), ``env`` (a name or
        value that is not a string, or a name with '=' or NUL), ``logPath`` (empty);
        Conflict(field="uid") if that uid is already running here. Nothing is started on error.
        """
        if not isinstance(spec.uid, str) or not spec.uid:
            raise ValidationError("must be a non-empty string", field="uid")
        if spec.uid in self._runs:
            raise Conflict(f"workload {spec.key} (uid {spec.uid}) is already running", field="uid")
        argv = spec.argv
        if not isinstance(argv, (list, tuple)) or not argv:
            raise ValidationError("must be a non-empty list of arguments", field="command")
        for i, a in enumerate(argv):
            if not isinstance(a, str) or "\0" in a:
                raise ValidationError(f"argument {i} must be a string without NUL characters", field="command")
        if not argv[0]:
            raise ValidationError("the executable (first argument) is empty", field="command")
        if self.accounts is not None:
            return self._start_as_owner(spec)
        if not isinstance(spec.cwd, str) or not os.path.isdir(spec.cwd):
            raise ValidationError(f"working directory {spec.cwd!r} does not exist", field="workingDir")
        cwd = os.path.abspath(spec.cwd)
        env = _with_job_env(dict(os.environ), spec.env)
        exe = self._resolve(argv[0], cwd, env.get("PATH", os.defpath))
        if not spec.log_path:
            raise ValidationError("a log file path is required", field="logPath")
        log_path = os.path.abspath(spec.log_path)
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        exit_path = self._exit_path(spec, log_path)
        try:
            os.unlink(exit_path)  # a stale record from an earlier run of the same uid
        except FileNotFoundError:
            pass
        # -I -S: isolated, and no site import (runner.py needs only modules loaded at startup):
        # starting the wrapper is the main CPU cost of a short job.
        cmd = [self.python_executable, "-I", "-S", RUNNER, "--exit-file", exit_path, "--", exe, *argv[1:]]
        started_at = time.time()
        with open(log_path, "ab") as logf:
            popen = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        info = RunInfo(
            pid=popen.pid,
            pgid=popen.pid,  # start_new_session: the wrapper leads its own session and group
            start_ticks=process_start_ticks(popen.pid),
            log_path=log_path,
            exit_path=exit_path,
            started_at=started_at,
        )
        self._runs[spec.uid] = _Run(spec.uid, info, popen, last_alive=started_at)
        self._watch(self._runs[spec.uid])
        log.debug("started %s (%s) pid %d: %s", spec.key, spec.uid, popen.pid, argv)
        return info

    def _start_as_owner(self, spec: LaunchSpec) -> RunInfo:
        """Start the wrapper as the job's owner: uid, gid, supplementary groups, umask and a fresh
        environment of the account (accounts.py) + ``spec.env``; the wrapper enters ``spec.cwd``
        and looks ``argv[0]`` up on the account's PATH itself, as the owner, and reports failures
        as the job's (exit code 126 / 127 with the reason). The log file is created here (owned
        by the account, 0600) and the exit file too (the service's, 0600), both in the service's
        folder, and given to the wrapper already open."""
        owner = (spec.workload or {}).get("owner")
        account = self.accounts.lookup(owner)  # type: ignore[union-attr]
        if not isinstance(spec.cwd, str) or not os.path.isabs(spec.cwd) or "\0" in spec.cwd:
            raise ValidationError(f"working directory {spec.cwd!r} must be an absolute path", field="workingDir")
        env = _with_job_env(account.environ(), spec.env)
        if not spec.log_path:
            raise ValidationError("a log file path is required", field="logPath")
        log_path = os.path.abspath(spec.log_path)
        os.makedirs(os.path.dirname(log_path), mode=0o700, exist_ok=True)
        exit_path = self._exit_path(spec, log_path)
        flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_CREAT
        log_fd = os.open(log_path, flags | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            exit_fd = os.open(exit_path, flags | os.O_RDWR | os.O_TRUNC, 0o600)
        except OSError:
            os.close(log_fd)
            raise
        try:
            for fd, what in ((log_fd, log_path), (exit_fd, exit_path)):
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise ValidationError(f"{what} is not a regular file", field="logPath")
            os.fchown(log_fd, account.uid, account.gid)
            os.fchmod(log_fd, 0o600)
            os.fchmod(exit_fd, 0o600)
            cmd = [self.python_executable, "-I", "-S", RUNNER, "--exit-file", exit_path, "--exit-fd", str(exit_fd),
                   "--chdir", spec.cwd, "--", *spec.argv]
            started_at = time.time()
            try:
                popen = subprocess.Popen(
                    cmd, env=env, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True, pass_fds=(exit_fd,),
                    user=account.uid, group=account.gid, extra_groups=list(account.groups), umask=account.umask,
                )
            except PermissionError as e:
                raise ValidationError(
                    f"the job wrapper {self.python_executable} cannot be started as {account.name}: {e}",
                    field="python_executable") from None
        finally:
            os.close(log_fd)
            os.close(exit_fd)
        info = RunInfo(pid=popen.pid, pgid=popen.pid, start_ticks=process_start_ticks(popen.pid), log_path=log_path,
                       exit_path=exit_path, started_at=started_at)
        self._runs[spec.uid] = _Run(spec.uid, info, popen, last_alive=started_at)
        self._watch(self._runs[spec.uid])
        log.debug("started %s (%s) pid %d as %s (uid %d): %s", spec.key, spec.uid, popen.pid, account.name,
                  account.uid, spec.argv)
        return info

    # ------------------------------------------------------------------ liveness

    @staticmethod
    def _alive(info: RunInfo) -> bool:
        """True if ``info.pid`` is a live (not zombie) process with ``info.start_ticks``."""
        if info.pid <= 0:
            return False  # find_started's record of a run that has ended
        try:
            os.kill(info.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return False  # someone else's process now
        st = _read_stat(info.pid)
        if st is None:
            return not os.path.isdir("/proc")  # no procfs: trust the pid
        state, ticks = st
        return ticks == info.start_ticks and state not in ("Z", "X", "x")

    def _exited(self, run: _Run) -> bool:
        """True once the wrapper has exited (our child: without reaping it)."""
        if run.popen is not None and run.popen.returncode is None:
            try:
                res = os.waitid(os.P_PID, run.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return not self._alive(run.info)  # reaped by someone else
            return res is not None
        if run.popen is not None:
            return True
        return not self._alive(run.info)

    def _signal(self, run: _Run, sig: int) -> None:
        if run.popen is None and not self._alive(run.info):
            return  # adopted run already gone: its pgid may belong to someone else by now
        try:
            os.killpg(run.info.pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as e:
            log.warning("cannot signal run %s (pgid %d): %s", run.uid, run.info.pgid, e)

    def _note(self, run: _Run, text: str) -> None:
        try:
            fd = os.open(run.info.log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, f"\n[gpuqueue] {text}\n".encode("utf-8", "replace"))
        except OSError:
            pass
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ stop / poll

    def signal(self, uid: str, signum: int, note: str = "") -> bool:
        """Send ``signum`` (e.g. SIGUSR1, a spot job's preemption notice) to run ``uid``: to its
        wrapper, which forwards it to the job (runner.py), so the job can checkpoint. Returns
        False when the run is not tracked or has ended."""
        run = self._runs.get(uid)
        if run is None or self._exited(run):
            return False
        self._note(run, f"{note or 'signal'}: {_signal_name(signum)}")
        try:
            os.kill(run.info.pid, signum)
        except (ProcessLookupError, PermissionError) as e:
            log.warning("cannot signal run %s (pid %d): %s", uid, run.info.pid, e)
            return False
        return True

    def stop(self, uid: str, reason: str, grace_seconds: float = 10.0) -> None:
        """Stop run ``uid``: SIGTERM to its process group now, SIGKILL once ``grace_seconds`` have
        passed (sent by a later :meth:`poll`; at once when ``grace_seconds`` <= 0). Returns at once.
        The run is then reported Failed with ``reason`` in its message. A uid that is not running,
        or whose process has already ended, is left alone (its real outcome is reported)."""
        run = self._runs.get(uid)
        if run is None or self._exited(run):
            return
        grace = max(0.0, float(grace_seconds))
        deadline = time.monotonic() + grace
        if run.stop_reason is None:
            run.stop_reason = reason or "stopped"
            run.grace = grace
            self._note(run, f"stopping: {run.stop_reason} (SIGTERM; SIGKILL after {grace:g} s)")
        if run.kill_at is None or deadline < run.kill_at:
            run.kill_at = deadline
            run.grace = min(run.grace, grace)
        if grace <= 0:
            self._signal(run, signal.SIGKILL)
            run.killed = True
        else:
            self._signal(run, signal.SIGTERM)

    # Seconds between poll's looks at runs whose pidfd has said nothing (a safety net).
    full_poll_interval = 1.0

    def poll(self) -> list[RunStatus]:
        """Runs that finished since the last call (each reported once, then no longer tracked);
        also sends SIGKILL to stopped runs whose grace period is over.

        A run watched by its pidfd (set_wakeup) is looked at only once the pidfd said it ended,
        while it is being stopped, or at most every ``full_poll_interval`` seconds: the service
        polls at every tick, and a look at each of 128 running jobs (a waitid each) cost 0.7 ms
        per tick (BENCHMARKS.md, "The live service")."""
        out: list[RunStatus] = []
        now = time.monotonic()
        wall = time.time()
        full = now >= self._next_full_poll
        if full:
            self._next_full_poll = now + self.full_poll_interval
        for uid, run in list(self._runs.items()):
            if not (full or run.ended or run.pidfd is None or run.kill_at is not None):
                run.last_alive = wall
                continue  # alive: its pidfd has not said otherwise
            if not self._exited(run):
                run.last_alive = wall
                if run.kill_at is not None and not run.killed and now >= run.kill_at:
                    self._note(run, f"grace period of {run.grace:g} s is over: SIGKILL")
                    self._signal(run, signal.SIGKILL)
                    run.killed = True
                continue
            wrapper_code = self._reap(run) if run.popen is not None else None
            self._unwatch(run)
            del self._runs[uid]
            out.append(self._status(run, wrapper_code))
        if full and self.sightings_file and not out:
            # Only when every run was seen alive: a run that ended now, but whose end the service
            # has not recorded yet (it may die first), was last seen alive before this poll.
            self._sighted(wall)
        return out

    def _sighted(self, at: float) -> None:
        """Record ``at`` as the last sighting of every run (the sightings file's mtime)."""
        try:
            os.utime(self.sightings_file, (at, at))
        except FileNotFoundError:
            try:
                fd = os.open(self.sightings_file, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                os.close(fd)
                os.utime(self.sightings_file, (at, at))
            except OSError as e:
                log.warning("cannot record the runs' last sighting in %s: %s", self.sightings_file, e)
                self.sightings_file = None
        except OSError as e:
            log.warning("cannot record the runs' last sighting in %s: %s", self.sightings_file, e)
            self.sightings_file = None

    @staticmethod
    def _reap(run: _Run) -> Optional[int]:
        """Reap our exited wrapper; its wait status as Popen.returncode (None if someone else
        reaped it). While it is a zombie it still holds its pid and process group, so what is left
        in the group (background processes of the job) is killed first without risk of hitting a
        reused process group."""
        popen = run.popen
        assert popen is not None
        if popen.returncode is not None:
            return popen.returncode
        try:
            os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            popen.returncode = 255  # reaped elsewhere (outcome comes from the exit file)
            return None
        try:
            os.killpg(run.info.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            _, status = os.waitpid(popen.pid, 0)
        except ChildProcessError:
            popen.returncode = 255
            return None
        popen.returncode = os.waitstatus_to_exitcode(status)
        return popen.returncode

    def _status(self, run: _Run, wrapper_code: Optional[int]) -> RunStatus:
        """The outcome of an ended run. The exit record is the wrapper's word, written by a
        process of the job's own account: for a wrapper that is our child, a record is taken only
        when the wrapper exited by itself (one killed by a signal wrote none of its own) and its
        exit code is the wrapper's; its end time is never outside what this backend observed
        (:func:`_observed_end`)."""
        seen_gone = time.time()
        rec = read_exit_file(run.info.exit_path)
        if rec is not None and run.popen is not None and wrapper_code is not None:
            if wrapper_code < 0:
                rec = None  # the wrapper was killed: whatever the record says, it did not write it
            elif rec["exitCode"] != wrapper_code:
                rec = {"exitCode": wrapper_code, "signal": wrapper_code - 128 if wrapper_code > 128 else None,
                       "finishedAt": None}
        if rec is not None:
            code, sig = rec["exitCode"], rec["signal"]
            finished_at = _observed_end(rec.get("finishedAt"), max(run.last_alive, run.info.started_at), seen_gone)
            if run.stop_reason is not None:
                how = "killed after the grace period" if run.killed else _describe_code(code, sig)
                return RunStatus(run.uid, FAILED, code, finished_at, f"{run.stop_reason}; {how}")
            if code == 0:
                return RunStatus(run.uid, SUCCEEDED, 0, finished_at, "exited with code 0")
            return RunStatus(run.uid, FAILED, code, finished_at, rec.get("error") or _describe_code(code, sig))
        # No exit record: the wrapper itself died (SIGKILL, OOM killer) or could not start.
        finished_at = seen_gone
        if wrapper_code is not None and wrapper_code < 0:
            code: Optional[int] = 128 - wrapper_code
            what = f"was killed by {_signal_name(-wrapper_code)}"
        elif wrapper_code is not None and wrapper_code >= 0:
            code = wrapper_code
            what = f"exited with code {wrapper_code}"
        else:
            code, what = None, "ended"
        if run.stop_reason is not None:
            how = "killed after the grace period" if run.killed else f"the job wrapper {what}"
            return RunStatus(run.uid, FAILED, code, finished_at, f"{run.stop_reason}; {how}")
        return RunStatus(
            run.uid, FAILED, code, finished_at,
            f"the job wrapper process {what} before it could record the job's exit code",
        )

    # ------------------------------------------------------------------ restart

    def adopt(self, uid: str, info: RunInfo) -> bool:
        """Track a run started before a server restart. True if ``info.pid`` is alive with the same
        start time (``start_ticks``) and process group; False otherwise (then use
        :meth:`finished_status`)."""
        current = self._runs.get(uid)
        if current is not None:
            return current.info.pid == info.pid and current.info.start_ticks == info.start_ticks
        if not self._alive(info):
            return False
        try:
            if os.getpgid(info.pid) != info.pgid:
                return False
        except ProcessLookupError:
            return False
        self._runs[uid] = _Run(uid, info, popen=None, last_alive=time.time())
        self._watch(self._runs[uid])
        log.debug("adopted run %s pid %d", uid, info.pid)
        return True

    def finished_status(self, uid: str, info: RunInfo) -> RunStatus:
        """Outcome of a run that is no longer alive (it ended while no server watched it): from
        its exit file; else Failed with exit code None and message "lost while the server was down
        …". The end time lies between the last sighting on record (the previous server's last
        poll, ``sightings_file``; else the run's start) and now: the exit record's time or the log
        file's last modification (both writable by the job's account) held in that interval."""
        now = time.time()
        last_seen = max(float(info.started_at or 0.0), self.previous_sighting)
        rec = read_exit_file(info.exit_path)
        if rec is not None:
            code, sig = rec["exitCode"], rec["signal"]
            state = SUCCEEDED if code == 0 else FAILED
            return RunStatus(uid, state, code, _observed_end(rec.get("finishedAt"), last_seen, now),
                             rec.get("error") or _describe_code(code, sig))
        try:
            mtime: Optional[float] = os.path.getmtime(info.log_path)
        except OSError:
            mtime = None
        return RunStatus(uid, FAILED, None, _observed_end(mtime, last_seen, now), LOST_MESSAGE)

    def find_started(self, uid: str, log_path: str) -> Optional[RunInfo]:
        """After a restart: a run of ``uid`` that an earlier server process started but never
        recorded (it died between :meth:`start` and storing the RunInfo). ``log_path``: as it
        was given to :meth:`start` (it determines the exit file).

        Returns the RunInfo of the live wrapper (found in /proc by its command line, which names
        the run's exit file; ``started_at`` from its start time); or, when the run has ended
        since, a RunInfo with ``pid`` 0 and ``started_at`` 0.0 whose exit file holds the outcome
        (:meth:`adopt` refuses it, :meth:`finished_status` reads it); or None when no run was
        started (start it now). Without /proc only the exit file is looked at."""
        log_path = os.path.abspath(log_path)
        exit_path = self._exit_path(LaunchSpec(uid=uid, key="", argv=[], cwd="", log_path=log_path), log_path)
        # The exit file's element is followed by "--" (or, for a job run as its owner, "--exit-fd").
        needle = b"\0".join([os.fsencode(RUNNER), b"--exit-file", os.fsencode(exit_path), b"--"])
        entries = os.scandir("/proc") if os.path.isdir("/proc") else []
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if needle not in f.read():
                        continue
                pid = int(entry.name)
                pgid = os.getpgid(pid)
            except (OSError, ProcessLookupError):
                continue
            st = _read_stat(pid)
            if st is None or st[0] in ("Z", "X", "x"):
                continue
            return RunInfo(pid=pid, pgid=pgid, start_ticks=st[1], log_path=log_path, exit_path=exit_path,
                           started_at=_boot_time() + st[1] / os.sysconf("SC_CLK_TCK"))
        if read_exit_file(exit_path) is not None:
            return RunInfo(pid=0, pgid=0, start_ticks=0, log_path=log_path, exit_path=exit_path, started_at=0.0)
        return None

    def running(self) -> list[str]:
        """uids being tracked (started or adopted, not yet reported by :meth:`poll`)."""
        return list(self._runs)

    def info(self, uid: str) -> Optional[RunInfo]:
        """The RunInfo of a tracked run, or None."""
        run = self._runs.get(uid)
        return run.info if run else None
