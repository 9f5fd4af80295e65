"""A pre-imported Python that forks real ``jupyter server`` processes on request (tests only).

Importing jupyter_server takes 2-3 s of CPU on a small machine; the crash tests start a server
some 25 times. This process imports it once; each server is then a ``fork()`` of it that runs
jupyter_server's own ``main()`` with its own argv, environment, working directory and log, in a
new session (it is a real server process, killed with SIGKILL by the tests; nothing is shared
with the other servers except the already-imported code).

Protocol (one JSON object per line on stdin, one answer per line on stdout):
``{"op": "spawn", "argv": [...], "env": {...}, "cwd": path, "log": path}`` → ``{"pid": int}``;
``{"op": "wait", "pid": int}`` → ``{"status": int}`` (reaps it; blocks until it has exited).
The zygote exits at EOF. It must stay single-threaded (it forks).
"""

from __future__ import annotations

import json
import os
import sys

import jupyter_server.serverapp  # noqa: F401  (the point: imported once, before any fork)
import jupyter_gpuqueue.server.app  # noqa: F401
import jupyter_gpuqueue.service  # noqa: F401


def _child(cmd: dict) -> None:
    try:
        os.setsid()
        os.chdir(cmd["cwd"])
        os.environ.clear()
        os.environ.update(cmd["env"])
        log = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        sys.argv = ["jupyter-server", *cmd["argv"]]
        from jupyter_server.serverapp import main

        main()
    except BaseException as e:  # noqa: BLE001 - report anything in the server's log
        try:
            os.write(2, f"server_zygote child: {e!r}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(0)


def serve() -> None:
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "spawn":
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(cmd)
            answer = {"pid": pid}
        elif cmd["op"] == "wait":
            try:
                _, status = os.waitpid(int(cmd["pid"]), 0)
                answer = {"status": status}
            except ChildProcessError:
                answer = {"status": None}
        else:
            answer = {"error": f"unknown op {cmd['op']!r}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
