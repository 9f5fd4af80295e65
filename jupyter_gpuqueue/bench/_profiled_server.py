"""Run ``jupyter server`` under cProfile: ``python -m jupyter_gpuqueue.bench._profiled_server OUT
[server arguments...]``. The profile (of the server's main thread) is written to OUT on SIGUSR1
and when the server exits. Used by ``BenchServer(profile_path=...)``."""

from __future__ import annotations

import atexit
import cProfile
import os
import signal
import sys


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    prof = cProfile.Profile()

    def dump() -> None:
        prof.disable()
        prof.dump_stats(out)

    def on_usr1(_signum, _frame) -> None:
        prof.disable()
        prof.dump_stats(out + ".tmp")
        os.replace(out + ".tmp", out)
        prof.enable()

    atexit.register(dump)
    signal.signal(signal.SIGUSR1, on_usr1)
    from jupyter_server.serverapp import main as server_main

    sys.argv = ["jupyter-server", *argv]
    prof.enable()
    server_main()


if __name__ == "__main__":
    main()
