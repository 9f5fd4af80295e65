"""Limits that protect the server: submissions per user per second (``submit_rate_limit``, a token
bucket in server/ratelimit.py) and Pending workloads per user (``max_pending_per_user``, a queue
rule in QueueService): 429 TooManyRequests with Retry-After, a message naming the limit, nothing
queued. Against a real server (pytest-jupyter), real service and ledger."""

from __future__ import annotations

import pytest

from jupyter_gpuqueue.errors import TooManyRequests, ValidationError, error_class_for_status
from jupyter_gpuqueue.server.ratelimit import TokenBucketLimiter, parse_rate
from test_rest import USER_HEADER, HeaderUserIdentityProvider, call, command_job, ok, wait_for_state


# -- the limiter itself (a fake clock: no timing in the assertions) -------------------------------


@pytest.mark.parametrize("text, expected", [
    ("20/s", (20.0, 1.0)), ("600/min", (600.0, 60.0)), ("100/10s", (100.0, 10.0)),
    (" 5 / h ", (5.0, 3600.0)), ("2.5/second", (2.5, 1.0)), ("", None),
])
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text", ["20", "fast", "20/fortnight", "0/s", "-1/s", "20/0s", "s/20"])
def test_parse_rate_refuses_naming_the_setting(text):
    with pytest.raises(ValidationError) as e:
        parse_rate(text)
    assert e.value.field == "submit_rate_limit" and repr(text) in e.value.message


def test_token_bucket_burst_refill_and_retry_after():
    now = [1000.0]
    lim = TokenBucketLimiter.from_setting("2/s", burst=4, clock=lambda: now[0])
    for _ in range(4):  # the burst
        lim.take("alice")
    with pytest.raises(TooManyRequests) as e:
        lim.take("alice")
    err = e.value
    assert err.status == 429 and err.reason == "TooManyRequests"
    assert err.retry_after == pytest.approx(0.5) and err.retry_after_seconds == 1
    assert "2/s" in err.message and "submit_rate_limit" in err.message and "alice" in err.message
    assert err.to_json()["retryAfter"] == 1
    lim.take("bob")  # buckets are per user
    now[0] += 0.5  # one token back
    lim.take("alice")
    with pytest.raises(TooManyRequests):
        lim.take("alice")
    now[0] += 10  # refills up to the burst, not beyond
    for _ in range(4):
        lim.take("alice")
    with pytest.raises(TooManyRequests):
        lim.take("alice")
    assert TokenBucketLimiter.from_setting("") is None
    assert error_class_for_status(429) is TooManyRequests


def test_full_buckets_are_forgotten():
    now = [0.0]
    lim = TokenBucketLimiter.from_setting("1/s", clock=lambda: now[0])
    for i in range(4097):
        lim.take(f"user{i}")
    now[0] += 5
    lim.take("late")  # triggers the prune: everyone else has refilled
    assert set(lim._buckets) == {"late"}


# -- through the REST API ---------------------------------------------------------------------------


class TestSubmitRateLimit:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config):
        # 3 per minute: the 4th submission in a row cannot have a token back within the test
        return {**gpuqueue_config, "submit_rate_limit": "3/min"}

    @pytest.fixture
    def gpuqueue_server_config(self):
        return {"identity_provider_class": HeaderUserIdentityProvider}

    async def test_fourth_submission_is_429_with_retry_after_and_nothing_queued(self, jp_fetch, started):
        alice = {USER_HEADER: "alice"}
        for i in range(3):
            await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice),
                     body=command_job("print(1)", name=f"ok-{i}"))
        status, err, headers = await call(jp_fetch, "workloads", method="POST", headers=dict(alice),
                                          body=command_job("print(1)", name="too-many"))
        assert status == 429, err
        assert err["reason"] == "TooManyRequests"
        assert "3/min" in err["message"] and "submit_rate_limit" in err["message"]
        retry = int(headers["Retry-After"])
        assert 1 <= retry <= 20 and err["retryAfter"] == retry
        status, _, _ = await call(jp_fetch, "workloads", "team-a", "too-many")
        assert status == 404  # nothing was created
        # another user has a bucket of their own; reading is not limited
        await ok(jp_fetch, "workloads", method="POST", expect=201, headers={USER_HEADER: "bob"},
                 body=command_job("print(1)", name="bobs"))
        await ok(jp_fetch, "workloads", headers=dict(alice))


class TestEveryWorkloadCostsAToken:
    """One token per workload queued, however it was submitted; a refused request costs none.
    (Before: a manifest of N Jobs cost one token, and the token was taken before the request was
    checked, so a 400 used it up.)"""

    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config):
        team_a = ["team-a/team-a-queue"]  # nobody here may submit to team-b: a 403 to try
        return {**gpuqueue_config, "submit_rate_limit": "3/min",
                "user_local_queues": {u: team_a for u in ("alice", "bob", "carol", "dave", "erin")}}

    @pytest.fixture
    def gpuqueue_server_config(self):
        return {"identity_provider_class": HeaderUserIdentityProvider}

    async def _limited(self, jp_fetch, user, name):
        status, err, headers = await call(jp_fetch, "workloads", method="POST", headers={USER_HEADER: user},
                                          body=command_job("print(1)", name=name))
        assert status == 429 and err["reason"] == "TooManyRequests" and "3/min" in err["message"], (status, err)
        assert (await call(jp_fetch, "workloads", "team-a", name))[0] == 404

    async def test_a_manifest_costs_one_token_per_job(self, jp_fetch, started):
        alice = {USER_HEADER: "alice"}
        made = await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice),
                        body={"manifest": _jobs("man-1", "man-2", gpus=1)})
        assert len(made["items"]) == 2
        await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice),
                 body=command_job("print(1)", name="third"))
        await self._limited(jp_fetch, "alice", "fourth")
        # a YAML body is a manifest too: 2 Jobs for bob, then his one token left does not cover 2
        bob = {USER_HEADER: "bob", "Content-Type": "application/yaml"}
        made = await ok(jp_fetch, "workloads", method="POST", expect=201, headers=bob,
                        body=_jobs("bob-1", "bob-2", gpus=1))
        assert len(made["items"]) == 2
        status, err, headers = await call(jp_fetch, "workloads", method="POST", headers=bob,
                                          body=_jobs("bob-3", "bob-4", gpus=1))
        assert status == 429 and int(headers["Retry-After"]) >= 1, (status, err)
        assert (await call(jp_fetch, "workloads", "team-a", "bob-3"))[0] == 404
        # the one token left is still there: the refused manifest took nothing
        await ok(jp_fetch, "workloads", method="POST", expect=201, headers={USER_HEADER: "bob"},
                 body=command_job("print(1)", name="bob-5"))

    async def test_a_manifest_above_the_burst_is_refused_as_a_batch_is(self, jp_fetch, started):
        status, err, _ = await call(jp_fetch, "workloads", method="POST", headers={USER_HEADER: "carol"},
                                    body={"manifest": _jobs("c-1", "c-2", "c-3", "c-4", gpus=1)})
        assert status == 400 and err["field"] == "manifest" and "burst of 3" in err["message"], err
        status, err, _ = await call(jp_fetch, "workloads", method="POST", headers={USER_HEADER: "carol"},
                                    body={"items": [command_job("print(1)", name=f"b-{i}") for i in range(4)]})
        assert status == 400 and err["field"] == "items" and "burst of 3" in err["message"], err
        # neither cost anything: three submissions still pass
        for i in range(3):
            await ok(jp_fetch, "workloads", method="POST", expect=201, headers={USER_HEADER: "carol"},
                     body=command_job("print(1)", name=f"carol-{i}"))
        await self._limited(jp_fetch, "carol", "carol-3")

    async def test_documents_that_are_no_workload_cost_nothing(self, jp_fetch, started):
        config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: team-a}\n"
        made = await ok(jp_fetch, "workloads", method="POST", expect=201, headers={USER_HEADER: "dave"},
                        body={"manifest": config_map + "---" + _jobs("dave-1", gpus=1)})
        assert made["name"] == "dave-1"  # one workload: the Workload itself
        for i in (2, 3):
            await ok(jp_fetch, "workloads", method="POST", expect=201, headers={USER_HEADER: "dave"},
                     body=command_job("print(1)", name=f"dave-{i}"))
        await self._limited(jp_fetch, "dave", "dave-4")

    async def test_a_batch_costs_one_token_per_item(self, jp_fetch, started):
        made = await ok(jp_fetch, "workloads", method="POST", expect=201, headers={USER_HEADER: "erin"},
                        body={"items": [command_job("print(1)", name=f"erin-{i}") for i in range(2)]})
        assert len(made["items"]) == 2
        await ok(jp_fetch, "workloads", method="POST", expect=201, headers={USER_HEADER: "erin"},
                 body=command_job("print(1)", name="erin-2"))
        await self._limited(jp_fetch, "erin", "erin-3")

    async def test_refused_requests_cost_no_token(self, jp_fetch, started):
        alice = {USER_HEADER: "alice"}
        refused = [
            command_job("print(1)", name="bad-gpus", gpus="two"),           # the document: 400
            command_job("print(1)", name="Not_A_Label"),                      # the document: 400
            command_job("print(1)", name="no-queue", localQueue="team-a/nowhere"),  # the service: 400
            command_job("print(1)", name="too-big", gpus=10_000),             # the service: 400
            {"items": [command_job("print(1)", name="in-batch"), {"gpus": -1}]},  # 400 items[1]
            {"manifest": "kind: [unclosed"},                                  # 400 manifest
            {"manifest": _jobs("m-bad", gpus=1).replace("team-a-queue", "nowhere")},  # 400
        ]
        for body in refused * 2:  # twice the burst of refused requests
            status, err, _ = await call(jp_fetch, "workloads", method="POST", headers=dict(alice), body=body)
            assert status == 400 and err["reason"] == "Invalid", (body, status, err)
        status, err, _ = await call(jp_fetch, "workloads", method="POST", body="kind: [unclosed",
                                    headers={**alice, "Content-Type": "application/yaml"})
        assert status == 400 and err["field"] == "body", err
        # forbidden (bob is in team-b) and conflicting (a name taken) requests queue nothing either
        await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice),
                 body=command_job("print(1)", name="taken"))
        for _ in range(4):
            status, err, _ = await call(jp_fetch, "workloads", method="POST", headers=dict(alice),
                                        body=command_job("print(1)", name="taken"))
            assert status == 409, err
            status, err, _ = await call(jp_fetch, "workloads", method="POST", headers=dict(alice),
                                        body=command_job("print(1)", name="elsewhere", localQueue="team-b/team-b-queue"))
            assert status == 403, err
        for i in range(2):  # the two tokens left of three
            await ok(jp_fetch, "workloads", method="POST", expect=201, headers=dict(alice),
                     body=command_job("print(1)", name=f"valid-{i}"))
        await self._limited(jp_fetch, "alice", "valid-2")


class TestMaxPendingPerUser:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config):
        return {**gpuqueue_config, "max_pending_per_user": 2}

    async def test_cap_on_pending_workloads(self, jp_fetch, started):
        # The demo cohort has 6 whole A100s: a job holding all of them makes the next ones wait.
        big = dict(gpus=6, flavor="nvidia-a100")
        await ok(jp_fetch, "workloads", method="POST", expect=201,
                 body=command_job("import time; time.sleep(60)", name="holder", **big))
        await wait_for_state(jp_fetch, "team-a", "holder", ("Running",))
        for name in ("wait-1", "wait-2"):
            wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                          body=command_job("print(1)", name=name, **big))
            assert wl["state"] == "Pending"
        status, err, headers = await call(jp_fetch, "workloads", method="POST",
                                          body=command_job("print(1)", name="wait-3", **big))
        assert status == 429, err
        assert err["reason"] == "TooManyRequests" and "max_pending_per_user" in err["message"]
        assert "2 pending" in err["message"] and int(headers["Retry-After"]) >= 1
        assert (await call(jp_fetch, "workloads", "team-a", "wait-3"))[0] == 404
        # a manifest counts each of its workloads, all or nothing
        await ok(jp_fetch, "workloads", "team-a", "wait-2", method="DELETE")
        status, err, _ = await call(jp_fetch, "workloads", method="POST", body={"manifest": _two_jobs()})
        assert status == 429, err
        assert (await call(jp_fetch, "workloads", "team-a", "m-1"))[0] == 404
        # once a slot is free again the next submission is accepted
        await ok(jp_fetch, "workloads", method="POST", expect=201,
                 body=command_job("print(1)", name="wait-4", **big))
        for name in ("holder", "wait-1", "wait-4"):
            await ok(jp_fetch, "workloads", "team-a", name, method="DELETE")


def _two_jobs() -> str:
    return _jobs("m-1", "m-2", gpus=6)


def _jobs(*names: str, gpus: int) -> str:
    """A manifest of batch/v1 Jobs for team-a-queue, one per name, each ``print(1)`` on ``gpus``."""
    import sys

    doc = """
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team-a
  labels: {{kueue.x-k8s.io/queue-name: team-a-queue}}
spec:
  template:
    spec:
      containers:
      - name: main
        image: python
        command: ["{py}", "-c", "print(1)"]
        resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
      restartPolicy: Never
"""
    return "---".join(doc.format(name=n, py=sys.executable, gpus=gpus) for n in names)


class TestInvalidLimit:
    @pytest.fixture
    def gpuqueue_config(self, gpuqueue_config):
        return {**gpuqueue_config, "submit_rate_limit": "lots"}

    async def test_the_service_says_which_setting_is_wrong(self, jp_fetch, started):
        status, err, _ = await call(jp_fetch, "info")
        assert status == 503 and "submit_rate_limit" in err["message"], err


# -- log bytes per request ----------------------------------------------------------------------------


async def test_log_pages_are_at_most_4_mib(jp_fetch, started):
    """``GET …/logs`` serves at most 4 MiB per request whatever ``limit`` asks; the client pages on
    with ``nextOffset``."""
    wl = await ok(jp_fetch, "workloads", method="POST", expect=201,
                  body=command_job("import sys; sys.stdout.write('x' * (5 << 20))", name="chatty"))
    done = await wait_for_state(jp_fetch, wl["namespace"], "chatty", ("Succeeded", "Failed"))
    assert done["state"] == "Succeeded", done
    first = await ok(jp_fetch, "workloads", wl["namespace"], "chatty", "logs", params={"limit": str(10 << 20)})
    assert len(first["text"]) == 4 << 20 and first["nextOffset"] == 4 << 20 and not first["eof"]
    assert first["size"] >= 5 << 20
    rest = await ok(jp_fetch, "workloads", wl["namespace"], "chatty", "logs",
                    params={"offset": str(first["nextOffset"]), "limit": str(10 << 20)})
    assert rest["eof"] and rest["nextOffset"] == rest["size"]
    assert len(first["text"]) + len(rest["text"]) == rest["size"]
    assert set(first["text"]) == {"x"} and rest["text"].startswith("x" * ((5 << 20) - (4 << 20)))
