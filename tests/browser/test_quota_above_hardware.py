"""Quota above the hardware must not invert priorities (issue 34 item 8): Chromium, the sidebar at its
default width (250 px), light and dark.

The issue's repro on the demo queue (6 whole A100s): team-a's A100 nominalQuota set to 100, so
its quota always fits and only the devices decide. alice's 4-GPU and bob's 2-GPU
experiment-normal jobs hold every A100; a development-priority notebook lease waits for a device;
then a 1-GPU experiment-high job comes. It preempts the smaller of the two normal jobs (2 GPUs, not
4: engine/placement.py) and runs on a GPU that job freed; the other freed GPU waits for the
evicted job (engine/placement.py, ``hold_for_victim``), not for the development notebook, which
stays Pending and says why ("Free nvidia-a100 devices are held for higher-priority work"). Before the fix
the notebook took the second freed GPU and the evicted normal job could not start again behind it.
Text contrast (WCAG AA) and no sideways scrolling in both themes. Screenshots:
test-artifacts/screenshots/quota-above-hardware-*.png.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from browserkit import SCREENSHOT_DIR, api, open_panel, set_sidebar_width, sleeper, use_theme, wait_for
from test_estimates import AUDIT_TEXT, check_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def job(name, queue, gpus, priority):
    return {"name": name, "localQueue": queue, "command": sleeper(900), "gpus": gpus,
            "flavor": "nvidia-a100", "priorityClass": priority, "maxRuntime": "1h"}


def devices(w) -> set:
    return {(p["node"], d) for p in w["placement"] for d in p["devices"]}


async def test_the_gpu_freed_for_a_high_priority_job_never_goes_to_a_development_notebook(
        jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    created = []
    try:
        await api(jp_fetch, "admin", "cluster-queues", "team-a-cq", method="PATCH", body={"resources": [
            {"flavor": "nvidia-a100", "resource": "nvidia.com/gpu", "nominalQuota": "100"}]})
        for name, queue, gpus in (("alice-4gpu", "team-a/team-a-queue", 4), ("bob-2gpu", "team-b/team-b-queue", 2)):
            await api(jp_fetch, "workloads", method="POST", body=job(name, queue, gpus, "experiment-normal"))
            created.append(f"{queue.split('/')[0]}/{name}")
        alice = await wait_for(jp_fetch, "team-a/alice-4gpu", lambda w: w["state"] == "Running")
        bob = await wait_for(jp_fetch, "team-b/bob-2gpu", lambda w: w["state"] == "Running")
        await api(jp_fetch, "workloads", method="POST", body={
            "kind": "NotebookLease", "name": "notebook", "localQueue": "team-a/team-a-queue", "gpus": 1,
            "flavor": "nvidia-a100", "priorityClass": "development", "maxRuntimeSeconds": 3600})
        created.append("team-a/notebook")
        await wait_for(jp_fetch, "team-a/notebook", lambda w: w["reason"] == "PlacementFailed")

        await api(jp_fetch, "workloads", method="POST", body=job("high-1gpu", "team-a/team-a-queue", 1, "experiment-high"))
        created.append("team-a/high-1gpu")
        high = await wait_for(jp_fetch, "team-a/high-1gpu", lambda w: w["state"] == "Running", timeout=60)
        # the preemptor runs on a GPU its victim freed; the victim was the smaller job
        assert devices(high) <= devices(bob), (high["placement"], bob["placement"])
        bob = await wait_for(jp_fetch, "team-b/bob-2gpu", lambda w: w["state"] == "Pending")
        assert bob["evictions"] == 1
        alice_now = await api(jp_fetch, "workloads", "team-a", "alice-4gpu")
        assert alice_now["state"] == "Running" and alice_now["evictions"] == 0 and devices(alice_now) == devices(alice)
        # the other freed GPU is kept for bob's job, not given to the development notebook: the
        # truth is the queue's device owners, for several scheduling cycles
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            nb = await api(jp_fetch, "workloads", "team-a", "notebook")
            assert nb["state"] == "Pending", nb
            owners = set(gpuqueue_service.scheduler.allocator.owner.values())
            assert "team-a/notebook" not in owners, owners
            await asyncio.sleep(0.3)
        assert "kept for higher-priority work" in nb["message"], nb

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 800})
                page.set_default_timeout(30000)
                page_errors: list[str] = []
                page.on("pageerror", lambda e: page_errors.append(str(e)))
                panel = await open_panel(page, lab_url)
                for section in ("submit", "availability", "team"):
                    toggle = panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle')
                    if await toggle.count() and await toggle.get_attribute("aria-expanded") == "true":
                        await toggle.click()
                await set_sidebar_width(page, 250)

                notebook = panel.locator('[data-gpuqueue-job="team-a/notebook"]')
                await expect(notebook.locator(".jp-gpuqueue-badge")).to_have_text("Pending")
                await expect(notebook.locator(".jp-gpuqueue-reason-plain")).to_have_text(
                    "Free nvidia-a100 devices are held for higher-priority work")
                await expect(panel.locator('[data-gpuqueue-job="team-a/high-1gpu"] .jp-gpuqueue-badge')).to_have_text("Running")
                victim = panel.locator('[data-gpuqueue-job="team-b/bob-2gpu"]')
                await expect(victim.locator(".jp-gpuqueue-badge")).to_have_text("Pending")
                await expect(victim).to_contain_text("preempted 1×")

                cards = ",".join(f'[data-gpuqueue-job="{k}"]' for k in ("team-a/notebook", "team-b/bob-2gpu"))
                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    if not light:
                        await use_theme(page, theme, light)
                        await set_sidebar_width(page, 250)
                    width = (await panel.bounding_box())["width"]
                    assert abs(width - 250) <= 2, width
                    check_text(await page.evaluate(AUDIT_TEXT, f"{cards.split(',')[0]} .jp-gpuqueue-reason"),
                               f"{theme}: the notebook's reason")
                    overflow = await panel.evaluate("el => el.scrollWidth - el.clientWidth")
                    assert overflow <= 1, f"{theme}: the panel scrolls sideways by {overflow} px"
                    await notebook.scroll_into_view_if_needed()
                    shot = SCREENSHOT_DIR / f"quota-above-hardware-250-{'light' if light else 'dark'}.png"
                    await panel.screenshot(path=str(shot))
                assert not page_errors, page_errors
            finally:
                await browser.close()
    finally:
        for key in reversed(created):
            try:
                await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
            except AssertionError:
                pass
