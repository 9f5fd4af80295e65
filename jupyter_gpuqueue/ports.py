"""``free_port()``: a TCP port on 127.0.0.1 for a server about to be started (the development
control plane's components, the benchmarks' servers, the tests' hubs and servers).

Not from the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768–60999 by
default on Linux): a port found there by binding to port 0 and closing can be taken by any
outgoing connection before the server binds it — seen with the test suite in two workers ("port
59621 is already in use", a hub's service that never came up). A random port below that range
instead, checked free by binding it; two processes picking at once collide only if they draw the
same one of some 12,000 ports at the same moment. Within one process a port is never handed out
twice: several picked before any server binds them (a hub's own port, its proxy's, its service's)
were once the same port ("the gpuqueue service through the proxy not up in time": the hub and its
service both given 29072).

Two processes can still draw the same port in the moment between the check and the server's bind
(seen once in CI: "the Jupyter server could not be started because port 20118 is not available"):
a starter that sees ``port_taken(log)`` after its server exited picks another port and starts again.
"""

from __future__ import annotations

import random
import re
import socket

LOW = 20000  # below: well-known and registered services people run on their machines
_handed_out: set[int] = set()  # by this process: a port picked may not be bound yet


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split()[:2])
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port(attempts: int = 200) -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the ephemeral range and never
    handed out before by this process (see the module docstring); the kernel's choice (bind to
    port 0) if none is found in ``attempts``."""
    lo, hi = _ephemeral_range()
    span = (LOW, lo) if lo - LOW >= 1000 else (hi + 1, 65536)
    rng = random.SystemRandom()
    for _ in range(attempts):
        port = rng.randrange(*span)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# jupyter_server's words ("... because port 20118 is not available."); the OS's (EADDRINUSE)
_TAKEN = re.compile(r"port \d+ is not available|address already in use", re.I)


def port_taken(log_text: str) -> bool:
    """Whether a server's log says it exited because its port was taken (the starter then picks
    another port and starts it again)."""
    return _TAKEN.search(log_text) is not None


__all__ = ["free_port", "port_taken"]
