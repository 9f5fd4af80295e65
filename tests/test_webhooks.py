"""A team's webhook (service/webhooks.py, ``PUT admin/webhooks/{namespace}``): against a real
server and a real HTTP receiver in the test, the team's jobs' started / finished / failed
notifications arrive as JSON ``{"event", "workload"}``; other teams' do not; the URL is stored in
the ledger's settings and audited; a receiver that hangs neither blocks nor fails the queue."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpuqueue.errors import ValidationError
from jupyter_gpuqueue.service.webhooks import parse_url, transition

API = ("gpuqueue", "api")


class Receiver:
    """A real HTTP server on a free loopback port recording the JSON bodies POSTed to it;
    ``delay`` seconds before each answer (a hanging receiver)."""

    def __init__(self, delay: float = 0.0):
        self.bodies: list[dict] = []
        self.delay = delay
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                body["_contentType"] = self.headers.get("Content-Type")
                outer.bodies.append(body)
                time.sleep(outer.delay)
                try:
                    self.send_response(204)
                    self.end_headers()
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, name: str) -> list[str]:
        return [b["event"] for b in self.bodies if b["workload"]["name"] == name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


async def call(jp_fetch, *parts, method="GET", body=None):
    kw = {"method": method}
    if body is not None:
        kw["body"] = json.dumps(body)
    resp = await jp_fetch(*API, *parts, **kw)
    return json.loads(resp.body)


async def error(jp_fetch, *parts, method="PUT", body=None) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, *parts, method=method, body=body)
    return e.value.code, json.loads(e.value.response.body)


async def wait_until(pred, timeout=30.0, what=""):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def job(name: str, code: str, queue: str = "team-a/team-a-queue") -> dict:
    return {"name": name, "localQueue": queue, "gpus": 1, "flavor": "nvidia-a100", "maxRuntime": "5m",
            "command": [sys.executable, "-c", code]}


async def test_webhook_receives_the_teams_job_notifications(jp_fetch, started, gpuqueue_service):
    receiver = Receiver()
    try:
        view = await call(jp_fetch, "admin", "webhooks", "team-a", method="PUT", body={"url": receiver.url})
        assert view["namespace"] == "team-a" and view["url"] == receiver.url and view["updatedBy"] == "alice"
        assert gpuqueue_service.ledger.setting("webhook:team-a")["url"] == receiver.url
        audit = (await call(jp_fetch, "admin", "audit"))["items"][0]
        assert audit["operation"] == "set-webhook" and audit["target"] == "namespace/team-a"
        assert audit["before"] == {"url": None} and audit["after"] == {"url": receiver.url}

        await call(jp_fetch, "workloads", method="POST", body=job("hook-ok", "import time; time.sleep(1)"))
        await call(jp_fetch, "workloads", method="POST", body=job("hook-bad", "import time; time.sleep(1); raise SystemExit(3)"))
        await wait_until(lambda: receiver.events("hook-ok") == ["started", "finished"]
                         and receiver.events("hook-bad") == ["started", "failed"], 30,
                         f"notifications: {[(b['event'], b['workload']['name']) for b in receiver.bodies]}")
        body = [b for b in receiver.bodies if b["event"] == "finished"][0]
        assert body["_contentType"] == "application/json"
        assert body["workload"]["namespace"] == "team-a" and body["workload"]["state"] == "Succeeded"
        failed = [b for b in receiver.bodies if b["event"] == "failed"][0]
        assert failed["workload"]["exitCode"] == 3

        # another team's jobs are not sent to team-a's URL
        await call(jp_fetch, "workloads", method="POST", body=job("other-team", "print(1)", "team-b/team-b-queue"))
        w = await call(jp_fetch, "workloads", "team-b", "other-team")
        deadline = time.monotonic() + 30
        while w["state"] not in ("Succeeded", "Failed"):
            assert time.monotonic() < deadline, w
            await asyncio.sleep(0.1)
            w = await call(jp_fetch, "workloads", "team-b", "other-team")
        assert gpuqueue_service.webhooks.drain()
        assert receiver.events("other-team") == []

        # removed: no more notifications
        view = await call(jp_fetch, "admin", "webhooks", "team-a", method="PUT", body={"url": None})
        assert view["url"] is None and gpuqueue_service.ledger.setting("webhook:team-a") is None
        n = len(receiver.bodies)
        await call(jp_fetch, "workloads", method="POST", body=job("after-removal", "print(1)"))
        await asyncio.sleep(2)
        assert gpuqueue_service.webhooks.drain() and len(receiver.bodies) == n
    finally:
        receiver.close()


async def test_a_hanging_receiver_neither_blocks_nor_fails_the_queue(jp_fetch, started, gpuqueue_service):
    receiver = Receiver(delay=30)
    gpuqueue_service.webhooks.timeout_seconds = 0.5
    try:
        await call(jp_fetch, "admin", "webhooks", "team-a", method="PUT", body={"url": receiver.url})
        await call(jp_fetch, "workloads", method="POST", body=job("slow-hook", "print('done')"))
        deadline = time.monotonic() + 30
        while True:
            t0 = time.monotonic()
            w = await call(jp_fetch, "workloads", "team-a", "slow-hook")
            assert time.monotonic() - t0 < 2.0  # the API answers while the receiver hangs
            if w["state"] == "Succeeded":
                break
            assert time.monotonic() < deadline, w
            await asyncio.sleep(0.1)
        await wait_until(lambda: receiver.events("slow-hook") == ["started", "finished"], 10)
        assert gpuqueue_service.webhooks.drain(5)  # each POST gave up after its timeout
    finally:
        receiver.close()


async def test_the_url_is_checked(jp_fetch, started):
    for bad in ("ftp://example.org/x", "not a url", "http://", "", "https://u@h/", "https://h/a b", 42,
                "https://h/" + "x" * 3000):
        code, body = await error(jp_fetch, "admin", "webhooks", "team-a", body={"url": bad})
        assert code == 400 and body["field"] == "url", (bad, body)
    code, body = await error(jp_fetch, "admin", "webhooks", "team-a", body={"link": "https://x"})
    assert code == 400 and body["field"] == "link"
    code, body = await error(jp_fetch, "admin", "webhooks", "no-such-team", body={"url": "https://example.org/"})
    assert code == 404 and body["field"] == "namespace"


def test_parse_url_and_transitions():
    assert parse_url({"url": "https://hooks.example.org/a?b=1"}) == "https://hooks.example.org/a?b=1"
    assert parse_url({"url": None}) is None
    with pytest.raises(ValidationError):
        parse_url({"url": "javascript:alert(1)"})
    running = {"state": "Running"}
    assert transition(None, running) == "started"
    assert transition(("Pending", 0), running) == "started"
    assert transition(("Running", 0), running) is None
    assert transition(("Running", 0), {"state": "Succeeded"}) == "finished"
    assert transition(("Running", 0), {"state": "Failed", "reason": "Error"}) == "failed"
    assert transition(("Running", 0), {"state": "Failed", "reason": "Preempted"}) == "preempted"  # a lease
    assert transition(("Running", 0), {"state": "Pending", "preemptions": {"count": 1}}) == "preempted"
    assert transition(("Pending", 1), {"state": "Pending", "preemptions": {"count": 1}}) is None
    assert transition(("Running", 0), {"state": "Cancelled"}) is None


def test_the_openapi_document_has_the_servers_url_pattern():
    import yaml

    from jupyter_gpuqueue.server.openapi import __file__ as openapi_py
    from jupyter_gpuqueue.service.webhooks import URL_PATTERN

    doc = yaml.safe_load(open(openapi_py.replace("openapi.py", "openapi.yaml")).read())
    schema = doc["components"]["schemas"]["WebhookRequest"]["properties"]["url"]
    assert schema["pattern"] == URL_PATTERN.pattern


async def test_a_preemption_is_sent_as_preempted(jp_fetch, started, gpuqueue_service):
    """A real preemption on the demo cluster: team-b's development job on all four H100s, then an
    experiment-high one; the victim is queued again and team-b's webhook hears "preempted"."""
    receiver = Receiver()
    try:
        await call(jp_fetch, "admin", "webhooks", "team-b", method="PUT", body={"url": receiver.url})
        await call(jp_fetch, "workloads", method="POST", body={
            "name": "victim", "localQueue": "team-b/team-b-queue", "gpus": 4, "flavor": "nvidia-h100",
            "priorityClass": "development", "maxRuntime": "10m",
            "command": [sys.executable, "-c", "import time; time.sleep(60)"]})
        await wait_until(lambda: receiver.events("victim") == ["started"], 30, "victim not started")
        await call(jp_fetch, "workloads", method="POST", body={
            "name": "urgent", "localQueue": "team-b/team-b-queue", "gpus": 1, "flavor": "nvidia-h100",
            "priorityClass": "experiment-high", "maxRuntime": "5m",
            "command": [sys.executable, "-c", "import time; time.sleep(30)"]})
        await wait_until(lambda: "preempted" in receiver.events("victim"), 30,
                         f"notifications: {[(b['event'], b['workload']['name']) for b in receiver.bodies]}")
        body = [b for b in receiver.bodies if b["event"] == "preempted"][0]
        assert body["workload"]["preemptions"]["count"] == 1
        assert receiver.events("victim").count("preempted") == 1
        await wait_until(lambda: receiver.events("urgent")[:1] == ["started"], 30, "urgent not started")
    finally:
        for name in ("victim", "urgent"):
            try:
                await call(jp_fetch, "workloads", "team-b", name, method="DELETE")
            except Exception:
                pass
        receiver.close()
