"""jupyter_gpuqueue/ports.py: ports for the servers we start are taken outside the kernel's
ephemeral range, where an outgoing connection could take them between the pick and the bind."""

import socket

from jupyter_gpuqueue import ports


def test_free_port_is_outside_the_ephemeral_range_and_can_be_bound():
    lo, hi = ports._ephemeral_range()
    picked = {ports.free_port() for _ in range(50)}
    assert len(picked) > 40  # random, not one port over and over
    for port in picked:
        assert not lo <= port <= hi and 1024 < port < 65536, port
    with socket.socket() as s:
        s.bind(("127.0.0.1", min(picked)))


def test_a_port_in_use_is_not_picked(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        draws = iter([taken, taken, 23456])
        monkeypatch.setattr(ports.random.SystemRandom, "randrange", lambda self, a, b: next(draws))
        monkeypatch.setattr(ports, "_ephemeral_range", lambda: (60000, 61000))
        # (taken is in the kernel's range here; what is checked is that a bound port is skipped)
        assert ports.free_port() == 23456


def test_a_port_handed_out_is_not_handed_out_again(monkeypatch):
    """Ports picked one after another before any is bound (a hub's, its proxy's, its service's)
    are distinct even when the random draw repeats."""
    monkeypatch.setattr(ports, "_handed_out", set())
    draws = iter([24680, 24680, 24680, 24682])
    monkeypatch.setattr(ports.random.SystemRandom, "randrange", lambda self, a, b: next(draws))
    monkeypatch.setattr(ports, "_ephemeral_range", lambda: (60000, 61000))
    assert [ports.free_port(), ports.free_port()] == [24680, 24682]
