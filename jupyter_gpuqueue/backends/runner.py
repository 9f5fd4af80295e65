"""The wrapper every local job runs under: ``python runner.py --exit-file PATH -- argv...``.

It runs ``argv`` as its child (no shell), forwards SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 to it, waits, writes the
child's exit code atomically (temporary file + ``os.replace``) to ``PATH`` and exits with the same
code. A child killed by signal N is recorded as 128+N (the shell convention). If ``argv`` cannot be
executed, the code is 127 (not found) or 126 (not executable) and the reason goes to stderr.

The exit file is how the server learns the outcome of a run it did not start itself (after a
restart, the wrapper is no longer its child): ``{"exitCode": int, "signal": int | null,
"finishedAt": float}``.

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


def write_exit_file(path: str, code: int, sig: int | None) -> None:
    """Write ``{"exitCode", "signal", "finishedAt"}`` (JSON) to ``path`` atomically and durably."""
    tmp = f"{path}.tmp.{os.getpid()}"
    data = '{"exitCode": %d, "signal": %s, "finishedAt": %r}' % (
        int(code), "null" if sig is None else int(sig), time.time())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _parse(argv: list[str]) -> tuple[str, list[str]]:
    if len(argv) < 4 or argv[0] != "--exit-file" or argv[2] != "--":
        print("usage: runner.py --exit-file PATH -- COMMAND [ARG...]", file=sys.stderr)
        raise SystemExit(2)
    return argv[1], argv[3:]


def main(argv: list[str] | None = None) -> int:
    exit_file, cmd = _parse(sys.argv[1:] if argv is None else argv)
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
        print(f"gpuqueue runner: cannot execute {cmd[0]!r}: {e}", file=sys.stderr, flush=True)
        write_exit_file(exit_file, code, None)
        return code
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
    write_exit_file(exit_file, code, sig)
    return code


if __name__ == "__main__":
    sys.exit(main())
