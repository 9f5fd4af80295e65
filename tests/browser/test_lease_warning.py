"""End to end in headless Chromium: the preemption warning of a notebook GPU lease.

The user holds team-a's four A100s with a NotebookLease (as the hub's spawner would); team-b uses
its own two, so nothing can be borrowed. Higher-priority work of team-a then needs the A100s: the
lease is chosen as the victim and gets an ``evictionDeadline``. JupyterLab shows a warning
notification with the time left (labextension/src/leaseWarning.ts); when the lease is released at
the deadline the notification goes away.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import time

import pytest
from tornado.httpclient import HTTPClientError

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

API = ("gpuqueue", "api")
GRACE = 20  # seconds between the warning and the release


@pytest.fixture
def gpuqueue_config(gpuqueue_config):
    return {**gpuqueue_config, "lease_preemption_grace_seconds": GRACE}


async def api(jp_fetch, *parts, method="GET", body=None):
    kwargs = {"method": method}
    if body is not None:
        kwargs["body"] = json.dumps(body)
    try:
        resp = await jp_fetch(*API, *parts, **kwargs)
    except HTTPClientError as e:
        detail = e.response.body.decode() if e.response is not None and e.response.body else ""
        raise AssertionError(f"{method} {'/'.join(parts)}: HTTP {e.code} {detail}") from None
    return json.loads(resp.body)


async def wait_for(jp_fetch, key: str, pred, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        w = await api(jp_fetch, "workloads", *key.split("/"))
        if pred(w):
            return w
        assert time.monotonic() < deadline, f"{key}: {w}"
        await asyncio.sleep(0.2)


def sleeper() -> list:
    return [shutil.which("python") or sys.executable, "-c", "import time; time.sleep(600)"]


async def test_lease_preemption_warning_shows_time_left_then_goes(jp_fetch, started, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    created = []
    try:
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "team-b-a100", "localQueue": "team-b/team-b-queue", "command": sleeper(),
            "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "10m"})
        created.append("team-b/team-b-a100")
        await wait_for(jp_fetch, "team-b/team-b-a100", lambda w: w["state"] == "Running")
        lease = await api(jp_fetch, "workloads", method="POST", body={
            "kind": "NotebookLease", "name": "nb-alice", "localQueue": "team-a/team-a-queue",
            "gpus": 4, "flavor": "nvidia-a100", "maxRuntime": "1h"})
        assert lease["priorityClass"] == "development"
        created.append("team-a/nb-alice")
        await wait_for(jp_fetch, "team-a/nb-alice", lambda w: w["state"] == "Running")

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(30000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                await page.goto(lab_url)
                await page.wait_for_selector("#jp-main-dock-panel", timeout=60000)
                # the panel's model is live (it also feeds the warning)
                await page.locator("#jp-gpuqueue-panel").wait_for(state="attached")
                toast = page.locator(".Toastify__toast", has_text="GPU lease team-a/nb-alice")
                await asyncio.sleep(2)
                assert await toast.count() == 0  # no warning while nothing preempts it

                await api(jp_fetch, "workloads", method="POST", body={
                    "name": "urgent", "localQueue": "team-a/team-a-queue", "command": sleeper(),
                    "gpus": 4, "flavor": "nvidia-a100", "priorityClass": "production-retrain",
                    "maxRuntime": "5m"})
                created.append("team-a/urgent")
                warned = await wait_for(jp_fetch, "team-a/nb-alice", lambda w: w.get("evictionDeadline"))
                await expect(toast).to_be_visible(timeout=20000)
                text = await toast.inner_text()
                m = re.search(r"released in (\d+) s", text)
                assert m, text
                left = warned["evictionDeadline"] - time.time()
                assert 0 < int(m.group(1)) <= GRACE and abs(int(m.group(1)) - left) < 6, (text, left)
                assert "higher-priority work" in text
                # Released at the deadline: the warning goes, the urgent work runs.
                await wait_for(jp_fetch, "team-a/nb-alice", lambda w: w["state"] == "Failed", timeout=GRACE + 15)
                await expect(toast).to_have_count(0, timeout=20000)
                await wait_for(jp_fetch, "team-a/urgent", lambda w: w["state"] == "Running")
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        for key in created:
            try:
                await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
            except AssertionError:
                pass
