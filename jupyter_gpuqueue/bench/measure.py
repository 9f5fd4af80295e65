"""Small measuring helpers shared by the benchmarks: percentiles, process CPU time, load."""

from __future__ import annotations

import math
import os
from typing import Optional, Sequence


def percentile(values: Sequence[float], p: float) -> Optional[float]:
    """The ``p``-th percentile (0-100, nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def mean(values: Sequence[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def process_cpu_seconds(pid: Optional[int], children: bool = False) -> Optional[float]:
    """User + system CPU seconds of process ``pid`` from /proc/<pid>/stat (with ``children``:
    plus those of its children it has waited for, e.g. the local backend's job wrappers); None
    when unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = data[data.rfind(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + ((cutime + cstime) if children else 0)) / ticks


def own_cpu_seconds() -> float:
    """CPU seconds used by this process so far (user + system)."""
    t = os.times()
    return t.user + t.system


def load_average() -> tuple[float, float, float]:
    """The 1-, 5- and 15-minute load averages (``uptime``)."""
    return os.getloadavg()


def fmt(value: Optional[float], unit: str = "", digits: int = 2) -> str:
    """``value`` with ``digits`` decimals and ``unit``, or "-" for None."""
    if value is None:
        return "-"
    return f"{value:.{digits}f}{unit}"
