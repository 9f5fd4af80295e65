"""End to end in headless Chromium: the preemption warning of a notebook GPU lease.

The user holds team-a's four A100s with a NotebookLease (as the hub's spawner would); team-b uses
its own two, so nothing can be borrowed. Higher-priority work of team-a then needs the A100s: the
lease is chosen as the victim and gets an ``evictionDeadline``. JupyterLab shows a warning
notification with the time left (labextension/src/leaseWarning.ts); when the lease is released at
the deadline the notification says so ("was released at …"), never frozen at "less than a second".

Under JupyterHub the server that runs the panel is the one stopped at the deadline (issue 15,
item 2): the second test plays the hub's part in the browser — the event stream is cut and every
API request is redirected to the hub's login page (HTML with an ``_xsrf`` token), as JupyterHub
answers for a stopped server. The panel then says, in plain words, that the server is gone; no
HTML and no token is ever shown; the lease card ends at the deadline (Failed, its cost and clock
stopped) and the warning says "released".
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from browserkit import SCREENSHOT_DIR, api, open_panel, sleeper, wait_for, wait_for_lab

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

GRACE = 10  # seconds between the warning and the release
EXTENSION = 20  # seconds a lease may be extended by, once (the admin's setting)


@pytest.fixture
def gpuqueue_config(gpuqueue_config):
    return {**gpuqueue_config, "lease_preemption_grace_seconds": GRACE,
            "lease_extension_seconds": EXTENSION, "lease_max_extensions": 1}


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
                await wait_for_lab(page)
                # the panel's model is live (it also feeds the warning)
                await page.locator("#jp-gpuqueue-panel").wait_for(state="attached")
                toast = page.locator(".Toastify__toast", has_text="Your notebook's GPU lease team-a/nb-alice")
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
                # Released at the deadline: the warning says so, the urgent work runs.
                await wait_for(jp_fetch, "team-a/nb-alice", lambda w: w["state"] == "Failed", timeout=GRACE + 15)
                await expect(toast).to_contain_text("was released at", timeout=10000)
                await expect(toast).not_to_contain_text("less than a second")
                await expect(toast).not_to_contain_text("will be released in")
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


HUB_LOGIN_PAGE = """<!DOCTYPE HTML>
<html><head><title>JupyterHub</title></head>
<body><div id="login-main"><form action="/hub/login?next=%2Fuser%2Falice%2Flab" method="post">
<input type="hidden" name="_xsrf" value="2|c0ffee42|hub-xsrf-secret-token|1795600000"/>
<input id="username_input" name="username"/><input type="password" name="password"/>
<button type="submit">Sign in</button></form></div></body></html>"""


async def test_the_hub_stops_the_server_at_the_lease_deadline(jp_fetch, started, lab_url, chromium_launch_args):
    """Issue 15, item 2: at the deadline the panel shows neither the hub's HTML nor its xsrf
    token, the lease card ends (Failed, cost and clock stopped), the warning says "released"."""
    from playwright.async_api import async_playwright, expect

    created = []
    try:
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "team-b-a100", "localQueue": "team-b/team-b-queue", "command": sleeper(),
            "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "10m"})
        created.append("team-b/team-b-a100")
        await wait_for(jp_fetch, "team-b/team-b-a100", lambda w: w["state"] == "Running")
        await api(jp_fetch, "workloads", method="POST", body={
            "kind": "NotebookLease", "name": "nb-alice", "localQueue": "team-a/team-a-queue",
            "gpus": 4, "flavor": "nvidia-a100", "maxRuntime": "1h"})
        created.append("team-a/nb-alice")
        await wait_for(jp_fetch, "team-a/nb-alice", lambda w: w["state"] == "Running")

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(30000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                hub = {"stopped": False, "sockets": []}

                async def events(ws):
                    # the event stream, passed through until the hub stops the server
                    if hub["stopped"]:
                        await ws.close()
                        return
                    ws.connect_to_server()
                    hub["sockets"].append(ws)

                await page.route_web_socket(re.compile(r".*/gpuqueue/api/events.*"), events)

                async def api_route(route):
                    if not hub["stopped"]:
                        await route.continue_()
                    elif route.request.method == "GET":
                        # JupyterHub: no hub cookie on /user/alice/… → its login page
                        await route.fulfill(status=302, headers={"Location": f"{base}hub/login?next=%2Fuser%2Falice%2F"})
                    else:
                        await route.fulfill(status=424, content_type="application/json", body=json.dumps(
                            {"message": "JupyterHub server no longer running at /user/alice/. "
                                        "Restart the server at http://hub.example/hub/spawn/alice"}))

                base = lab_url.split("lab?")[0]
                await page.route("**/gpuqueue/api/**", api_route)
                await page.route("**/hub/login**", lambda route: route.fulfill(
                    status=200, content_type="text/html; charset=UTF-8", body=HUB_LOGIN_PAGE))

                panel = await open_panel(page, lab_url)
                for section in ("submit", "availability", "team"):
                    toggle = panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle')
                    if await toggle.get_attribute("aria-expanded") == "true":
                        await toggle.click()
                card = panel.locator('[data-gpuqueue-job="team-a/nb-alice"]')
                await expect(card).to_have_attribute("data-state", "Running")

                await api(jp_fetch, "workloads", method="POST", body={
                    "name": "urgent", "localQueue": "team-a/team-a-queue", "command": sleeper(),
                    "gpus": 4, "flavor": "nvidia-a100", "priorityClass": "experiment-high",
                    "maxRuntime": "5m"})
                created.append("team-a/urgent")
                warned = await wait_for(jp_fetch, "team-a/nb-alice", lambda w: w.get("evictionDeadline"))
                deadline = warned["evictionDeadline"]
                toast = page.locator(".Toastify__toast", has_text="Your notebook's GPU lease team-a/nb-alice")
                await expect(toast).to_contain_text("will be released in", timeout=20000)

                # The hub stops the user's server: the stream ends, every request gets its login page.
                hub["stopped"] = True
                for ws in hub["sockets"]:
                    await ws.close()
                await expect(panel.locator(".jp-gpuqueue-conn-gone")).to_be_visible(timeout=15000)
                await expect(panel.locator(".jp-gpuqueue-conn-gone")).to_have_text("server gone")
                banner = panel.locator(".jp-gpuqueue-banner")
                await expect(banner).to_contain_text("The server is gone")
                await panel.get_by_role("button", name="Refresh").click()  # asks again: same answer
                await expect(banner).to_contain_text("Start it again from the hub")
                # all of that while the lease still ran: the card below ends with the server gone
                assert time.time() < deadline - 1, "the lease's deadline passed before the hub stopped the server"

                # The deadline passes: the card ends, its clock and cost stop; the warning says so.
                await expect(card).to_have_attribute("data-state", "Failed",
                                                     timeout=int(max(0, deadline - time.time()) * 1000) + 10000)
                await expect(toast).to_contain_text("was released at", timeout=5000)
                cost = await card.locator(".jp-gpuqueue-cost").inner_text()
                clock = await card.locator(".jp-gpuqueue-clock").inner_text()
                assert clock.startswith("ran "), clock
                await page.wait_for_timeout(3000)
                assert await card.locator(".jp-gpuqueue-cost").inner_text() == cost
                assert await card.locator(".jp-gpuqueue-clock").inner_text() == clock
                await expect(toast).not_to_contain_text("less than a second")

                # Nothing of the hub's page is ever shown, in the panel or in a notification.
                shown = await page.evaluate("() => document.body.innerText")
                for leak in ("_xsrf", "xsrf", "hub-xsrf-secret-token", "<html", "<!DOCTYPE", "Sign in",
                             "JupyterHub server no longer running"):
                    assert leak.lower() not in shown.lower(), leak
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        for key in created:
            try:
                await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
            except AssertionError:
                pass


MAX_TIME = 30  # seconds: the lease's maximum time (its warning comes MAX_TIME / 2 before it)


async def test_a_lease_reaching_its_maximum_time_is_warned_then_ends_well(jp_fetch, started, lab_url,
                                                                          chromium_launch_args, tmp_path):
    """Issue 34, item 1: a warning before the lease's maximum time, with the time left; the hub
    stops the server (the panel's server is gone), yet the card ends at the maximum time, as the
    queue records it: Succeeded, "reached its maximum time", its cost stopped within its bound."""
    from playwright.async_api import async_playwright, expect

    created = []
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 800})
                page.set_default_timeout(30000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                hub = {"stopped": False, "sockets": []}

                async def events(ws):
                    if hub["stopped"]:
                        await ws.close()
                        return
                    ws.connect_to_server()
                    hub["sockets"].append(ws)

                await page.route_web_socket(re.compile(r".*/gpuqueue/api/events.*"), events)

                async def api_route(route):
                    if not hub["stopped"]:
                        await route.continue_()
                    else:
                        await route.fulfill(status=424, content_type="application/json", body=json.dumps(
                            {"message": "JupyterHub server no longer running at /user/alice/."}))

                await page.route("**/gpuqueue/api/**", api_route)
                panel = await open_panel(page, lab_url)
                for section in ("submit", "availability", "team"):
                    toggle = panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle')
                    if await toggle.get_attribute("aria-expanded") == "true":
                        await toggle.click()

                await api(jp_fetch, "workloads", method="POST", body={
                    "kind": "NotebookLease", "name": "nb-max", "localQueue": "team-a/team-a-queue",
                    "gpus": 1, "flavor": "nvidia-a100", "maxRuntimeSeconds": MAX_TIME})
                created.append("team-a/nb-max")
                w = await wait_for(jp_fetch, "team-a/nb-max", lambda w: w["state"] == "Running")
                end = w["startedAt"] + MAX_TIME
                card = panel.locator('[data-gpuqueue-job="team-a/nb-max"]')
                await expect(card).to_have_attribute("data-state", "Running")
                toast = page.locator(".Toastify__toast", has_text="Your notebook's GPU lease").filter(
                    has_text="team-a/nb-max")
                await expect(toast).to_contain_text("reaches its maximum time", timeout=int(MAX_TIME * 1000))
                text = await toast.inner_text()
                m = re.search(r"reaches its maximum time in (\d+) s", text)
                assert m, text
                assert 0 < int(m.group(1)) <= MAX_TIME / 2 and abs(int(m.group(1)) - (end - time.time())) < 6, text
                assert "team-a/nb-max" in text and "save your work" in text
                await page.wait_for_timeout(1000)  # the toast slides in
                SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)  # the README's lease-max-time-warning.png
                await page.screenshot(path=str(SCREENSHOT_DIR / "lease-max-time-warning.png"))
                assert time.time() < end - 1, "the lease ended before its warning was seen"

                # Extend, as the admin allows (once, by EXTENSION s): the queue's lease is longer,
                # the warning goes, and comes again before the new end, with no Extend left.
                await toast.get_by_role("button", name=f"Extend by {EXTENSION} s").click()
                w = await wait_for(jp_fetch, "team-a/nb-max",
                                   lambda w: w["maxRuntimeSeconds"] == MAX_TIME + EXTENSION, timeout=10)
                assert w["leaseExtensionsLeft"] == 0, w
                end = w["startedAt"] + MAX_TIME + EXTENSION
                await expect(toast).to_contain_text("reaches its maximum time in", timeout=int(MAX_TIME * 1000))
                await expect(toast.get_by_role("button", name=re.compile("Extend"))).to_have_count(0)
                assert time.time() < end - 1, "the lease ended before its second warning was seen"

                # The hub stops the server at the maximum time: here, before it, so that no event
                # can tell the panel; the card follows the end all the same.
                hub["stopped"] = True
                for ws in hub["sockets"]:
                    await ws.close()
                await expect(card).to_have_attribute("data-state", "Succeeded",
                                                     timeout=int(max(0, end - time.time()) * 1000) + 10000)
                assert time.time() >= end - 1  # not before its maximum time
                await expect(card).to_contain_text("reached its maximum time (50 s)")
                await expect(card).not_to_contain_text("MaximumExecutionTimeExceeded")
                await expect(toast).to_contain_text("reached its maximum time at", timeout=5000)
                await expect(toast).not_to_contain_text("less than a second")
                print("toasts:", await page.locator(".Toastify__toast").all_inner_texts())
                cost = await card.locator(".jp-gpuqueue-cost").inner_text()
                assert "so far" not in cost, cost
                await page.wait_for_timeout(2000)
                assert await card.locator(".jp-gpuqueue-cost").inner_text() == cost
                await page.screenshot(path=str(tmp_path / "lease-max-time-ended.png"))
                print("screenshots:", tmp_path)

                # The queue records it alike: Succeeded, billed up to its maximum time exactly.
                done = await wait_for(jp_fetch, "team-a/nb-max", lambda w: w["state"] != "Running", timeout=15)
                assert (done["state"], done["reason"]) == ("Succeeded", "MaxRuntimeReached"), done
                assert done["finishedAt"] == pytest.approx(end, abs=1e-3)
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        for key in created:
            try:
                await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
            except AssertionError:
                pass
