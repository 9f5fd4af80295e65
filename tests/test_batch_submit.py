"""Batch submission (``POST workloads`` with ``{"items": [SubmitRequest]}``, docs/rest-api.md):
all or nothing, errors naming the item, one group commit, order kept; and the request-body check
(server/validation.py), whose compiled fast path must agree with jsonschema."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpuqueue.server import validation
from test_rest import (  # noqa: F401 (fixtures)
    USER_HEADER, HeaderUserIdentityProvider, call, check_schema, command_job, ok, openapi_doc, wait_for_state,
    workload_count,
)


def sweep(n: int, **extra) -> dict:
    return {"items": [command_job(f"print({i})", env={"LR": str(i)}, **extra) for i in range(n)]}


async def test_a_batch_is_created_in_order_and_runs(jp_fetch, started, check_schema):
    status, data, headers = await call(jp_fetch, "workloads", method="POST", body=sweep(5))
    assert status == 201, data
    check_schema("WorkloadList", data)
    items = data["items"]
    assert len(items) == 5 and len({w["uid"] for w in items}) == 5
    assert all(w["owner"] == "alice" for w in items)
    # the acknowledgement lists the workloads in the order submitted (their creation order)
    created = [w["createdAt"] for w in items]
    assert created == sorted(created)
    assert "Location" not in headers  # several workloads: no single location
    for w in items:
        done = await wait_for_state(jp_fetch, w["namespace"], w["name"], ("Succeeded", "Failed"))
        assert done["state"] == "Succeeded", done
    # a batch of one is still a list
    status, data, _ = await call(jp_fetch, "workloads", method="POST", body=sweep(1))
    assert status == 201 and len(data["items"]) == 1


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"items": []}, 400, "items"),
        ({"items": "x"}, 400, "items"),
        ({"items": [command_job("pass")] * 1001}, 400, "items"),
        ({"items": [command_job("pass"), {**command_job("pass"), "gpus": 0}]}, 400, "items[1].gpus"),
        ({"items": [command_job("pass"), {**command_job("pass"), "env": {"A": 1}}]}, 400, "items[1].env"),
        ({"items": [command_job("pass"), command_job("pass", flavor="no-such")]}, 400, "items[1].flavor"),
        ({"items": [command_job("pass"), command_job("pass", localQueue="x/y")]}, 400, "items[1].localQueue"),
        ({"items": [command_job("pass", name="twice"), command_job("pass", name="twice")]}, 409, "items[1].name"),
        ({"items": [command_job("pass")], "extra": 1}, 400, "body"),  # the message names "extra"
    ],
)
async def test_a_bad_batch_names_the_item_and_creates_nothing(jp_fetch, started, body, status, field):
    got, err, _ = await call(jp_fetch, "workloads", method="POST", body=body)
    assert got == status, err
    assert err["field"] == field, err
    assert await workload_count(jp_fetch) == 0


async def test_a_taken_name_refuses_the_whole_batch(jp_fetch, started):
    await ok(jp_fetch, "workloads", method="POST", expect=201, body=command_job("pass", name="taken"))
    status, err, _ = await call(jp_fetch, "workloads", method="POST",
                                body={"items": [command_job("pass", name="fresh"), command_job("pass", name="taken")]})
    assert status == 409 and err["field"] == "items[1].name", err
    status, _, _ = await call(jp_fetch, "workloads", "team-a", "fresh")
    assert status == 404
    assert await workload_count(jp_fetch) == 1


class TestBatchRateLimit:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config):
        return {**gpuqueue_config, "submit_rate_limit": "5/min"}

    @pytest.fixture
    def gpuqueue_server_config(self):
        return {"identity_provider_class": HeaderUserIdentityProvider}

    async def test_each_item_counts_against_the_limit(self, jp_fetch, started):
        alice = {USER_HEADER: "alice"}
        status, err, _ = await call(jp_fetch, "workloads", method="POST", headers=dict(alice), body=sweep(6))
        assert status == 400 and err["field"] == "items" and "burst" in err["message"], err
        await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice), body=sweep(4))
        status, err, headers = await call(jp_fetch, "workloads", method="POST", headers=dict(alice), body=sweep(2))
        assert status == 429 and int(headers["Retry-After"]) >= 1, err
        assert await workload_count(jp_fetch) == 4  # the refused batch left nothing
        await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice), body=sweep(1))


# -- the compiled check agrees with jsonschema ------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
_fields = ["name", "localQueue", "command", "script", "args", "workingDir", "gpus", "migProfile", "flavor",
           "priorityClass", "maxRuntimeSeconds", "maxRuntime", "kind", "env", "acceptSpot"]
_plausible = {
    "name": st.sampled_from(["a", "job-1", "Bad_Name", "-x", "x" * 64]),
    "command": st.lists(st.text(max_size=3), max_size=2) | _json,
    "gpus": st.integers(-1, 3) | st.booleans() | st.floats(0, 2),
    "maxRuntimeSeconds": st.sampled_from([0, 1, 0.5, -1, 2147483648, True, "1"]),
    "kind": st.sampled_from(["Job", "NotebookLease", "job", 1]),
    "env": st.dictionaries(st.text(max_size=2), st.text(max_size=2) | st.integers(), max_size=2),
    "migProfile": st.none() | st.text(max_size=3),
    "acceptSpot": st.booleans() | st.none(),
}
_request = st.fixed_dictionaries({}, optional={f: _plausible.get(f, _json) for f in _fields})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_request | _json, batch=st.booleans())
def test_the_fast_check_agrees_with_jsonschema(body, batch):
    name = "SubmitBatch" if batch else "SubmitRequest"
    data = {"items": [body]} if batch else body
    assert validation.is_valid(data, name) == validation._validator(name).is_valid(data)
