"""The estimates' worker process (``service/estimate_worker.py`` says what and why): read a request,
run the estimator's forward runs, write the answer; until end of input.

Run as ``python -m jupyter_gpuqueue.service.estimate_worker_main [NICE]``.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
from typing import IO, Optional

from .estimate_worker import read_frame, write_frame
from .estimates import Estimates, encode_result


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """Answer requests from ``stdin`` on ``stdout`` until end of input; returns 0."""
    est = Estimates.worker_side()
    while True:
        frame = read_frame(stdin)
        if frame is None:
            return 0
        if not frame:  # a ping (WorkerProcess.start): loaded and listening
            write_frame(stdout, b"")
            continue
        try:
            request = pickle.loads(frame)
            est.configure_worker(request["settings"])
            est._observations.extend(request["observations"])
            version, now, results, faster, duration, cpu = est._compute(request["job"])
            answer = encode_result(version, now, results, faster, duration, cpu, request["settings"]["rows_per_chunk"])
        except Exception:
            logging.getLogger("jupyter_gpuqueue.estimates").exception("gpuqueue: start-time estimates failed")
            answer = b""
        write_frame(stdout, answer)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    nice = int(argv[0]) if argv else 0
    if nice:
        try:
            os.nice(nice)
        except OSError:  # not allowed here: compute at the server's priority
            pass
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="[estimates worker %(process)d] %(levelname)s %(message)s")
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed may corrupt the frames
    return serve(stdin, stdout)


if __name__ == "__main__":
    sys.exit(main())
