"""The wrapper every local job runs under: ``python runner.py --exit-file PATH [--exit-fd N]
[--chdir DIR] -- argv...``.

It runs ``argv`` as its child (no shell), forwards SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 to it, waits, writes the
child's exit code atomically (temporary file + ``os.replace``) to ``PATH`` and exits with the same
code. A child killed by signal N is recorded as 128+N (the shell convention). If ``argv`` cannot be
executed, the code is 127 (not found) or 126 (not executable) and the reason goes to stderr.

The exit file is how the server learns the outcome of a run it did not start itself (after a
restart, the wrapper is no longer its child): ``{"exitCode": int, "signal": int | null,
"finishedAt": float}``, with ``"error"`` (a message) when the job could not be started.

Jobs as their owner (accounts.py): the service starts this wrapper as the job's owner and gives it
the exit file already open as descriptor N (``--exit-fd``; the file lives in the service's private
folder, which the owner cannot write; the wrapper marks it close-on-exec before it starts the job,
so the job never holds it), and the working directory to enter as the owner (``--chdir``), so that
the OS checks it for that user. The record is the wrapper's word on the job's exit code; the
service takes no end time from it that it did not observe itself (local.py, ``_observed_end``). Before running anything the wrapper checks
that it holds no capability (it refuses to run the job otherwise).

This module imports the standard library only, so that it runs under any Python (it is started by
file path with ``-I -S``, so files in the job's folder cannot shadow the modules it imports). It
imports nothing but modules that are already loaded when Python starts (``os``, ``sys``, ``time``,
``_signal``): one wrapper is started per job, and importing ``subprocess`` and ``json`` cost about
20 ms of CPU each time (BENCHMARKS.md, "The live service"). The child is started with
``os.posix_spawnp`` (stdin from /dev/null; the wrapper has no other descriptors open).
"""

from __future__ import annotations

import _signal as signal  # the C module: ``signal`` would import enum, re, functools, ...
import os
import sys
import time

# SIGUSR1 / SIGUSR2: a spot job's preemption notice (service_costs.py), sent to this wrapper only.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def _json_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or 0xD800 <= ord(ch) < 0xE000:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def write_exit_file(path: str, code: int, sig: int | None, error: str | None = None, fd: int | None = None) -> None:
    """Write ``{"exitCode", "signal", "finishedAt"[, "error"]}`` (JSON) to ``path`` atomically and
    durably; or, given ``fd`` (the file the service opened for it), into that file."""
    data = '{"exitCode": %d, "signal": %s, "finishedAt": %r%s}' % (
        int(code), "null" if sig is None else int(sig), time.time(),
        "" if error is None else ', "error": ' + _json_string(error))
    if fd is not None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data.encode(), 0)
        os.fsync(fd)
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


USAGE = "usage: runner.py --exit-file PATH [--exit-fd N] [--chdir DIR] -- COMMAND [ARG...]"


def _parse(argv: list[str]) -> tuple[str, dict, list[str]]:
    if len(argv) < 4 or argv[0] != "--exit-file" or "--" not in argv[2:]:
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    end = argv.index("--", 2)
    opts: dict = {}
    rest = argv[2:end]
    while rest:
        if len(rest) < 2 or rest[0] not in ("--exit-fd", "--chdir"):
            print(USAGE, file=sys.stderr)
            raise SystemExit(2)
        opts[rest[0]] = rest[1]
        rest = rest[2:]
    if end + 1 >= len(argv):
        print(USAGE, file=sys.stderr)
        raise SystemExit(2)
    return argv[1], opts, argv[end + 1:]


def _capabilities() -> str | None:
    """The first of the permitted, effective and ambient capability sets that is not empty
    (``"CapEff 000001ffffffffff"``), or None."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f.read().decode("ascii", "replace").splitlines():
                key, _, value = line.partition(":")
                if key in ("CapPrm", "CapEff", "CapAmb") and int(value.strip() or "0", 16):
                    return f"{key} {value.strip()}"
    except OSError:
        pass
    return None


def _fail(exit_file: str, fd: int | None, code: int, message: str) -> int:
    print(f"gpuqueue runner: {message}", file=sys.stderr, flush=True)
    write_exit_file(exit_file, code, None, message, fd)
    return code


def main(argv: list[str] | None = None) -> int:
    exit_file, opts, cmd = _parse(sys.argv[1:] if argv is None else argv)
    exit_fd = int(opts["--exit-fd"]) if "--exit-fd" in opts else None
    if exit_fd is not None:  # started as the job's owner (accounts.py)
        who = os.environ.get("USER") or f"uid {os.getuid()}"
        caps = _capabilities()
        if os.getuid() == 0 or os.geteuid() == 0 or caps is not None:
            return _fail(exit_file, exit_fd, 126, f"refusing to run the job with privileges left (uid "
                         f"{os.getuid()}, {caps or 'root'}): the service must start it as its owner")
        if "--chdir" in opts:
            try:
                os.chdir(opts["--chdir"])
            except OSError as e:
                return _fail(exit_file, exit_fd, 126, f"cannot enter the working directory {opts['--chdir']!r} "
                             f"as {who}: {e.strerror}")
    child: int | None = None
    pending: list[int] = []

    def forward(signum, _frame):
        if child is None:
            pending.append(signum)
        else:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    if exit_fd is not None:
        # The job must never hold the exit record open: it runs as the same account and could
        # write its own outcome and end time there (the service passed the descriptor to this
        # wrapper only, inheritable). Close-on-exec, so posix_spawn does not pass it on.
        os.set_inheritable(exit_fd, False)
    # Handlers first: a signal arriving while the child starts is forwarded once it exists. The
    # child gets the default dispositions back (setsigdef), as after exec.
    for s in FORWARDED:
        signal.signal(s, forward)
    try:
        child = os.posix_spawnp(
            cmd[0], cmd, os.environ,
            file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)],
            setsigdef=FORWARDED,
        )
    except OSError as e:
        code = 127 if isinstance(e, FileNotFoundError) else 126
        who = f" as {os.environ.get('USER') or 'uid %d' % os.getuid()}" if exit_fd is not None else ""
        return _fail(exit_file, exit_fd, code, f"cannot execute {cmd[0]!r}{who}: {e}")
    for s in pending:
        forward(s, None)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:  # pragma: no cover - nobody else waits for our child
            status = 255 << 8
            break
    rc = os.waitstatus_to_exitcode(status)
    sig = -rc if rc < 0 else None
    code = 128 + sig if sig is not None else rc
    write_exit_file(exit_file, code, sig, None, exit_fd)
    return code


if __name__ == "__main__":
    sys.exit(main())
