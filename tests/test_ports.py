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


def test_a_server_whose_port_was_taken_is_started_on_another(tmp_path):
    """The race free_port() cannot close (CI, once: "port 20118 is not available"): a port taken
    by someone else between the pick and the bind. The bench server starts on another port."""
    import socket

    from jupyter_gpuqueue.bench.server import BenchServer

    squatter = socket.socket()
    server = BenchServer(workdir=str(tmp_path / "bench"))
    try:
        squatter.bind(("127.0.0.1", server.port))  # as if another process took it first
        squatter.listen()
        taken = server.port
        with server:
            assert server.port != taken
            assert server.info()["mode"]
    finally:
        squatter.close()


def test_port_taken_reads_jupyter_servers_and_the_oss_words():
    assert ports.port_taken("[C ServerApp] ERROR: the Jupyter server could not be started because port 20118 "
                            "is not available.")
    assert ports.port_taken("OSError: [Errno 98] Address already in use")
    assert not ports.port_taken("[I ServerApp] Jupyter Server 2.14 is running at http://127.0.0.1:20118/")
    assert not ports.port_taken("auth_state is enabled, but encryption is not available: no key")
