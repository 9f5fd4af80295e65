"""End to end in headless Chromium: JupyterLab's notifications about the user's own GPU jobs.

With JupyterLab open (the GPU Queue panel never opened), the user's jobs change state on a real
server: ``team-b/victim`` (development) starts on the H100s, ``team-b/urgent`` (experiment-high)
preempts it and finishes, ``team-a/crash`` fails with exit code 3. Each transition shows a toast in
JupyterLab's notification center ("GPU job team-b/victim started on nvidia-h100", "… was preempted
1× by team-b/urgent (priority) · …", "… started again on nvidia-h100", "… finished · $…", "… failed (exit code 3)"); its "Open job"
action opens the job's page. A job that had already ended before the page loaded notifies nothing.
"""

from __future__ import annotations

import re
import sys

import pytest
from browserkit import api, wait_for, wait_for_lab

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

FINISHED = ("Succeeded", "Failed", "Cancelled")
SLEEP = "import time; time.sleep({})"


async def test_a_notification_for_each_transition_of_my_jobs(jp_fetch, gpuqueue_service, lab_url,
                                                            chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    created = ["team-a/old", "team-b/victim", "team-b/urgent", "team-a/crash"]
    try:
        # ended before the page loads: no notification
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "old", "localQueue": "team-a/team-a-queue", "command": [sys.executable, "-c", "pass"],
            "gpus": 1, "flavor": "nvidia-l4", "maxRuntime": "5m"})
        await wait_for(jp_fetch, "team-a/old", lambda w: w["state"] in FINISHED)

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(30000)
                page_errors: list[str] = []
                page.on("pageerror", lambda e: page_errors.append(str(e)))
                await page.goto(lab_url)
                await wait_for_lab(page)
                # the model is live (the status bar shows it) before anything changes
                await expect(page.locator(".jp-gpuqueue-status")).to_be_visible()
                await page.wait_for_timeout(1500)
                toasts = page.locator(".Toastify__toast")

                await api(jp_fetch, "workloads", method="POST", body={
                    "name": "victim", "localQueue": "team-b/team-b-queue",
                    "command": [sys.executable, "-c", SLEEP.format(120)],
                    "gpus": 4, "flavor": "nvidia-h100", "priorityClass": "development", "maxRuntime": "30m"})
                await expect(toasts.filter(has_text="GPU job team-b/victim started on nvidia-h100")).to_have_count(1)

                await api(jp_fetch, "workloads", method="POST", body={
                    "name": "urgent", "localQueue": "team-b/team-b-queue",
                    "command": [sys.executable, "-c", SLEEP.format(2)],
                    "gpus": 1, "flavor": "nvidia-h100", "priorityClass": "experiment-high", "maxRuntime": "5m"})
                preempted = toasts.filter(has_text=re.compile(
                    r"GPU job team-b/victim was preempted 1× by team-b/urgent \(priority\) · .* of runs lost"))
                await expect(preempted).to_have_count(1)
                await expect(toasts.filter(has_text="GPU job team-b/urgent started")).to_have_count(1)
                await expect(toasts.filter(has_text=re.compile(r"GPU job team-b/urgent finished · (\$\d+\.\d\d|< \$0\.01)"))
                             ).to_have_count(1, timeout=30000)

                await api(jp_fetch, "workloads", method="POST", body={
                    "name": "crash", "localQueue": "team-a/team-a-queue",
                    "command": [sys.executable, "-c", "import time; time.sleep(1); raise SystemExit(3)"],
                    "gpus": 1, "flavor": "nvidia-l4", "maxRuntime": "5m"})
                await expect(toasts.filter(has_text="GPU job team-a/crash failed (exit code 3)")).to_have_count(1)

                # nothing about the job that had ended before the page loaded, and each once only
                await expect(toasts.filter(has_text="team-a/old")).to_have_count(0)
                await expect(toasts.filter(has_text="GPU job team-b/victim started on")).to_have_count(1)
                # after the preemptor ended, the victim runs again: said as such
                await expect(toasts.filter(has_text="GPU job team-b/victim started again on nvidia-h100")
                             ).to_have_count(1)

                # "Open job" opens its page
                await preempted.get_by_role("button", name="Open job").click()
                await expect(page.locator('[data-gpuqueue-jobpage="team-b/victim"]')).to_be_visible()
                assert not page_errors, page_errors
            finally:
                await browser.close()
    finally:
        for key in created:
            try:
                w = await api(jp_fetch, "workloads", *key.split("/"))
                if w["state"] not in FINISHED:
                    await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
            except AssertionError:
                pass
