"""The REST API and event stream against a real server, service and local backend (docs/rest-api.md)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import pytest
import yaml
from jupyter_server.auth.identity import IdentityProvider, User
from tornado.httpclient import HTTPClientError

from jupyter_gpuqueue.server.handlers import OPENAPI_PATH

API = ("gpuqueue", "api")
PY = sys.executable
USER_HEADER = "X-Gpuqueue-Test-User"


class HeaderUserIdentityProvider(IdentityProvider):
    """Token authentication as usual; the user is named by the X-Gpuqueue-Test-User header, so that
    one test server sees several users (jupyter_server's own provider has a single user)."""

    def generate_anonymous_user(self, handler):
        name = handler.request.headers.get(USER_HEADER) or "alice"
        return User(username=name, name=name, display_name=name)

    def get_user_cookie(self, handler):
        return None  # every request says who it is


# -- helpers -------------------------------------------------------------------------------------


async def call(jp_fetch, *parts, method="GET", body=None, headers=None, params=None):
    """(status, parsed JSON body or text, response headers); never raises for HTTP errors."""
    kwargs = {"method": method, "headers": headers, "params": params}
    if body is not None:
        kwargs["body"] = body if isinstance(body, (str, bytes)) else json.dumps(body)
    elif method in ("POST", "PUT", "PATCH"):
        kwargs["body"] = ""
    try:
        resp = await jp_fetch(*API, *parts, **kwargs)
    except HTTPClientError as e:
        resp = e.response
        if resp is None:
            raise
    text = resp.body.decode("utf-8") if resp.body else ""
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = text
    return resp.code, data, resp.headers


async def ok(jp_fetch, *parts, expect=200, **kwargs):
    status, data, _ = await call(jp_fetch, *parts, **kwargs)
    assert status == expect, (status, data)
    return data


async def wait_for_state(jp_fetch, ns, name, states, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        wl = await ok(jp_fetch, "workloads", ns, name)
        if wl["state"] in states:
            return wl
        assert time.monotonic() < deadline, f"{ns}/{name} stuck in {wl['state']}: {wl}"
        await asyncio.sleep(0.2)


def command_job(code: str, **extra) -> dict:
    req = {"command": [PY, "-c", code], "gpus": 1, "maxRuntime": "5m"}
    req.update(extra)
    return req


@pytest.fixture
def openapi_doc():
    with open(OPENAPI_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture
def check_schema(openapi_doc):
    """check_schema(name, instance): validate against components.schemas[name] (OpenAPI 3.0)."""
    from openapi_schema_validator import OAS30Validator

    def check(name: str, instance):
        schema = {"$ref": f"#/components/schemas/{name}", "components": openapi_doc["components"]}
        OAS30Validator(schema).validate(instance)

    return check


async def workload_count(jp_fetch) -> int:
    return len((await ok(jp_fetch, "workloads"))["items"])


# -- reading -------------------------------------------------------------------------------------


async def test_info_queues_inventory_prices_match_the_schemas(jp_fetch, started, check_schema):
    info = await ok(jp_fetch, "info")
    check_schema("Info", info)
    assert info["user"] == "alice"
    assert info["localQueues"] and info["flavors"]
    assert info["defaultLocalQueue"] in {f"{q['namespace']}/{q['name']}" for q in info["localQueues"]}

    queues = await ok(jp_fetch, "queues")
    check_schema("Queues", queues)
    assert queues["clusterQueues"]
    inventory = await ok(jp_fetch, "inventory")
    check_schema("InventoryView", inventory)
    assert inventory["summary"] and all(s["free"] <= s["total"] for s in inventory["summary"])
    prices = await ok(jp_fetch, "prices")
    check_schema("Prices", prices)
    assert prices["currency"] == "USD" and prices["default"] > 0


async def test_estimate(jp_fetch, started, check_schema):
    est = await ok(jp_fetch, "estimate", method="POST", body={"gpus": 2, "maxRuntime": "30m"})
    check_schema("Estimate", est)
    assert est["quantity"] == 2 and est["maxRuntimeSeconds"] == 1800
    assert est["costUsd"] == pytest.approx(est["pricePerHourUsd"] * 0.5, rel=1e-3)
    assert await workload_count(jp_fetch) == 0  # nothing created


# -- submit, list, get, cancel, logs -------------------------------------------------------------


async def test_submit_then_list_get_and_shapes(jp_fetch, started, check_schema):
    status, wl, headers = await call(
        jp_fetch, "workloads", method="POST",
        body=command_job("import time; time.sleep(0.2)", name="shape-check", env={"SEED": "1"}),
    )
    assert status == 201, wl
    check_schema("Workload", wl)
    assert wl["name"] == "shape-check" and wl["owner"] == "alice"
    assert wl["state"] in ("Pending", "Admitted", "Running")
    assert wl["podSets"][0]["requests"] == {"nvidia.com/gpu": "1"}
    assert wl["maxRuntimeSeconds"] == 300 and wl["estimatedCostUsd"] > 0
    assert headers["Location"].endswith(f"gpuqueue/api/workloads/{wl['namespace']}/shape-check")

    listed = await ok(jp_fetch, "workloads", params={"mine": "true"})
    check_schema("WorkloadList", listed)
    assert [w["name"] for w in listed["items"]] == ["shape-check"]
    other_ns = await ok(jp_fetch, "workloads", params={"namespace": "no-such-team"})
    assert other_ns["items"] == []

    got = await ok(jp_fetch, "workloads", wl["namespace"], "shape-check")
    check_schema("Workload", got)
    assert got["uid"] == wl["uid"]

    done = await wait_for_state(jp_fetch, wl["namespace"], "shape-check", ("Succeeded", "Failed"))
    assert done["state"] == "Succeeded", done
    finished = await ok(jp_fetch, "workloads", params={"state": "Succeeded"})
    assert [w["name"] for w in finished["items"]] == ["shape-check"]
    assert (await ok(jp_fetch, "workloads", params={"state": "Pending,Running"}))["items"] == []

    # the name is taken now
    status, err, _ = await call(jp_fetch, "workloads", method="POST", body=command_job("pass", name="shape-check"))
    assert status == 409 and err["reason"] == "Conflict", err


async def test_job_succeeds_with_log_and_cost(jp_fetch, started, check_schema):
    wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                  body=command_job("import time; print('hi', flush=True); time.sleep(0.3)"))
    done = await wait_for_state(jp_fetch, wl["namespace"], wl["name"], ("Succeeded", "Failed", "Cancelled"))
    assert done["state"] == "Succeeded", done
    assert done["exitCode"] == 0
    assert done["admission"] and done["visibleDevices"]
    assert done["startedAt"] and done["finishedAt"] >= done["startedAt"]
    assert done["costUsd"] > 0
    assert done["costUsd"] <= done["estimatedCostUsd"]

    log = await ok(jp_fetch, "workloads", wl["namespace"], wl["name"], "logs")
    check_schema("LogChunk", log)
    assert "hi" in log["text"]
    assert log["eof"] is True and log["nextOffset"] == log["size"]
    tail = await ok(jp_fetch, "workloads", wl["namespace"], wl["name"], "logs",
                    params={"offset": str(log["size"] - 3)})
    assert tail["text"] == log["text"][-3:]

    timeline = await ok(jp_fetch, "workloads", wl["namespace"], wl["name"], "timeline")
    check_schema("Timeline", timeline)
    assert [e["type"] for e in timeline["events"]] == ["Submitted", "Admitted", "Started", "Succeeded"]
    assert [r["outcome"] for r in timeline["runs"]] == ["succeeded"]
    await ok(jp_fetch, "workloads", wl["namespace"], "no-such-job", "timeline", expect=404)


async def test_cancel_running_job(jp_fetch, started):
    wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                  body=command_job("import time; print('up', flush=True); time.sleep(60)", name="sleeper"))
    await wait_for_state(jp_fetch, wl["namespace"], "sleeper", ("Running",))
    cancelled = await ok(jp_fetch, "workloads", wl["namespace"], "sleeper", method="DELETE")
    assert cancelled["state"] == "Cancelled"
    again = await ok(jp_fetch, "workloads", wl["namespace"], "sleeper", method="DELETE")
    assert again["state"] == "Cancelled" and again["finishedAt"] == cancelled["finishedAt"]
    # the GPU comes back once the process is gone
    deadline = time.monotonic() + 30
    while True:
        inv = await ok(jp_fetch, "inventory")
        held = [g for n in inv["nodes"] for g in n["gpus"] if g.get("assignedTo") == f"{wl['namespace']}/sleeper"]
        if not held:
            break
        assert time.monotonic() < deadline, held
        await asyncio.sleep(0.2)


async def test_missing_workload_is_404(jp_fetch, started):
    for parts, method in [
        (("workloads", "team-a", "nope"), "GET"),
        (("workloads", "team-a", "nope"), "DELETE"),
        (("workloads", "team-a", "nope", "logs"), "GET"),
    ]:
        status, err, _ = await call(jp_fetch, *parts, method=method)
        assert status == 404 and err["reason"] == "NotFound", (parts, method, err)
    status, err, _ = await call(jp_fetch, "no-such-endpoint")
    assert status == 404 and err["field"] == "path"


# -- manifests -----------------------------------------------------------------------------------


def job_manifest(namespace: str, queue: str, name: str) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  labels:
    kueue.x-k8s.io/queue-name: {queue}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: python:3.11
          command: ["{PY}", "-c", "print('from a manifest')"]
          resources:
            limits:
              nvidia.com/gpu: 1
"""


async def test_submit_manifest_as_yaml_and_as_json(jp_fetch, started):
    info = await ok(jp_fetch, "info")
    ns, queue = info["defaultLocalQueue"].split("/")
    wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                  body=job_manifest(ns, queue, "from-yaml"), headers={"Content-Type": "application/yaml"})
    assert (wl["namespace"], wl["name"]) == (ns, "from-yaml")
    assert wl["podSets"][0]["requests"]["nvidia.com/gpu"] == "1"
    wl2 = await ok(jp_fetch, "workloads", method="POST", expect=201,
                   body={"manifest": job_manifest(ns, queue, "from-json")})
    assert wl2["name"] == "from-json"
    both = job_manifest(ns, queue, "multi-1") + "---\n" + job_manifest(ns, queue, "multi-2")
    many = await ok(jp_fetch, "workloads", method="POST", expect=201, body=both,
                    headers={"Content-Type": "text/yaml"})
    assert sorted(w["name"] for w in many["items"]) == ["multi-1", "multi-2"]
    done = await wait_for_state(jp_fetch, ns, "from-yaml", ("Succeeded", "Failed"))
    assert done["state"] == "Succeeded", done


# -- bad input -----------------------------------------------------------------------------------

BAD_SUBMISSIONS = [
    ({"gpus": 0}, "gpus"),
    ({"gpus": -2}, "gpus"),
    ({"gpus": 10_000}, "gpus"),  # exceeds max quota
    ({"flavor": "nvidia-nonexistent"}, "flavor"),
    ({"localQueue": "team-a/no-such-queue"}, "localQueue"),
    ({"localQueue": "not-a-path"}, "localQueue"),
    ({"priorityClass": "no-such-priority"}, "priorityClass"),
    ({"command": ["gpuqueue-no-such-executable"]}, "command"),
    ({"command": None, "script": "no/such/script.py"}, "script"),
    ({"name": "Not_A_DNS_Label"}, "name"),
    ({"maxRuntime": "ten minutes"}, "maxRuntime"),
    ({"migProfile": "9g.99gb"}, "migProfile"),
    ({"script": "x.py"}, "command"),  # both command and script
    ({"env": {"A": 1}}, "env"),
]


@pytest.mark.parametrize("change,field", BAD_SUBMISSIONS, ids=[f for _, f in BAD_SUBMISSIONS])
async def test_bad_submission_names_the_field_and_creates_nothing(jp_fetch, started, change, field):
    body = command_job("print(1)")
    body.update(change)
    body = {k: v for k, v in body.items() if v is not None}
    status, err, _ = await call(jp_fetch, "workloads", method="POST", body=body)
    assert status == 400, err
    assert err["reason"] == "Invalid" and err["field"] == field, err
    assert err["message"]
    assert await workload_count(jp_fetch) == 0
    if field not in ("command", "script", "name", "env", "priorityClass"):  # estimate validates these too
        status, err, _ = await call(jp_fetch, "estimate", method="POST", body=body)
        assert status == 400 and err["field"] == field, err


BAD_BODIES = [
    ("{not json", {}, "body"),
    ("[1, 2]", {}, "body"),
    ("", {}, "body"),
    (json.dumps({"manifest": "kind: [unclosed"}), {}, "manifest"),
    (json.dumps({"manifest": "- just\n- a list\n"}), {}, "manifest"),
    (json.dumps({"manifest": 42}), {}, "manifest"),
    ("just a string", {"Content-Type": "application/yaml"}, "body"),
    ("a: [1\n", {"Content-Type": "application/yaml"}, "body"),
]


@pytest.mark.parametrize("body,headers,field", BAD_BODIES)
async def test_malformed_body_is_400_naming_the_field(jp_fetch, started, body, headers, field):
    status, err, _ = await call(jp_fetch, "workloads", method="POST", body=body, headers=headers)
    assert status == 400 and err["field"] == field, err
    assert await workload_count(jp_fetch) == 0


async def test_bad_query_arguments(jp_fetch, started):
    status, err, _ = await call(jp_fetch, "workloads", params={"state": "Sleeping"})
    assert status == 400 and err["field"] == "state", err
    status, err, _ = await call(jp_fetch, "workloads", params={"mine": "maybe"})
    assert status == 400 and err["field"] == "mine", err
    wl = await ok(jp_fetch, "workloads", method="POST", expect=201, body=command_job("print(1)"))
    for params, field in [({"offset": "-1"}, "offset"), ({"offset": "x"}, "offset"), ({"limit": "0"}, "limit")]:
        status, err, _ = await call(jp_fetch, "workloads", wl["namespace"], wl["name"], "logs", params=params)
        assert status == 400 and err["field"] == field, (params, err)


async def test_oversized_body_is_413(jp_fetch, started):
    big = command_job("print(1)", env={"PAD": "x" * (1 << 20)})
    status, err, _ = await call(jp_fetch, "workloads", method="POST", body=big)
    assert status == 413, err
    assert err["reason"] == "PayloadTooLarge" and err["field"] == "body"
    assert await workload_count(jp_fetch) == 0


# -- authentication and ownership ----------------------------------------------------------------


async def test_unauthenticated_requests_are_refused(jp_fetch, jp_ws_fetch, started):
    no_auth = {"Authorization": ""}
    for parts, method, body in [
        (("info",), "GET", None),
        (("workloads",), "GET", None),
        (("workloads",), "POST", command_job("print(1)")),
        (("workloads", "team-a", "x"), "DELETE", None),
        (("openapi.json",), "GET", None),
    ]:
        status, _, _ = await call(jp_fetch, *parts, method=method, body=body, headers=dict(no_auth))
        assert status in (401, 403), (parts, status)
    with pytest.raises(HTTPClientError) as e:
        await jp_ws_fetch(*API, "events", headers=dict(no_auth))
    assert e.value.code in (401, 403)
    assert await workload_count(jp_fetch) == 0


class TestOwnership:
    @pytest.fixture
    def gpuqueue_server_config(self):
        return {"identity_provider_class": HeaderUserIdentityProvider}

    async def test_only_the_owner_cancels_and_reads_logs(self, jp_fetch, started):
        alice, bob = {USER_HEADER: "alice"}, {USER_HEADER: "bob"}
        assert (await ok(jp_fetch, "info", headers=dict(bob)))["user"] == "bob"
        wl = await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice),
                      body=command_job("import time; time.sleep(30)", name="alices-job"))
        ns = wl["namespace"]
        # a team-mate sees the job, its position and cost ...
        seen = await ok(jp_fetch, "workloads", ns, "alices-job", headers=dict(bob))
        assert seen["owner"] == "alice"
        assert (await ok(jp_fetch, "workloads", params={"mine": "true"}, headers=dict(bob)))["items"] == []
        # ... but cannot cancel it or read its output
        status, err, _ = await call(jp_fetch, "workloads", ns, "alices-job", method="DELETE", headers=dict(bob))
        assert status == 403 and err["reason"] == "Forbidden", err
        status, err, _ = await call(jp_fetch, "workloads", ns, "alices-job", "logs", headers=dict(bob))
        assert status == 403, err
        assert (await ok(jp_fetch, "workloads", ns, "alices-job"))["state"] != "Cancelled"
        done = await ok(jp_fetch, "workloads", ns, "alices-job", method="DELETE", headers=dict(alice))
        assert done["state"] == "Cancelled"


# -- OpenAPI -------------------------------------------------------------------------------------


async def test_openapi_document_is_valid_and_served(jp_fetch, started, openapi_doc):
    from openapi_spec_validator import validate

    validate(openapi_doc)
    served = await ok(jp_fetch, "openapi.json")
    assert served == openapi_doc
    status, text, headers = await call(jp_fetch, "openapi.yaml")
    assert status == 200 and headers["Content-Type"].startswith("application/yaml")
    assert yaml.safe_load(text) == openapi_doc
    documented = set(openapi_doc["paths"])
    for path in ["/info", "/workloads", "/workloads/{namespace}/{name}", "/workloads/{namespace}/{name}/logs",
                 "/estimate", "/queues", "/inventory", "/prices", "/openapi.json", "/events"]:
        assert path in documented
    assert set(openapi_doc["paths"]["/workloads"]) >= {"get", "post"}
    assert set(openapi_doc["paths"]["/workloads/{namespace}/{name}"]) >= {"get", "delete"}


# -- events --------------------------------------------------------------------------------------


async def test_websocket_streams_workload_events(jp_fetch, jp_ws_fetch, started, check_schema):
    ws = await jp_ws_fetch(*API, "events")
    try:
        hello = json.loads(await asyncio.wait_for(ws.read_message(), 10))
        assert hello == {"type": "hello", "user": "alice"}
        wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                      body=command_job("print('event')", name="evented"))
        seen_states = []
        types = set()
        deadline = time.monotonic() + 60
        while "Succeeded" not in seen_states:
            assert time.monotonic() < deadline, seen_states
            msg = await asyncio.wait_for(ws.read_message(), 30)
            assert msg is not None, "the server closed the event stream"
            event = json.loads(msg)
            check_schema("Event", event)
            types.add(event["type"])
            if event["type"] == "workload" and event["workload"]["name"] == "evented":
                check_schema("Workload", event["workload"])
                assert event["workload"]["uid"] == wl["uid"]
                seen_states.append(event["workload"]["state"])
        assert seen_states[0] in ("Pending", "Admitted", "Running")
        assert "queues" in types
    finally:
        ws.close()


async def test_closed_websocket_is_unsubscribed(jp_fetch, jp_ws_fetch, gpuqueue_service):
    before = len(gpuqueue_service.events._subscribers)
    ws = await jp_ws_fetch(*API, "events")
    await asyncio.wait_for(ws.read_message(), 10)
    assert len(gpuqueue_service.events._subscribers) == before + 1
    ws.close()
    deadline = time.monotonic() + 10
    while len(gpuqueue_service.events._subscribers) != before:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    # the service keeps working for others
    await ok(jp_fetch, "workloads", method="POST", expect=201, body=command_job("print(1)"))


# -- configuration -------------------------------------------------------------------------------


class TestSmallBodyLimit:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config):
        return {**gpuqueue_config, "max_body_bytes": 256}

    async def test_max_body_bytes_is_configurable(self, jp_fetch, started):
        status, err, _ = await call(jp_fetch, "workloads", method="POST",
                                    body=command_job("print(1)", env={"PAD": "x" * 300}))
        assert status == 413 and err["field"] == "body" and "256" in err["message"], err
        await ok(jp_fetch, "workloads", method="POST", expect=201, body=command_job("print(1)"))


class TestInvalidConfiguration:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config, tmp_path):
        return {**gpuqueue_config, "config_files": [str(tmp_path / "no-such-cluster.yaml")]}

    async def test_every_endpoint_says_why_the_service_is_down(self, jp_fetch, jp_ws_fetch, started):
        for parts, method in [(("info",), "GET"), (("workloads",), "POST"), (("queues",), "GET")]:
            status, err, _ = await call(jp_fetch, *parts, method=method, body=command_job("print(1)")
                                        if method == "POST" else None)
            assert status == 503, err
            assert err["reason"] == "Unavailable"
            assert "config_files" in err["message"] and "no-such-cluster.yaml" in err["message"]
        with pytest.raises(HTTPClientError) as e:
            await jp_ws_fetch(*API, "events")
        assert e.value.code == 503


class TestPing:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config):
        return {**gpuqueue_config, "event_ping_interval": 0.2}

    async def test_event_stream_pings(self, jp_ws_fetch, started):
        ws = await jp_ws_fetch(*API, "events")
        try:
            assert json.loads(await asyncio.wait_for(ws.read_message(), 10))["type"] == "hello"
            pings = 0
            while pings < 2:
                event = json.loads(await asyncio.wait_for(ws.read_message(), 10))
                pings += event == {"type": "ping"}
        finally:
            ws.close()


def test_config_from_environment(monkeypatch, tmp_path):
    """GPUQUEUE_CONFIG / GPUQUEUE_INVENTORY / GPUQUEUE_DB_URL are the fallbacks of the traits."""
    from jupyter_gpuqueue.server.app import GpuQueueApp

    monkeypatch.setenv("GPUQUEUE_CONFIG", os.pathsep.join(["/a.yaml", "/b.yaml"]))
    app = GpuQueueApp()
    assert app._resolved_config_paths() == ["/a.yaml", "/b.yaml"]
    app.config_files = ["/c.yaml"]
    assert app._resolved_config_paths() == ["/c.yaml"]
    monkeypatch.delenv("GPUQUEUE_CONFIG")
    assert GpuQueueApp()._resolved_config_paths() is None
    assert GpuQueueApp().max_body_bytes == 1 << 20
