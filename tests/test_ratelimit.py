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
        resources: {{limits: {{nvidia.com/gpu: 6}}}}
      restartPolicy: Never
"""
    return "---".join(doc.format(name=n, py=sys.executable) for n in ("m-1", "m-2"))


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
