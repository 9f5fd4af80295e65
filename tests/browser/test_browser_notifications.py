"""End to end in headless Chromium: the browser's own notifications of the user's GPU jobs (the
``browserNotifications`` setting of labextension/schema/plugin.json). Off by default: a job that
starts shows JupyterLab's toast only, and the browser is not even asked for permission. Turned on
(in the settings, then the page reloaded), the browser is asked once, and the next job's "started"
and "finished" are also the browser's notifications. The page's ``window.Notification`` is a
recording stand-in (headless Chromium shows none)."""

from __future__ import annotations

import json
import sys

import pytest
from browserkit import api, wait_for, wait_for_lab

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

FINISHED = ("Succeeded", "Failed", "Cancelled")

FAKE_NOTIFICATION = """
window.__shown = [];
window.__asked = 0;
class FakeNotification {
  constructor(title, options) { window.__shown.push({ title, body: (options || {}).body }); }
  static async requestPermission() {
    window.__asked += 1;
    FakeNotification.permission = 'granted';
    return 'granted';
  }
}
FakeNotification.permission = 'default';
window.Notification = FakeNotification;
"""


def job(name: str) -> dict:
    return {"name": name, "localQueue": "team-a/team-a-queue", "command": [sys.executable, "-c", "import time; time.sleep(1)"],
            "gpus": 1, "flavor": "nvidia-l4", "maxRuntime": "5m"}


async def test_browser_notifications_are_off_by_default_and_ask_permission_when_turned_on(
        jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await page.add_init_script(FAKE_NOTIFICATION)
            page.set_default_timeout(30000)
            await page.goto(lab_url)
            await wait_for_lab(page)
            await expect(page.locator(".jp-gpuqueue-status")).to_be_visible()
            await page.wait_for_timeout(1500)
            toasts = page.locator(".Toastify__toast")

            await api(jp_fetch, "workloads", method="POST", body=job("quiet"))
            await expect(toasts.filter(has_text="GPU job team-a/quiet started")).to_have_count(1)
            await wait_for(jp_fetch, "team-a/quiet", lambda w: w["state"] in FINISHED)
            await expect(toasts.filter(has_text="GPU job team-a/quiet finished")).to_have_count(1)
            assert await page.evaluate("window.__shown") == []
            assert await page.evaluate("window.__asked") == 0  # off: not even asked

            # turned on in the settings: asked once at load, then shown
            await jp_fetch("lab", "api", "settings", "jupyter-gpuqueue:plugin", method="PUT",
                           body=json.dumps({"raw": json.dumps({"browserNotifications": True})}))
            await page.reload()
            await wait_for_lab(page)
            await expect(page.locator(".jp-gpuqueue-status")).to_be_visible()
            await page.wait_for_function("window.__asked === 1")
            await page.wait_for_timeout(1500)

            await api(jp_fetch, "workloads", method="POST", body=job("loud"))
            await wait_for(jp_fetch, "team-a/loud", lambda w: w["state"] in FINISHED)
            await page.wait_for_function(
                "window.__shown.some(n => n.body.startsWith('GPU job team-a/loud finished'))")
            shown = await page.evaluate("window.__shown")
            assert [n["title"] for n in shown] == ["GPU Queue"] * len(shown)
            assert any(n["body"].startswith("GPU job team-a/loud started") for n in shown), shown
            assert not any("quiet" in n["body"] for n in shown), shown
            assert await page.evaluate("window.__asked") == 1
        finally:
            await browser.close()
