"""A notebook server's own activity (server/activity.py), the input of idle GPU reclaim.

The pure part (:class:`ExecutionTracker`) on message sequences as ipykernel sends them; then the
real thing: a real jupyter_server with a real ipykernel, driven by a kernel client as JupyterLab
drives it (a tab connecting sends ``kernel_info_request`` and ``comm_info_request``; completions
while typing) — none of that is activity — and a cell ``while True: time.sleep(0.5)`` — busy until
it is interrupted. Terminals: a real terminado pty, whose prompt (output) and resizes are not
activity, typing is. Last, :class:`ActivityReporter` against the same server's queue (standalone
mode, a NotebookLease of alice): the service holds what the server reports.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from jupyter_gpuqueue.server.activity import ActivityReporter, ExecutionTracker, ServerActivity, TerminalWatch
from jupyter_gpuqueue.server.forward import Forwarder

pytestmark = pytest.mark.timeout(180)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_only_execute_requests_are_executions():
    clock = Clock()
    t = ExecutionTracker(clock)
    assert t.snapshot() == (False, None)
    # A tab connects: kernel_info and comm_info, each busy then idle; completions while typing.
    for kind, mid in [("kernel_info_request", "k1"), ("comm_info_request", "c1"), ("complete_request", "x1"),
                      ("comm_msg", "w1")]:
        assert t.status("K", "busy", kind, mid) is False
        assert t.busy() is False
        t.status("K", "idle", kind, mid)
    assert t.snapshot() == (False, None)
    # A cell runs: busy from its busy to its own idle, whatever else the kernel answers meanwhile
    # (a debug_request on the control channel publishes busy/idle during the execution).
    assert t.status("K", "busy", "execute_request", "e1") is True
    clock.t += 5
    t.status("K", "busy", "debug_request", "d1")
    t.status("K", "idle", "debug_request", "d1")
    assert t.snapshot() == (True, None)
    assert t.status("K2", "busy", "execute_request", "e2") is False  # another kernel: not a new start
    t.status("K", "idle", "execute_request", "e1")
    assert t.snapshot() == (True, 1005.0)  # K2 still executes
    clock.t += 5
    t.status("K2", "idle", "execute_request", "e2")
    assert t.snapshot() == (False, 1010.0)
    # A restart ends an execution (its idle never comes); so does a kernel that goes away.
    t.status("K", "busy", "execute_request", "e3")
    clock.t += 1
    t.status("K", "starting", None, None)
    assert t.snapshot() == (False, 1011.0)
    t.status("K", "busy", "execute_request", "e4")
    clock.t += 1
    t.forget("K")
    assert t.snapshot() == (False, 1012.0)
    # A kernel first seen busy (executing before the watch attached): busy until it is not.
    t.assume_busy("K3")
    assert t.busy()
    clock.t += 1
    t.not_busy("K3")
    assert t.snapshot() == (False, 1013.0)
    t.assume_busy("K4")
    clock.t += 1
    t.status("K4", "idle", "execute_request", "older")
    assert t.snapshot() == (False, 1014.0)


async def _until(pred, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def _kernel(started):
    km = started.kernel_manager
    kid = await km.start_kernel(kernel_name="python3")
    client = km.get_kernel(kid).client()
    client.start_channels()
    await client.wait_for_ready(timeout=60)
    return km, kid, client


async def test_a_busy_kernel_is_activity_and_an_open_tab_is_not(started):
    km, kid, client = await _kernel(started)
    activity = ServerActivity(km)
    try:
        activity.scan()
        assert activity.report() == {"busy": False, "idleSeconds": None}
        # What an open tab does to the kernel: connect (kernel_info, comm_info), complete, inspect.
        for _ in range(3):
            for request in (client.kernel_info(), client.comm_info(), client.complete("impo", 4),
                            client.inspect("print", 5)):
                await client.get_shell_msg(timeout=30)
                assert request
        await asyncio.sleep(0.5)  # their status messages have arrived
        activity.scan()
        assert activity.report() == {"busy": False, "idleSeconds": None}
        assert km.get_kernel(kid).execution_state == "idle"

        # A cell that loops: busy, and stays busy while it runs.
        client.execute("import time\nwhile True:\n    time.sleep(0.5)")
        await _until(lambda: activity.report()["busy"], "the looping kernel is not busy")
        for _ in range(4):
            await asyncio.sleep(0.5)
            activity.scan()
            client.kernel_info()  # the tab reconnects meanwhile: still busy
            assert activity.report() == {"busy": True, "idleSeconds": 0.0}
        await km.interrupt_kernel(kid)
        await _until(lambda: not activity.report()["busy"], "the interrupted kernel is still busy")
        first = activity.report()["idleSeconds"]
        assert first is not None and first < 30
        await asyncio.sleep(0.3)
        assert activity.report()["idleSeconds"] > first  # the idle clock runs
    finally:
        activity.close()
        client.stop_channels()
        await km.shutdown_kernel(kid, now=True)


async def test_a_kernel_already_executing_when_watched_and_one_that_is_shut_down(started):
    km, kid, client = await _kernel(started)
    activity = ServerActivity(km)
    try:
        client.execute("import time\nwhile True:\n    time.sleep(0.5)")
        await _until(lambda: km.get_kernel(kid).execution_state == "busy", "not executing")
        activity.scan()  # attaches while the loop runs: jupyter_server says busy
        assert activity.report()["busy"]
        await km.shutdown_kernel(kid, now=True)
        activity.scan()
        report = activity.report()
        assert report["busy"] is False and report["idleSeconds"] is not None and report["idleSeconds"] < 30
    finally:
        activity.close()
        client.stop_channels()


def test_terminal_input_counts_its_output_and_resizes_do_not():
    from terminado import NamedTermManager

    manager = NamedTermManager(shell_command=["bash", "--norc", "-i"])
    name, term = manager.new_named_terminal()
    try:
        watch = TerminalWatch(manager)
        watch.scan()
        deadline = time.monotonic() + 30
        out = ""
        while "$" not in out and "#" not in out:  # the shell's prompt: output, not input
            assert time.monotonic() < deadline, out
            out += term.ptyproc.read(1024)
        term.ptyproc.setwinsize(40, 100)  # a tab resized (terminado's set_size)
        assert watch.last_input is None
        term.ptyproc.write("echo typed\r")  # what terminado's TermSocket does with "stdin"
        assert watch.last_input is not None
        watch.scan()  # wrapped once only
        first = watch.last_input
        term.ptyproc.write("x")
        assert watch.last_input >= first
    finally:
        term.ptyproc.terminate(force=True)


async def test_the_reporter_sends_the_servers_activity_to_the_queue(started, jp_fetch, jp_http_port, jp_base_url,
                                                                      gpuqueue_service):
    import json

    resp = await jp_fetch("gpuqueue", "api", "workloads", method="POST", body=json.dumps(
        {"kind": "NotebookLease", "name": "nb", "gpus": 1, "maxRuntime": "1h"}))
    lease = json.loads(resp.body)
    key = f"{lease['namespace']}/{lease['name']}"
    await _until(lambda: gpuqueue_service.get_workload(lease["namespace"], "nb")["state"] == "Running",
                 "the lease does not run")
    forwarder = Forwarder(f"http://127.0.0.1:{jp_http_port}{jp_base_url}", started.identity_provider.token)
    km, kid, client = await _kernel(started)
    reporter = ActivityReporter(forwarder, key, km, interval=30.0, scan_interval=0.1)
    reporter.start()
    try:
        uid = lease["uid"]
        await _until(lambda: uid in gpuqueue_service.idle.reports.by_uid, "no report reached the queue")
        assert gpuqueue_service.idle.reports.by_uid[uid][:2] == (False, None)
        # A cell starts: reported at once, not 30 s later.
        client.execute("import time\nwhile True:\n    time.sleep(0.5)")
        # (the kernel's start-up can flip busy and idle first: each flip is reported at once too, so
        # wait for the report of the execution, still well within the 30 s interval)
        await _until(lambda: reporter.sent == {"busy": True, "idleSeconds": 0.0}
                     and gpuqueue_service.idle.reports.by_uid[uid][0], "the execution was not reported at once",
                     timeout=20)
        # The lease ends: the queue answers 409, the reports stop.
        await jp_fetch("gpuqueue", "api", "workloads", lease["namespace"], "nb", method="DELETE")
        await km.interrupt_kernel(kid)
        reporter._wake.set()  # (the next report is due in 30 s: one now, as a new execution would)
        await _until(lambda: reporter.stopped_by == 409, "the reports did not stop at the lease's end")
    finally:
        reporter.stop()
        client.stop_channels()
        await km.shutdown_kernel(kid, now=True)
