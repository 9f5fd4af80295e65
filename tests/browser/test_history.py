"""End to end in headless Chromium: the job history of the panel's "My jobs" list.

The user has 25 ended jobs in the ledger (written before the server starts, as earlier days' work
leaves them: team-a and team-b, Succeeded / Failed / Cancelled, submitted today, 3 days ago and
40 days ago) and one job running now. Asserted, as a user sees them: 20 cards a page and "Older ›"
to the rest; search by name; the state, team and date filters (the cards shown are exactly the ones
that match); "Clear finished" hides the ended jobs, stays cleared after a reload (localStorage) and
"Show" brings them back; the toolbar is readable (4.5:1, not clipped) at 250 px, light and dark.
Screenshot: test-artifacts/screenshots/jobpage-history-250-dark.png.
"""

from __future__ import annotations

import sys
import time
import uuid

import pytest
from test_job_page import switch_theme
from browserkit import LIVE_TIMEOUT_MS, SCREENSHOT_DIR, api, set_sidebar_width, wait_for, wait_for_lab
from test_estimates import AUDIT_TEXT, check_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

FINISHED = ("Succeeded", "Failed", "Cancelled")
STATES = ("Succeeded", "Failed", "Cancelled")
DAYS_AGO = (0, 3, 40)
N = 25


def history():
    """(name, namespace, state, days ago) of the user's ended jobs."""
    return [(f"run-{i:02d}", "team-a" if i % 2 == 0 else "team-b", STATES[i % 3], DAYS_AGO[(i // 3) % 3])
            for i in range(N)]


@pytest.fixture
def gpuqueue_config(gpuqueue_config):
    from jupyter_gpuqueue.ledger import Ledger

    ledger = Ledger(gpuqueue_config["db_url"])
    try:
        now = time.time()
        for i, (name, ns, state, days) in enumerate(history()):
            end = now - days * 86400 - 600 - i * 60
            ledger.add_workload({
                "uid": str(uuid.uuid4()), "namespace": ns, "name": name, "owner": "alice",
                "local_queue": f"{ns}-queue", "cluster_queue": f"{ns}-cq", "state": state,
                "created_at": end - 300, "admitted_at": end - 290, "started_at": end - 290, "finished_at": end,
                "exit_code": 0 if state == "Succeeded" else (1 if state == "Failed" else None),
                "spec": {"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 1}}],
                         "command": ["python", "train.py"], "workingDir": "/tmp", "env": {},
                         "maxRuntimeSeconds": 3600, "flavor": "nvidia-l4"},
            })
    finally:
        ledger.close()
    return gpuqueue_config


async def cards(panel) -> list[str]:
    return await panel.locator(".jp-gpuqueue-job").evaluate_all("els => els.map(e => e.dataset.gpuqueueJob)")


async def test_filter_search_clear_and_page_my_jobs(jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    listed = {f"{w['namespace']}/{w['name']}": w for w in (await api(jp_fetch, "workloads"))["items"]}
    ended = {f"{ns}/{name}": (state, days) for name, ns, state, days in history()}
    assert set(ended) <= set(listed), sorted(set(ended) - set(listed))
    await api(jp_fetch, "workloads", method="POST", body={
        "name": "live-train", "localQueue": "team-a/team-a-queue",
        "command": [sys.executable, "-c", "import time; time.sleep(300)"],
        "gpus": 1, "flavor": "nvidia-l4", "maxRuntime": "10m"})
    try:
        await wait_for(jp_fetch, "team-a/live-train", lambda w: w["state"] == "Running")
        total = N + 1
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 1000})
                page.set_default_timeout(30000)
                page_errors: list[str] = []
                page.on("pageerror", lambda e: page_errors.append(str(e)))
                await page.goto(lab_url)
                await wait_for_lab(page)
                await page.locator(".jp-gpuqueue-status").click()
                panel = page.locator("#jp-gpuqueue-panel")
                await expect(panel.locator(".jp-gpuqueue-conn-live")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
                for section in ("submit", "availability", "team"):
                    toggle = panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle')
                    if await toggle.get_attribute("aria-expanded") == "true":
                        await toggle.click()
                jobs = panel.locator('[data-section="jobs"]')
                tools = jobs.locator(".jp-gpuqueue-history-tools")
                count = tools.locator(".jp-gpuqueue-history-count")

                # paging: newest first, 20 a page
                await expect(count).to_have_text(f"{total} jobs")
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(20)
                first = await cards(jobs)
                assert first[0] == "team-a/live-train", first[:3]
                pager = jobs.locator(".jp-gpuqueue-pager")
                await expect(pager.locator(".jp-gpuqueue-pager-at")).to_have_text(f"1–20 of {total}")
                await pager.get_by_role("button", name="Older ›").click()
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(total - 20)
                await expect(pager.locator(".jp-gpuqueue-pager-at")).to_have_text(f"21–{total} of {total}")
                second = await cards(jobs)
                assert not set(first) & set(second) and len(set(first) | set(second)) == total
                await expect(pager.get_by_role("button", name="Older ›")).to_be_disabled()
                await pager.get_by_role("button", name="‹ Newer").click()
                await expect(jobs.locator(".jp-gpuqueue-job").first).to_have_attribute(
                    "data-gpuqueue-job", "team-a/live-train")

                # search by name
                await tools.get_by_label("Search jobs by name").fill("run-07")
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(1)
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_attribute("data-gpuqueue-job", "team-b/run-07")
                await expect(count).to_have_text(f"1 of {total} jobs")
                await expect(pager).to_have_count(0)
                await tools.get_by_role("button", name="Reset filters").click()
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(20)

                # filters: exactly the matching jobs
                await tools.get_by_label("Filter by state").select_option("Failed")
                want = sorted(k for k, (s, _) in ended.items() if s == "Failed")
                await expect(count).to_have_text(f"{len(want)} of {total} jobs")
                assert sorted(await cards(jobs)) == want
                await tools.get_by_label("Filter by team").select_option("team-b")
                want = sorted(k for k, (s, _) in ended.items() if s == "Failed" and k.startswith("team-b/"))
                await expect(count).to_have_text(f"{len(want)} of {total} jobs")
                assert sorted(await cards(jobs)) == want
                await tools.get_by_label("Filter by state").select_option("all")
                await tools.get_by_label("Filter by date submitted").select_option("7d")
                want = sorted(k for k, (s, d) in ended.items() if d <= 3 and k.startswith("team-b/"))
                await expect(count).to_have_text(f"{len(want)} of {total} jobs")
                assert sorted(await cards(jobs)) == want
                await tools.get_by_label("Filter by state").select_option("active")
                await tools.get_by_label("Filter by team").select_option("")
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(1)
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_attribute(
                    "data-gpuqueue-job", "team-a/live-train")
                await tools.get_by_role("button", name="Reset filters").click()

                # readable at the sidebar's default width, light and dark
                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    if not light:
                        await switch_theme(page, theme, light)
                    await set_sidebar_width(page, 250)
                    items = await page.evaluate(AUDIT_TEXT, "#jp-gpuqueue-panel .jp-gpuqueue-history-tools")
                    check_text(items, f"{theme}: history tools at 250 px")
                    for sel in ("input", "select"):
                        for box in await tools.locator(sel).evaluate_all(
                                "els => els.map(e => [e.getBoundingClientRect().right, e.closest('.jp-gpuqueue-history-tools').getBoundingClientRect().right])"):
                            assert box[0] <= box[1] + 1, f"{theme}: a {sel} sticks out of the toolbar: {box}"
                    overflow = await panel.evaluate("el => el.scrollWidth - el.clientWidth")
                    assert overflow <= 1, f"{theme}: the panel scrolls sideways by {overflow} px"
                    await jobs.evaluate("el => el.scrollIntoView()")
                    await page.locator("#jp-gpuqueue-panel").screenshot(
                        path=str(SCREENSHOT_DIR / f"jobpage-history-250-{'light' if light else 'dark'}.png"))
                await switch_theme(page, "JupyterLab Light", True)

                # clear finished: only the running job stays, also after a reload; Show undoes it
                await tools.get_by_role("button", name="Clear finished").click()
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(1)
                cleared = tools.locator(".jp-gpuqueue-history-cleared")
                await expect(cleared).to_have_text(f"{N} finished jobs cleared · Show")
                await page.reload()
                await wait_for_lab(page)
                panel = page.locator("#jp-gpuqueue-panel")
                jobs = panel.locator('[data-section="jobs"]')
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(1)
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_attribute(
                    "data-gpuqueue-job", "team-a/live-train")
                await jobs.locator(".jp-gpuqueue-history-cleared").get_by_role("button", name="Show").click()
                await expect(jobs.locator(".jp-gpuqueue-job")).to_have_count(20)
                assert not page_errors, page_errors
            finally:
                await browser.close()
    finally:
        await api(jp_fetch, "workloads", "team-a", "live-train", method="DELETE")
