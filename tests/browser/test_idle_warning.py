"""End to end in headless Chromium: the idle warning of a notebook GPU lease (issue 16).

A standalone server has no Hub to read activity from, so the test plays the Hub through the
service's seam, as tests/test_idle_reclaim.py does: ``service.idle.activity_source`` answers that
alice's last activity was her lease's start. team-a's policy (set through the admin API, with the
service's minimum timeout lowered to 1 s for the test) warns after 3 idle seconds and releases 90 s
later, with one keep. JupyterLab shows the warning (labextension/src/leaseWarning.ts,
``watchIdleLeases``) with its countdown and a "Keep my GPU" button; clicking it restarts the idle
clock (no deadline, no keeps left) and the warning goes; the next warning has no button. Under
``onIdle: "release"`` a lease of a server that goes on without its GPUs is warned so, and after the
release told "Your GPU was released after N min idle; this server goes on without it …".
"""

from __future__ import annotations

import re
import time

import pytest
from browserkit import SCREENSHOT_DIR, api, show_panel, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

IDLE_TIMEOUT = 3
WARN = 90


class FakeHub:
    """The activity source: each owner's last activity as the Hub would report it."""

    def __init__(self):
        self.last: dict[str, float] = {}

    async def __call__(self, users):
        return {u: self.last[u] for u in users if u in self.last}


async def test_idle_warning_counts_down_and_keep_my_gpu_resets_the_clock(
        jp_fetch, started, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    svc = gpuqueue_service
    hub = FakeHub()
    svc.idle.configure(minimum_timeout=1)  # the test's seconds stand for an admin's minutes
    svc.idle.activity_source = hub
    svc.idle.poll_interval = 0.5
    key = "team-a/nb-idle"
    try:
        lease = await api(jp_fetch, "workloads", method="POST", body={
            "kind": "NotebookLease", "name": "nb-idle", "localQueue": "team-a/team-a-queue",
            "gpus": 1, "maxRuntime": "1h"})
        assert lease["owner"] == "alice"
        running = await wait_for(jp_fetch, key, lambda w: w["state"] == "Running")
        hub.last["alice"] = running["startedAt"]  # the server's last activity: its start
        await api(jp_fetch, "admin", "idle-policy", "team-a", method="PUT", body={
            "idleTimeoutSeconds": IDLE_TIMEOUT, "warnSeconds": WARN, "maxKeeps": 1,
            "utilizationBelowPercent": None})

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(30000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                # The browser's clock (time flows as usual): the countdown's 15-s refresh is
                # moved on below instead of waited for.
                await page.clock.install()
                await page.goto(lab_url)
                await page.wait_for_selector("#jp-main-dock-panel", timeout=60000)
                await page.locator("#jp-gpuqueue-panel").wait_for(state="attached")

                warned = await wait_for(jp_fetch, key, lambda w: w.get("idleDeadline"), timeout=30)
                assert warned["state"] == "Running" and warned["idleKeepsLeft"] == 1, warned
                toast = page.locator(".Toastify__toast", has_text="Idle notebook: its GPU is released in")
                await expect(toast).to_be_visible(timeout=20000)
                # the toast shows a message's first 140 characters: what to do is among them
                await expect(toast).to_contain_text("keep it (1 more time) or run a cell.")
                keep = toast.get_by_role("button", name="Keep my GPU")
                await expect(keep).to_be_visible()
                # the countdown: the time left as the deadline says, and it goes down
                first = await toast.inner_text()
                m = re.search(r"released in (?:1 min )?(\d+) s", first)
                assert m, first
                left = warned["idleDeadline"] - time.time()
                assert 0 < left <= WARN, left
                await page.wait_for_timeout(1200)  # the toast's slide-in animation
                await page.screenshot(path=str(SCREENSHOT_DIR / "idle-warning.png"))
                # (the countdown is refreshed every 15 s between events: the browser's clock
                # moves 15 s on, then back to the real time without firing anything)
                shown = re.search(r"released in ([^;]*?);", first).group(1)
                await page.clock.run_for(15_500)
                await expect(toast).not_to_contain_text(f"released in {shown};", timeout=5000)
                second = await toast.inner_text()
                assert re.search(r"released in (1 min \d+ s|1 min|\d+ s);", second), second
                await page.clock.set_system_time(time.time())

                # Keep my GPU: the clock restarts; no deadline, no keeps left; the warning goes
                kept_at = time.time()
                await keep.click()
                kept = await wait_for(jp_fetch, key, lambda w: w.get("idleKeepsLeft") == 0, timeout=10)
                assert kept["state"] == "Running"
                assert kept["idleDeadline"] is None or kept["idleDeadline"] >= kept_at + IDLE_TIMEOUT + WARN - 2, kept
                await expect(page.locator(".Toastify__toast", has_text=f"Kept the GPU of {key}")).to_be_visible()
                await expect(toast.get_by_role("button", name="Keep my GPU")).to_have_count(0)

                # idle again: a new warning, counted from the keep, and no button now
                again = await wait_for(jp_fetch, key, lambda w: w.get("idleDeadline"), timeout=30)
                assert again["idleDeadline"] > warned["idleDeadline"] + 1, (again, warned)
                assert again["idleDeadline"] >= kept_at + IDLE_TIMEOUT + WARN - 2
                await expect(toast).to_be_visible(timeout=20000)
                await expect(toast).to_contain_text(re.compile(r"released in 1 min \d+ s"))
                await expect(toast).to_contain_text("run a cell to keep it (no keeps left)")
                await expect(toast.get_by_role("button", name="Keep my GPU")).to_have_count(0)
                await page.wait_for_timeout(1200)
                await page.screenshot(path=str(SCREENSHOT_DIR / "idle-warning-no-keeps.png"))

                # onIdle "release": a lease whose server goes on without its GPU (a named server
                # of a local spawner) is told so in the warning and in the notice after it.
                await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
                await api(jp_fetch, "admin", "idle-policy", "team-a", method="PUT", body={
                    "idleTimeoutSeconds": 2, "warnSeconds": 4, "maxKeeps": 0, "onIdle": "release",
                    "utilizationBelowPercent": None})
                await api(jp_fetch, "workloads", method="POST", body={
                    "kind": "NotebookLease", "name": "nb-exp2", "localQueue": "team-a/team-a-queue",
                    "gpus": 1, "maxRuntime": "1h", "notebookServer": {"name": "exp2", "goesOnWithoutGpus": True}})
                warned2 = await wait_for(jp_fetch, "team-a/nb-exp2", lambda w: w.get("idleDeadline"), timeout=30)
                assert warned2["idleAction"] == "release"
                toast2 = page.locator(".Toastify__toast", has_text=re.compile(
                    "The server then goes on without a GPU|this server goes on without it"))
                await expect(toast2).to_be_visible(timeout=20000)
                await expect(toast2).to_contain_text("run a cell to keep it (no keeps left). The server then goes on "
                                                     "without a GPU.")
                done = await wait_for(jp_fetch, "team-a/nb-exp2", lambda w: w["state"] != "Running", timeout=30)
                assert (done["reason"], done["idleAction"]) == ("IdleReclaimed", "release"), done
                await expect(toast2).to_contain_text(
                    re.compile(r"Your GPU was released after \d+ min idle; this server goes on without it"),
                    timeout=20000)
                await expect(toast2).to_contain_text("Restart the server to ask for a GPU again.")
                # the panel's card names the lease's server
                panel = await show_panel(page)
                card = panel.locator('.jp-gpuqueue-job[data-gpuqueue-job="team-a/nb-exp2"]')
                await expect(card.locator(".jp-gpuqueue-job-meta")).to_contain_text("notebook server 'exp2'")
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        try:
            await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
        except AssertionError:
            pass
