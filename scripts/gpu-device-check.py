#!/usr/bin/env python3
"""The device check of issue 32 on a machine with NVIDIA GPUs: discovery = nvidia-smi -L, each job
on the GPU it is billed for, samples within 5 points / 64 MiB of nvidia-smi, cost = family price ×
run time, a waiting job starts within 2 s of the first job's end. Prints a short report; exit
status 0 when every check passed. See jupyter_gpuqueue/bench/gpu_check.py.

    python scripts/gpu-device-check.py [--job-seconds 20] [--report FILE]
"""

import sys

from jupyter_gpuqueue.bench.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
