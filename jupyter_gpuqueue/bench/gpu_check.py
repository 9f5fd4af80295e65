"""The device check (issue 32): the queue on a real NVIDIA GPU, asserted against ``nvidia-smi``.

Run on a machine with NVIDIA GPUs (``scripts/gpu-device-check.py``, or ``pytest -m gpu``; it
finishes within 5 minutes and prints a short report):

1. **Discovery** (``inventory/nvml.discover``) equals ``nvidia-smi -L``: the same GPUs, in the same
   order, with the same names and UUIDs (and MIG devices' UUIDs).
2. A real :class:`QueueService` (no configuration: one team owning the discovered GPUs; the SQLite
   ledger; the local backend's real processes; NVML sampling every second) runs one 1-GPU job per
   whole GPU (``job_seconds``, different lengths; ``torch`` bf16 matmuls where torch is there, else
   a CUDA context and an allocation through ``libcuda``), and a second-wave job that must wait.
3. **Each job's process is on the GPU the queue assigned**: the job prints its pid; ``nvidia-smi
   --query-compute-apps=pid,gpu_uuid --format=csv`` must list that pid on the UUID of the GPU its
   placement names (and its CUDA_VISIBLE_DEVICES is that UUID).
4. **Samples**: the service's utilization and memory samples of a running job's GPU are within
   ``util_points`` (5) points and ``memory_mib`` (64) MiB of ``nvidia-smi --query-gpu`` read at the
   nearest time (the median over the samples, the worst one reported).
5. **Cost** = the family's price (``gpu_families``, from nvidia-smi's name) × the run's time
   (``finishedAt - startedAt``), to the micro-dollar the view rounds to.
6. **The waiting job** is Pending while every GPU is held and starts within ``start_gap`` (2 s) of
   the first job's end.

Everything the check compares comes from the outside (nvidia-smi, /proc-visible pids, the job's own
output) against what the service says. ``smi`` names the nvidia-smi program and ``nvml`` the NVML
module (defaults: the real ones), so that the logic can be run against stand-ins where no GPU is
(tests/test_gpu_device_check.py): a fake is never evidence of the hardware, only of the logic.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..gpu_families import family_of

#: The job the check runs: prints its pid and device, then keeps its GPU busy for argv[1] seconds
#: with an allocation of argv[2] MiB (torch bf16 matmuls; without torch, a CUDA context and
#: cuMemAlloc through libcuda, no kernels).
JOB_CODE = r"""
import ctypes, json, os, sys, time
secs, mib = float(sys.argv[1]), int(sys.argv[2])
print(json.dumps({"pid": os.getpid(), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER")}), flush=True)
try:
    import torch
except ImportError:
    torch = None
if torch is not None and torch.cuda.is_available():
    keep = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + secs
    while time.time() < end:
        for _ in range(10):
            b = a @ a
        torch.cuda.synchronize()
    print("worked with torch", flush=True)
else:
    cuda = ctypes.CDLL("libcuda.so.1")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(mib * 2**20)) == 0
    time.sleep(secs)
    print("held a CUDA context", flush=True)
"""

SMI_L = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)]+)\)\s*$")
SMI_MIG = re.compile(r"^\s+MIG .*\(UUID: (MIG-[^)]+)\)\s*$")


def parse_smi_list(text: str) -> list[dict]:
    """``nvidia-smi -L`` → ``[{"index", "name", "uuid", "mig": [MIG UUIDs]}]`` in its order."""
    gpus: list[dict] = []
    for line in text.splitlines():
        m = SMI_L.match(line)
        if m:
            gpus.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3), "mig": []})
            continue
        m = SMI_MIG.match(line)
        if m and gpus:
            gpus[-1]["mig"].append(m.group(1))
    return gpus


def parse_csv(text: str) -> list[list[str]]:
    """nvidia-smi's ``--format=csv,noheader,nounits`` rows, cells stripped."""
    return [[c.strip() for c in row] for row in csv.reader(io.StringIO(text)) if row]


def discovery_differences(smi: list[dict], inventory) -> list[str]:
    """What differs between ``nvidia-smi -L`` and a discovered inventory (empty: they agree)."""
    found = [g for n in inventory.nodes for g in n.gpus] if inventory is not None else []
    found.sort(key=lambda g: g.index)
    out = []
    if [(g["index"], g["uuid"]) for g in smi] != [(g.index, g.uuid) for g in found]:
        out.append(f"GPUs: nvidia-smi {[(g['index'], g['uuid']) for g in smi]} vs discovered "
                   f"{[(g.index, g.uuid) for g in found]}")
    for s, g in zip(smi, found):
        if s["name"] != g.product:
            out.append(f"GPU {s['index']}: name {s['name']!r} vs {g.product!r}")
        if sorted(s["mig"]) != sorted(d.uuid for d in (g.mig or [])):
            out.append(f"GPU {s['index']}: MIG devices {s['mig']} vs {[d.uuid for d in g.mig or []]}")
    return out


def nearest_differences(samples: list[dict], readings: list[tuple[float, float, float]],
                        within: float = 1.5) -> tuple[list[float], list[float]]:
    """Utilization (points) and memory (MiB) differences between the service's samples (timeline
    dicts: ``at``, ``percent`` / ``memoryUsedMiB``) and nvidia-smi ``readings`` ``(t, percent,
    MiB)`` taken nearest in time (at most ``within`` seconds apart)."""
    util, mem = [], []
    if not readings:
        return util, mem
    for s in samples:
        t, pct, mib = min(readings, key=lambda r: abs(r[0] - s["at"]))
        if abs(t - s["at"]) > within:
            continue
        if s.get("percent") is not None:
            util.append(abs(s["percent"] - pct))
        if s.get("memoryUsedMiB") is not None:
            mem.append(abs(s["memoryUsedMiB"] - mib))
    return util, mem


@dataclass
class Report:
    """What the check found: ``lines`` (the printed report), ``failures`` (empty: passed)."""

    lines: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(line, flush=True)

    def check(self, ok: bool, what: str) -> bool:
        self.say(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failures.append(what)
        return ok

    @property
    def passed(self) -> bool:
        return not self.failures


class _Smi:
    def __init__(self, program: str):
        self.program = program

    def __call__(self, *args: str) -> str:
        return subprocess.run([self.program, *args], check=True, capture_output=True, text=True, timeout=30).stdout

    def gpus(self) -> dict[str, tuple[float, float, float]]:
        """uuid → (time, utilization %, memory used MiB) now."""
        t = time.time()
        rows = parse_csv(self("--query-gpu=uuid,utilization.gpu,memory.used", "--format=csv,noheader,nounits"))
        return {r[0]: (t, float(r[1]), float(r[2])) for r in rows if len(r) >= 3}

    def apps(self) -> dict[int, str]:
        """pid → GPU UUID of every compute process nvidia-smi lists."""
        rows = parse_csv(self("--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits"))
        return {int(r[0]): r[1] for r in rows if len(r) >= 2 and r[0].isdigit()}


async def _wait(pred: Callable[[], Any], timeout: float, step: float = 0.05) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        await asyncio.sleep(step)
    return None


def _job_line(svc, name: str) -> Optional[dict]:
    for line in svc.read_log("default", name, user="device-check")["text"].splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return None


async def _run(report: Report, smi: _Smi, nvml: Any, data_dir: str, job_seconds: float, util_points: float,
               memory_mib: float, start_gap: float, job_mib: int, python: str, job_code: str) -> None:
    from .. import inventory as inventory_module
    from ..inventory.nvml import NvmlSampler, discover
    from ..service.factory import create_service

    t0 = time.monotonic()
    listed = parse_smi_list(smi("-L"))
    inv = discover(nvml)
    report.say(f"nvidia-smi -L: {len(listed)} GPU(s): " + "; ".join(f"{g['index']} {g['name']} {g['uuid']}" for g in listed))
    try:
        driver = parse_csv(smi("--query-gpu=driver_version", "--format=csv,noheader"))[0][0]
    except Exception:  # noqa: BLE001 - the report says it is unknown
        driver = "?"
    report.say(f"driver {driver}; discovery took {time.monotonic() - t0:.2f} s")
    diffs = discovery_differences(listed, inv)
    report.check(not diffs and bool(listed), "discovery equals nvidia-smi -L" + (f": {diffs}" if diffs else ""))
    if inv is None:
        return
    whole = [g for n in inv.nodes for g in n.gpus if g.mig is None]
    if not whole:
        report.check(False, "a GPU not in MIG mode to run the jobs on (all are in MIG mode)")
        return
    original = inventory_module.discover
    inventory_module.discover = lambda: inv  # the service starts with the inventory just checked
    try:
        svc = create_service(config_paths=None, inventory_path=None, db_url=None, root_dir=data_dir,
                             data_dir=os.path.join(data_dir, "data"), default_local_queue="default/default-queue",
                             lease_priority_class=None, stop_grace_seconds=2.0)
    finally:
        inventory_module.discover = original
    sampler = NvmlSampler(nvml)
    svc.configure_costs(utilization_interval=1.0, utilization_sampler=sampler)
    await svc.start()
    try:
        await _jobs(report, svc, smi, whole, job_seconds, util_points, memory_mib, start_gap, job_mib, python, job_code)
    finally:
        await svc.stop()
        for uid in list(svc.backend.running()):
            svc.backend.stop(uid, "device check ends", 0.0)
    report.check(sampler.inits == 1 and sampler.shutdowns == 1,
                 f"NVML initialised once for the service's samples ({sampler.inits} init, {sampler.shutdowns} shutdown)")


async def _jobs(report: Report, svc, smi: _Smi, whole, job_seconds, util_points, memory_mib, start_gap, job_mib,
                python, job_code) -> None:
    uuid_of = {(n.name, str(g.index)): g.uuid for n in svc.inventory.nodes for g in n.gpus}
    first = []
    for i, _gpu in enumerate(whole):
        secs = job_seconds + 3.0 * i  # the first one ends first
        first.append(f"a{i}")
        svc.submit({"name": f"a{i}", "command": [python, "-c", job_code, str(secs), str(job_mib)], "gpus": 1,
                    "maxRuntimeSeconds": int(secs + 120)}, user="device-check")
    svc.submit({"name": "b", "command": [python, "-c", job_code, "5", str(job_mib)], "gpus": 1,
                "maxRuntimeSeconds": 300}, user="device-check")
    running = await _wait(lambda: all(svc.get_workload("default", n)["state"] == "Running" for n in first), 60)
    report.check(bool(running), f"{len(first)} job(s) running, one per GPU")
    b = svc.get_workload("default", "b")
    report.check(b["state"] == "Pending", f"the second-wave job waits while every GPU is held "
                 f"(state {b['state']}, position {b['positionInClusterQueue']}, reason {b['reason']})")
    # Each job's process on the GPU its placement names (nvidia-smi's own view, by pid).
    lines = await _wait(lambda: (lambda ls: ls if all(ls) else None)([_job_line(svc, n) for n in first]), 60)
    apps: dict[int, str] = {}
    for _ in range(120):  # until nvidia-smi lists every job's process (its CUDA context is up)
        apps = await asyncio.to_thread(smi.apps)
        if lines and all(ln["pid"] in apps for ln in lines):
            break
        await asyncio.sleep(0.5)
    for name, line in zip(first, lines or [{}] * len(first)):
        w = svc.get_workload("default", name)
        p = w["placement"][0]
        assigned = uuid_of.get((p["node"], p["devices"][0]))
        on = apps.get(line.get("pid"))
        report.check(on is not None and on == assigned == line.get("CUDA_VISIBLE_DEVICES") == w["visibleDevices"],
                     f"{name}: pid {line.get('pid')} on {on} (nvidia-smi); assigned GPU {p['devices'][0]} = {assigned}; "
                     f"CUDA_VISIBLE_DEVICES={line.get('CUDA_VISIBLE_DEVICES')}")
    # Samples against nvidia-smi at the nearest time, while the first job runs.
    name0 = first[0]
    gpu0 = uuid_of[(svc.get_workload("default", name0)["placement"][0]["node"],
                    svc.get_workload("default", name0)["placement"][0]["devices"][0])]
    readings = []
    while svc.get_workload("default", name0)["state"] == "Running":
        r = (await asyncio.to_thread(smi.gpus)).get(gpu0)
        if r:
            readings.append(r)
        await asyncio.sleep(0.5)
    t = svc.timeline("default", name0)
    util, mem = nearest_differences([{**s, "memoryUsedMiB": None} for s in t["utilization"]], readings)
    _, mem = nearest_differences([{**s, "percent": None} for s in t["memory"]], readings)
    report.check(bool(util) and statistics.median(util) <= util_points,
                 f"utilization samples vs nvidia-smi: {len(util)} pairs, median {_fmt(util)} points, "
                 f"worst {max(util, default=float('nan')):.1f} (limit {util_points})")
    report.check(bool(mem) and statistics.median(mem) <= memory_mib,
                 f"memory samples vs nvidia-smi: {len(mem)} pairs, median {_fmt(mem)} MiB, "
                 f"worst {max(mem, default=float('nan')):.1f} (limit {memory_mib})")
    # The waiting job starts within start_gap of the first job's end.
    await _wait(lambda: svc.get_workload("default", "b")["state"] in ("Running", "Succeeded", "Failed"), 60)
    a0, b = svc.get_workload("default", name0), svc.get_workload("default", "b")
    gap = (b["startedAt"] or float("inf")) - (a0["finishedAt"] or 0.0)
    report.check(0 <= gap <= start_gap, f"the waiting job started {gap:.3f} s after the first job's end "
                 f"(limit {start_gap} s)")
    # Cost = the family's price (from nvidia-smi's name) × the run's time (its billed interval,
    # which must be the run the service observed: startedAt → finishedAt).
    name = next((g["name"] for g in parse_smi_list(await asyncio.to_thread(smi, "-L")) if g["uuid"] == gpu0), "")
    fam = family_of(name)
    runs = svc.timeline("default", name0)["runs"]
    billed = sum((r["end"] or 0.0) - r["start"] for r in runs)
    observed = (a0["finishedAt"] or 0.0) - (a0["startedAt"] or 0.0)
    price = fam.usd_per_gpu_hour if fam else float("nan")
    expected = price * billed / 3600.0
    report.check(fam is not None and a0["pricePerHourUsd"] == price and abs(a0["costUsd"] - expected) <= 2e-6
                 and abs(billed - observed) <= 0.5,
                 f"{name0}: cost {a0['costUsd']:.6f} USD = {fam.flavor if fam else '?'} {price} USD/GPU-hour × "
                 f"{billed:.3f} s billed ({expected:.6f}); ran {observed:.3f} s")
    await _wait(lambda: all(svc.get_workload("default", n)["state"] != "Running" for n in [*first, "b"]), 120)


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def no_gpu_reason(smi: str = "nvidia-smi", nvml: Any = None) -> str:
    """Why the check cannot run here ("" when it can): no nvidia-smi, no NVML (no driver), no GPU."""
    import shutil

    if shutil.which(smi) is None:
        return f"no NVIDIA GPU here: {smi} is not on the PATH"
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as e:
            return f"no NVML binding (nvidia-ml-py): {e}"
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError: LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED, ...
        return f"no NVIDIA GPU here: nvmlInit failed ({e})"
    try:
        n = int(nvml.nvmlDeviceGetCount())
    finally:
        nvml.nvmlShutdown()
    return "" if n else "no NVIDIA GPU here: NVML finds none"


def run_check(*, smi: str = "nvidia-smi", nvml: Any = None, job_seconds: float = 20.0, util_points: float = 5.0,
              memory_mib: float = 64.0, start_gap: float = 2.0, job_mib: int = 1024,
              python: Optional[str] = None, data_dir: Optional[str] = None, job_code: str = JOB_CODE) -> Report:
    """Run the check (module docstring) and return its :class:`Report` (printed as it goes);
    :func:`no_gpu_reason` first says whether it can run here.
    ``job_code``: the jobs' Python code (``JOB_CODE``; argv: seconds, MiB; its first line of
    output a JSON object with its ``pid`` and ``CUDA_VISIBLE_DEVICES``)."""
    report = Report()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuqueue-device-check-") as tmp:
        asyncio.run(_run(report, _Smi(smi), nvml, data_dir or tmp, job_seconds, util_points, memory_mib, start_gap,
                         job_mib, python or sys.executable, job_code))
    report.say(f"{'PASSED' if report.passed else 'FAILED'} in {time.monotonic() - t0:.1f} s"
               + (f": {len(report.failures)} failure(s)" if report.failures else ""))
    return report


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job-seconds", type=float, default=20.0, help="run time of the first job (20)")
    ap.add_argument("--report", help="also write the report to this file")
    args = ap.parse_args(argv)
    reason = no_gpu_reason()
    if reason:
        print(f"not run: {reason}", flush=True)
        return 2
    report = run_check(job_seconds=args.job_seconds)
    if args.report:
        with open(args.report, "w") as f:
            f.write("\n".join(report.lines) + "\n")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
