"""CPU seconds of each test file, its servers, hubs, browsers and jobs included: a pytest plugin for
finding where the suite's time goes (BENCHMARKS.md, "Test suite time").

The suite is CPU-bound on two cores (six workers keep both busy), so its wall time is its CPU time
divided among them; a file's own wall time says little at that load. Each xdist worker moves itself
into a cgroup (v1 ``cpuacct``) of the file it is about to run, so every process it starts from then
on (Jupyter servers, JupyterHub, Chromium, kube-apiserver, the jobs) is counted there, even after
they leave its process tree; at the end the controller prints the files by CPU seconds, and writes
``{file: seconds}`` as JSON where ``GPUQUEUE_CPU_BY_FILE`` names a file. A process started before
its file (a session fixture's control plane or browser) counts for the file that started it, and
tests/k8s/real is one unit, as tests/xdist_schedule.py schedules it. ``GPUQUEUE_CPU_BY=test``: by
test rather than by file (tests/k8s/real too); a module's hub, server or control plane counts for
the test that started it.

Needs root and ``/sys/fs/cgroup/cpuacct`` (cgroup v1); otherwise it says so and does nothing::

    PYTHONPATH=scripts bash scripts/test.sh -p pytest_cpu_by_file
"""

from __future__ import annotations

import json
import os
import sys

import pytest

ROOT = "/sys/fs/cgroup/cpuacct/gpuqueue-tests"
K8S_REAL = "tests/k8s/real/"
BY_TEST = os.environ.get("GPUQUEUE_CPU_BY") == "test"
_current: list = [None]


def _dir(unit: str) -> str:
    return os.path.join(ROOT, unit.replace("/", "%"))  # tests%hub%test_x.py (reversible)


def _usable() -> bool:
    return os.path.isdir(os.path.dirname(ROOT)) and os.access(os.path.dirname(ROOT), os.W_OK)


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") is None and _usable():  # the controller, or a run without xdist
        os.makedirs(ROOT, exist_ok=True)
        for name in os.listdir(ROOT):  # an earlier run's (empty now: their processes are gone)
            try:
                os.rmdir(os.path.join(ROOT, name))
            except OSError:
                pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if BY_TEST:
        unit = item.nodeid
    else:
        unit = item.nodeid.split("::", 1)[0]
        unit = K8S_REAL if unit.startswith(K8S_REAL) else unit
    if unit != _current[0] and _usable():
        os.makedirs(_dir(unit), exist_ok=True)
        with open(os.path.join(_dir(unit), "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        _current[0] = unit
    yield


def pytest_unconfigure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        return
    if not _usable():
        sys.stderr.write(f"pytest_cpu_by_file: no writable {os.path.dirname(ROOT)} (root and cgroup v1 cpuacct)\n")
        return
    seconds = {}
    for name in os.listdir(ROOT):
        try:
            with open(os.path.join(ROOT, name, "cpuacct.usage")) as f:
                seconds[name.replace("%", "/")] = int(f.read()) / 1e9
        except OSError:
            continue
    total = sum(seconds.values())
    sys.stderr.write(f"\nCPU seconds by test{'' if BY_TEST else ' file'} ({total:.0f} s in all):\n")
    for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:40]:
        sys.stderr.write(f"  {s:7.1f}  {name}\n")
    out = os.environ.get("GPUQUEUE_CPU_BY_FILE")
    if out:
        with open(out, "w") as f:
            json.dump(seconds, f, indent=1, sort_keys=True)
