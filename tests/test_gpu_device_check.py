"""The device check (issue 32, ``jupyter_gpuqueue/bench/gpu_check.py``).

- ``test_the_device_check_on_a_real_gpu`` (marker ``gpu``) runs it where NVML finds a GPU, and is
  skipped with the reason everywhere else (here: no driver).
- The others run its logic against stand-ins: the stand-in NVML (tests/test_inventory.py's, plus
  the sampling functions) and a stand-in ``nvidia-smi`` (a script) that answers as the real one
  does, its compute processes read from the jobs' real environments in /proc. They show the
  check's parsing, matching and limits at work, and that it fails when nvidia-smi and the queue
  disagree; they are no evidence of the hardware (that is the ``gpu`` test's, on a lent machine).
"""

from __future__ import annotations

import json
import sys

import pynvml
import pytest
from test_inventory import FakeNvml

from jupyter_gpuqueue.bench import gpu_check
from jupyter_gpuqueue.inventory.nvml import discover

MIB = 1024 * 1024


@pytest.mark.gpu
def test_the_device_check_on_a_real_gpu():
    reason = gpu_check.no_gpu_reason()
    if reason:
        pytest.skip(reason)
    report = gpu_check.run_check()
    assert report.passed, report.failures


# -------------------------------------------------------------------------------- with stand-ins

UUIDS = ["GPU-11111111-2222-4333-8444-555555555555", "GPU-66666666-7777-4888-9999-000000000000"]
NAME = "NVIDIA H100 80GB HBM3"
JOB_CODE = r"""
import json, os, sys, time
print(json.dumps({"pid": os.getpid(), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}), flush=True)
time.sleep(float(sys.argv[1]))  # device-check-job
"""

FAKE_SMI = r'''#!PYTHON
"""A stand-in nvidia-smi: the GPUs of $FAKE_SMI_STATE; compute processes from /proc (each job's
own CUDA_VISIBLE_DEVICES, as the driver would place it)."""
import json, os, sys
state = json.load(open(os.environ["FAKE_SMI_STATE"]))
args = sys.argv[1:]
if args == ["-L"]:
    for i, u in enumerate(state["uuids"]):
        print(f"GPU {i}: {state['name']} (UUID: {u})")
elif args[0] == "--query-gpu=driver_version":
    print("580.159.04")
elif args[0].startswith("--query-gpu=uuid,utilization.gpu,memory.used"):
    for u in state["uuids"]:
        print(f"{u}, {state['util']}, {state['mem']}")
elif args[0].startswith("--query-compute-apps=pid,gpu_uuid"):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            env = dict(e.split("=", 1) for e in open(f"/proc/{pid}/environ", "rb").read().decode().split("\0") if "=" in e)
        except OSError:
            continue
        if b"device-check-job" in cmd and env.get("CUDA_VISIBLE_DEVICES"):
            print(f"{pid}, {state.get('apps_uuid') or env['CUDA_VISIBLE_DEVICES']}")
else:
    sys.exit(f"fake nvidia-smi: {args}")
'''


class StandInNvml(FakeNvml):
    """Two H100s (discovery: FakeNvml) that the sampler reads: 99 % busy, 1500 MiB in use (v2)."""

    def __init__(self):
        super().__init__(gpus=[{"uuid": u, "name": NAME, "mib": 81559, "mig": "unsupported"} for u in UUIDS])

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("gpu", UUIDS.index(uuid.decode()))

    def nvmlDeviceGetUtilizationRates(self, h):
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = 99, 40
        return u

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        m = pynvml.c_nvmlMemory_v2_t() if version else pynvml.c_nvmlMemory_t()
        m.total, m.used = 81559 * MIB, 1500 * MIB
        m.free = m.total - m.used
        return m


def _run(tmp_path, monkeypatch, **state):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.replace("PYTHON", sys.executable))
    smi.chmod(0o755)
    path = tmp_path / "smi.json"
    path.write_text(json.dumps({"uuids": UUIDS, "name": NAME, "util": 97, "mem": 1480, **state}))
    monkeypatch.setenv("FAKE_SMI_STATE", str(path))
    return gpu_check.run_check(smi=str(smi), nvml=StandInNvml(), job_seconds=4.0, job_code=JOB_CODE,
                               data_dir=str(tmp_path / "check"))


def test_the_checks_logic_passes_where_nvidia_smi_and_the_queue_agree(tmp_path, monkeypatch, capsys):
    report = _run(tmp_path, monkeypatch)
    assert report.passed, report.failures
    text = capsys.readouterr().out
    for what in ("discovery equals nvidia-smi -L", "2 job(s) running, one per GPU", "the second-wave job waits",
                 f"a0: pid", f"on {UUIDS[0]} (nvidia-smi); assigned GPU 0 = {UUIDS[0]}",
                 f"a1: pid", f"on {UUIDS[1]} (nvidia-smi); assigned GPU 1 = {UUIDS[1]}",
                 "utilization samples vs nvidia-smi", "median 2.0 points", "memory samples vs nvidia-smi",
                 "median 20.0 MiB", "the waiting job started", "cost", "nvidia-h100 3.75 USD/GPU-hour",
                 "NVML initialised once", "PASSED"):
        assert what in text, (what, text)


def test_the_check_fails_where_nvidia_smi_disagrees(tmp_path, monkeypatch):
    """Processes on another GPU than assigned, utilization 20 points off, memory 100 MiB off."""
    report = _run(tmp_path, monkeypatch, apps_uuid=UUIDS[1], util=79, mem=1600)
    failed = " | ".join(report.failures)
    assert not report.passed
    assert f"a0: pid" in failed and f"on {UUIDS[1]} (nvidia-smi); assigned GPU 0 = {UUIDS[0]}" in failed
    assert "utilization samples" in failed and "memory samples" in failed
    assert "a1: pid" not in failed and "cost" not in failed and "waiting job started" not in failed


def test_without_a_gpu_the_script_says_why_and_does_not_run(capsys):
    import os

    reason = gpu_check.no_gpu_reason()
    if not reason:
        pytest.skip("a GPU is here: the gpu test runs the check")
    assert gpu_check.main([]) == 2
    assert capsys.readouterr().out.strip() == f"not run: {reason}"
    assert "is not on the PATH" in gpu_check.no_gpu_reason(smi=os.devnull + "/nvidia-smi")


def test_parsing_nvidia_smi():
    text = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)\n"
            "  MIG 3g.40gb     Device  0: (UUID: MIG-bbbb)\n"
            "  MIG 1g.10gb     Device  1: (UUID: MIG-cccc)\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-dddd)\n")
    assert gpu_check.parse_smi_list(text) == [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaa", "mig": ["MIG-bbbb", "MIG-cccc"]},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-dddd", "mig": []},
    ]
    inv = discover(FakeNvml(gpus=[
        {"uuid": "GPU-aaaa", "name": "NVIDIA A100-SXM4-80GB", "mib": 81920,
         "mig": {0: ("MIG-bbbb", 3, 40192), 1: ("MIG-cccc", 1, 9856)}},
        {"uuid": "GPU-dddd", "name": "NVIDIA H100 80GB HBM3", "mib": 81559, "mig": "unsupported"},
    ]))
    assert gpu_check.discovery_differences(gpu_check.parse_smi_list(text), inv) == []
    other = text.replace("MIG-cccc", "MIG-eeee").replace("H100 80GB HBM3", "H100 PCIe")
    diffs = gpu_check.discovery_differences(gpu_check.parse_smi_list(other), inv)
    assert len(diffs) == 2 and "MIG devices" in diffs[0] and "H100 PCIe" in diffs[1]
    assert gpu_check.parse_csv("123, GPU-x\n456, GPU-y\n") == [["123", "GPU-x"], ["456", "GPU-y"]]
    util, mem = gpu_check.nearest_differences(
        [{"at": 10.0, "percent": 99.0, "memoryUsedMiB": 1500.0}, {"at": 50.0, "percent": 0.0, "memoryUsedMiB": 0.0}],
        [(9.6, 97.0, 1480.0), (11.0, 10.0, 0.0)])
    assert (util, mem) == ([2.0], [20.0])  # the nearest reading; none near the second sample
