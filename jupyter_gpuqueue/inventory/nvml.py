"""GPU discovery through NVML (``nvidia-ml-py``, imported as ``pynvml``).

One node, named ``socket.gethostname()`` (on a host with several GPU models, one node per model,
named ``<host>-<family flavor>``, all labelled with the host's name), with every GPU NVML reports: index, UUID, product name,
memory, and, for a GPU in MIG mode, its MIG devices (UUID; profile ``<slices>g.<memory>gb`` named
the way NVIDIA's k8s-device-plugin / GPU Feature Discovery name them: ``gpuInstanceSliceCount`` and
the MIG device's share of the GPU's memory rounded up to eighths, times the GPU's memory in whole
GB). Node labels follow GPU Feature Discovery: ``nvidia.com/gpu.product`` (the GPUs' name,
spaces replaced by '-'), ``nvidia.com/gpu.count``, ``nvidia.com/gpu.memory`` (MiB),
``nvidia.com/mig.strategy`` ("mixed" if any GPU is in MIG mode, else "none"), and
``kubernetes.io/hostname``.

Sampling: :class:`NvmlSampler` (the service's, ``service/costs.py``: NVML initialised once, at
the first sample, and shut down when the service stops, never per pass: each ``nvmlInit`` costs
~17 ms on the event loop), :func:`gpu_samples` (one pass with its own init and shutdown) and
:func:`utilization_rates` (utilization only). Memory is read as nvidia-smi shows it:
``nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)``, whose ``used`` leaves out the memory
the driver reserves (v1 counts it as used: ~480 MiB above nvidia-smi on an idle H100); v1 where v2
is not there (drivers before R510, NVML_ERROR_FUNCTION_NOT_FOUND) or not supported.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from typing import Any, NamedTuple, Optional

from ..engine.model import GpuDevice, Inventory, MigDevice, Node
from ..gpu_families import flavor_for_product

log = logging.getLogger(__name__)

MIB = 1024 * 1024
GIB = 1024 * 1024 * 1024
NVML_DEVICE_MIG_ENABLE = 1
#: ``nvmlMemory_v2`` (nvml.h: ``NVML_STRUCT_VERSION(Memory, 2)`` = sizeof(nvmlMemory_v2_t) | 2 << 24),
#: for an NVML module that does not export it.
NVML_MEMORY_V2 = 40 | (2 << 24)
# nvmlGpuInstanceProfile ids of the whole-GPU profiles, largest first (nvml.h).
_WHOLE_GPU_PROFILES = ((4, "7 slices"), (3, "4 slices"))


def mig_memory_gb(total_memory_bytes: int, mig_memory_mib: int) -> int:
    """The ``<memory>gb`` of a MIG profile name: the MIG device's share of the GPU's memory, rounded
    up to eighths, times the GPU's memory in whole GB (rounded up), rounded (NVIDIA go-nvlib
    ``getMigMemorySizeGB``). A100-80GB: 9856 MiB → 10, 40192 MiB → 40; A100-40GB: 4864 MiB → 5."""
    if total_memory_bytes <= 0:
        return int(math.ceil(mig_memory_mib / 1024))
    frac = (mig_memory_mib * MIB) / total_memory_bytes
    frac = math.ceil(frac * 8) / 8
    total_gb = (total_memory_bytes + GIB - 1) // GIB
    return int(round(frac * total_gb))


def memory_info(nvml: Any, handle: Any) -> Any:
    """``nvmlDeviceGetMemoryInfo`` of ``handle`` as nvidia-smi shows it: version 2 (``.used``
    without the driver's reserved memory, ``.reserved`` apart), else version 1 (``.used``
    includes it) where the driver or the binding has no v2 (FUNCTION_NOT_FOUND, NOT_SUPPORTED,
    an older ``pynvml`` without the ``version`` argument). Raises what v1 raises."""
    try:
        return nvml.nvmlDeviceGetMemoryInfo(handle, version=getattr(nvml, "nvmlMemory_v2", NVML_MEMORY_V2))
    except Exception as e:  # NVMLError FUNCTION_NOT_FOUND / NOT_SUPPORTED / ARGUMENT_VERSION_MISMATCH, TypeError
        log.debug("NVML memory v2 unavailable (%s); reading v1", e)
    return nvml.nvmlDeviceGetMemoryInfo(handle)


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _max_slices(nvml: Any, handle: Any) -> int:
    fn = getattr(nvml, "nvmlDeviceGetGpuInstanceProfileInfo", None)
    if fn is None:
        return 7
    for profile_id, _what in _WHOLE_GPU_PROFILES:
        try:
            info = fn(handle, profile_id)
            n = int(getattr(info, "sliceCount", 0))
            if 1 <= n <= 7:
                return n
        except Exception:  # NVML_ERROR_NOT_SUPPORTED / INVALID_ARGUMENT: not this profile
            continue
    return 7


def _mig_devices(nvml: Any, handle: Any, total_bytes: int) -> Optional[list[MigDevice]]:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # NVML_ERROR_NOT_SUPPORTED: no MIG on this GPU
        return None
    if current != NVML_DEVICE_MIG_ENABLE:
        return None
    out: list[MigDevice] = []
    for j in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
        except Exception:  # NVML_ERROR_NOT_FOUND: no MIG device at this index
            continue
        uuid = _text(nvml.nvmlDeviceGetUUID(mh))
        attrs = nvml.nvmlDeviceGetAttributes(mh)
        slices = int(attrs.gpuInstanceSliceCount)
        gb = mig_memory_gb(total_bytes, int(attrs.memorySizeMB))
        out.append(MigDevice(uuid=uuid, profile=f"{slices}g.{gb}gb", slices=slices))
    return out


def _discover(nvml: Any) -> Optional[Inventory]:
    gpus: list[GpuDevice] = []
    for i in range(int(nvml.nvmlDeviceGetCount())):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            index = int(nvml.nvmlDeviceGetIndex(h)) if hasattr(nvml, "nvmlDeviceGetIndex") else i
            uuid = _text(nvml.nvmlDeviceGetUUID(h))
            name = _text(nvml.nvmlDeviceGetName(h))
            total = int(nvml.nvmlDeviceGetMemoryInfo(h).total)
            mig = _mig_devices(nvml, h, total)
            max_slices = _max_slices(nvml, h) if mig is not None else 7
        except Exception as e:  # one broken GPU (e.g. fallen off the bus) must not hide the others
            log.debug("NVML: skipping GPU %d: %s", i, e)
            continue
        gpus.append(GpuDevice(index=index, uuid=uuid, product=name, memory_mib=total // MIB,
                              mig=mig, max_slices=max_slices))
    if not gpus:
        return None
    host = socket.gethostname()
    by_product: dict[str, list[GpuDevice]] = {}
    for g in gpus:
        by_product.setdefault(g.product, []).append(g)
    nodes = []
    for product, group in by_product.items():
        labels = {
            "kubernetes.io/hostname": host,
            "nvidia.com/gpu.product": product.replace(" ", "-"),
            "nvidia.com/gpu.count": str(len(group)),
            "nvidia.com/gpu.memory": str(group[0].memory_mib),
            "nvidia.com/mig.strategy": "mixed" if any(g.mig is not None for g in group) else "none",
        }
        # A host with several models: one node per model, so that each model's GPUs are a
        # ResourceFlavor of their own (flavors select nodes by nvidia.com/gpu.product) and
        # billed as what they are.
        name = host if len(by_product) == 1 else f"{host}-{flavor_for_product(product, group[0].memory_mib)}"
        nodes.append(Node(name=name, labels=labels, gpus=group))
    return Inventory(nodes=nodes, source="nvml")


def discover(nvml: Any = None) -> Optional[Inventory]:
    """The GPUs of this machine as an Inventory (``source="nvml"``), or None when NVML is absent
    (no driver / no ``pynvml``) or reports no GPU. Never raises; reasons are logged at debug level.

    ``nvml``: the ``pynvml`` module (default) or any object with the same functions (nvmlInit,
    nvmlShutdown, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex, nvmlDeviceGetIndex,
    nvmlDeviceGetUUID, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo, nvmlDeviceGetMigMode,
    nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetAttributes,
    optionally nvmlDeviceGetGpuInstanceProfileInfo).
    """
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError as e:
            log.debug("NVML discovery: pynvml not importable: %s", e)
            return None
    try:
        nvml.nvmlInit()
    except Exception as e:
        log.debug("NVML discovery: nvmlInit failed: %s", e)
        return None
    try:
        return _discover(nvml)
    except Exception as e:
        log.debug("NVML discovery failed: %s", e, exc_info=True)
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def utilization_rates(uuids, nvml: Any = None) -> dict[str, float]:
    """GPU utilization in percent (``nvmlDeviceGetUtilizationRates().gpu``: the share of the last
    sample period in which a kernel ran) of each GPU UUID in ``uuids`` that NVML can answer for.

    Devices NVML cannot sample (MIG devices: NVML_ERROR_NOT_SUPPORTED; a GPU gone) are left out, and
    without NVML the answer is ``{}``: a utilization is never invented. ``nvml``: the ``pynvml``
    module (default) or an object with nvmlInit, nvmlShutdown, nvmlDeviceGetHandleByUUID and
    nvmlDeviceGetUtilizationRates. Never raises."""
    samples = gpu_samples(uuids, nvml)
    return {uuid: s.percent for uuid, s in samples.items() if s.percent is not None}


class DeviceSample(NamedTuple):
    """What one NVML pass saw of one device (:func:`gpu_samples`). ``percent``: GPU utilization
    (``nvmlDeviceGetUtilizationRates().gpu``, 0-100; None where NVML cannot say, e.g. a MIG
    device: NVML_ERROR_NOT_SUPPORTED). ``memory_used_mib`` / ``memory_total_mib``: the device's
    memory in use and in all, MiB (``nvmlDeviceGetMemoryInfo``'s ``.used`` / ``.total`` bytes /
    2**20, version 2 where there is one, as nvidia-smi shows it: :func:`memory_info`; a MIG
    device's handle answers for the MIG device's own memory); None where NVML did not answer."""

    percent: Optional[float]
    memory_used_mib: Optional[float]
    memory_total_mib: Optional[float]


def _handle(nvml: Any, uuid: str) -> Any:
    return nvml.nvmlDeviceGetHandleByUUID(uuid.encode() if isinstance(uuid, str) else uuid)


def _sample(nvml: Any, uuid: str, handles: Optional[dict] = None) -> Optional[DeviceSample]:
    try:
        h = handles.get(uuid) if handles is not None else None
        if h is None:
            h = _handle(nvml, uuid)
    except Exception as e:  # NOT_FOUND, GPU_IS_LOST, ...: nothing is known of this device
        log.debug("NVML sample of %s: %s", uuid, e)
        return None
    percent: Optional[float] = None
    try:
        rate = float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        percent = rate if 0.0 <= rate <= 100.0 else None
    except Exception as e:  # NOT_SUPPORTED (a MIG device), GPU_IS_LOST
        log.debug("NVML utilization of %s: %s", uuid, e)
    used = total = None
    try:
        info = memory_info(nvml, h)
        used_bytes, total_bytes = int(info.used), int(info.total)
        if 0 <= used_bytes and (total_bytes <= 0 or used_bytes <= total_bytes):
            used = round(used_bytes / MIB, 1)
            total = round(total_bytes / MIB, 1) if total_bytes > 0 else None
    except Exception as e:  # GPU_IS_LOST, NOT_SUPPORTED
        log.debug("NVML memory of %s: %s", uuid, e)
    if percent is None and used is None:
        if handles is not None:
            handles.pop(uuid, None)  # looked up again next time (a GPU reset gives a new handle)
        return None
    if handles is not None:
        handles[uuid] = h
    return DeviceSample(percent, used, total)


def gpu_samples(uuids, nvml: Any = None) -> dict[str, DeviceSample]:
    """One NVML pass over the devices (GPU or MIG UUIDs) in ``uuids``: a :class:`DeviceSample`
    (utilization and memory) of each device NVML answers for, by UUID.

    A device NVML cannot find or answer for at all (NOT_FOUND, GPU_IS_LOST, ...) is left out; a
    value NVML does not give (a MIG device's utilization) is None; without NVML the answer is
    ``{}``: nothing is ever invented. ``nvml``: the ``pynvml`` module (default) or an object with
    nvmlInit, nvmlShutdown, nvmlDeviceGetHandleByUUID, nvmlDeviceGetUtilizationRates and
    nvmlDeviceGetMemoryInfo (a struct with ``.total``, ``.free``, ``.used`` in bytes). Never raises."""
    uuids = [u for u in dict.fromkeys(uuids) if u]
    if not uuids:
        return {}
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return {}
    try:
        nvml.nvmlInit()
    except Exception as e:
        log.debug("NVML samples: nvmlInit failed: %s", e)
        return {}
    out: dict[str, DeviceSample] = {}
    try:
        for uuid in uuids:
            sample = _sample(nvml, uuid)
            if sample is not None:
                out[uuid] = sample
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return out


class NvmlSampler:
    """The service's NVML samples (``service/costs.py``): a callable ``uuids -> {uuid:
    DeviceSample}`` like :func:`gpu_samples`, but with NVML initialised once, at the first call,
    and shut down by :meth:`close` (the service's stop), not at every pass; device handles are
    kept between passes (dropped when a device stops answering). Where ``nvmlInit`` fails (no
    driver) a pass answers ``{}`` and the next try is ``retry_seconds`` later. Thread-safe.

    ``nvml``: the ``pynvml`` module (default) or an object with the same functions.
    ``inits`` / ``shutdowns``: how many times NVML was initialised / shut down (tests, metrics)."""

    retry_seconds = 60.0

    def __init__(self, nvml: Any = None):
        self._nvml = nvml
        self._lock = threading.Lock()
        self._ready = False
        self._failed_at: Optional[float] = None
        self._handles: dict[str, Any] = {}
        self.inits = self.shutdowns = 0

    def _start(self) -> Optional[Any]:
        if self._ready:
            return self._nvml
        if self._failed_at is not None and time.monotonic() - self._failed_at < self.retry_seconds:
            return None
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                self._failed_at = time.monotonic()
                return None
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
        except Exception as e:
            log.debug("NVML samples: nvmlInit failed: %s", e)
            self._failed_at = time.monotonic()
            return None
        self.inits += 1
        self._ready, self._failed_at = True, None
        return self._nvml

    def __call__(self, uuids) -> dict[str, DeviceSample]:
        uuids = [u for u in dict.fromkeys(uuids) if u]
        if not uuids:
            return {}
        with self._lock:
            nvml = self._start()
            if nvml is None:
                return {}
            out: dict[str, DeviceSample] = {}
            for uuid in uuids:
                sample = _sample(nvml, uuid, self._handles)
                if sample is not None:
                    out[uuid] = sample
            return out

    def close(self) -> None:
        """Shut NVML down if this sampler initialised it (the service stops); a later call
        initialises it again."""
        with self._lock:
            if not self._ready:
                return
            self._ready = False
            self._handles.clear()
            try:
                self._nvml.nvmlShutdown()
            except Exception as e:  # pragma: no cover - the driver went away meanwhile
                log.debug("NVML shutdown: %s", e)
            self.shutdowns += 1
