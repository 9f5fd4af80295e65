"""What a hub admin looked for in the panel (issue 34 items 10 and 11), end to end in headless
Chromium at the sidebar's default width (250 px), light and dark: a real server, queue, SQLite
ledger and running jobs.

- **Usage per user** (Admin → Usage): every user's jobs, GPU-hours and cost this month, as the
  `users` report over the ledger says; **per team, the waits and the preemption losses**
  (median / p90 wait, runs lost: GPU-hours and USD), as the `waits` report says.
- **The GPU grid** (Availability) lists each held device with its owner, team, workload and a
  running time that ticks.
- **A maximum run time per team**: the admin sets team-b's in Quotas; team-a's (set by the API)
  shows under the submit form's field, and 999 days there is refused naming the cap (no $19,420
  preview).
- **One time format, the locale's**: the job page's timeline said "06:05:09 AM" where the panel
  says "6:05 AM" (the page is opened in a time zone where the hour has one digit).
- WCAG AA contrast (4.5:1) and the layout audit of test_sidebar_width over the Usage tab, the
  caps editor and the grid, in both themes.

Screenshots: test-artifacts/screenshots/admin-usage-{light,dark}.png (the README's admin-usage.png
with GPUQUEUE_SCREENSHOT_DIR=docs/screenshots), admin-caps-*.png, grid-holders-*.png.
"""

from __future__ import annotations

import re
import sys
import time

import pytest

from jupyter_gpuqueue.ledger import Prices, reports

from browserkit import (SCREENSHOT_DIR, api, delete_and_drain, open_panel, set_sidebar_width, show_only, use_theme,
                        wait_for_state)
from test_costs_panel import write_history
from test_sidebar_width import AUDIT

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def write_preempted(service) -> None:
    """A finished team-a job whose first run (1 h on one A100) was lost to a preemption."""
    prices = Prices()
    now = service.clock()
    t0 = max(reports.parse_month(reports.month_of(now))[0] + 600, now - 86400 * 2)
    flavor, resource = "nvidia-a100", "nvidia.com/gpu"
    run1, run2 = (t0 + 600, t0 + 4200), (t0 + 4500, t0 + 5100)
    uid = "history-preempted-sweep"
    service.ledger.add_workload({
        "uid": uid, "namespace": "team-a", "name": "preempted-sweep", "owner": "carol",
        "local_queue": "team-a-queue", "cluster_queue": "team-a-cq", "state": "Succeeded", "created_at": t0,
        "spec": {"podSets": [{"name": "main", "count": 1, "requests": {resource: 1}}], "command": ["python", "s.py"],
                 "workingDir": "/tmp", "env": {}, "maxRuntimeSeconds": 7200, "flavor": flavor, "source": "form",
                 "preemptions": [{"at": run1[1], "by": "team-b/urgent", "reason": "InCohortReclamation",
                                  "lostCostUsd": 2.21, "message": ""}]},
        "admitted_at": run2[0], "started_at": run2[0], "finished_at": run2[1], "exit_code": 0, "evictions": 1})
    for start, end in (run1, run2):
        service.ledger.open_interval(uid, flavor, resource, 1, 1.0, prices.usd_per_hour(flavor, resource, 1), start)
        service.ledger.close_intervals(uid, end)


def one_digit_hour_zone() -> str:
    """An Etc/GMT zone where the local hour is 3 now (a 2-digit-hour format shows "03:…" there)."""
    k = (3 - time.gmtime().tm_hour) % 24
    if k > 14:
        k -= 24
    return "Etc/GMT" if k == 0 else f"Etc/GMT{-k:+d}"


async def audit(locator, where: str) -> None:
    problems = await locator.evaluate(AUDIT)
    assert not problems, f"{where}: {problems}"


async def test_admin_usage_grid_owners_runtime_caps_and_times(jp_fetch, gpuqueue_service, lab_url,
                                                               chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    write_history(gpuqueue_service)
    write_preempted(gpuqueue_service)
    await api(jp_fetch, "admin", "runtime-caps", "team-a", method="PUT", body={"maxRuntimeSeconds": 86400})
    submitted = []
    try:
        for body in ({"name": "train-a100", "gpus": 1, "flavor": "nvidia-a100"},
                     {"name": "notebook-slice", "migProfile": "1g.10gb"}):
            w = await api(jp_fetch, "workloads", method="POST", body={
                **body, "localQueue": "team-a/team-a-queue", "command": SLEEP, "maxRuntime": "15m"})
            submitted.append(f"{w['namespace']}/{w['name']}")
            await wait_for_state(jp_fetch, submitted[-1], ("Running",))
        users = (await api(jp_fetch, "reports", "users"))["items"]
        waits = {t["namespace"]: t for t in (await api(jp_fetch, "reports", "waits"))["items"]}
        assert waits["team-a"]["preemptions"] == 1 and waits["team-a"]["preemptedGpuHours"] == pytest.approx(1.0)

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                context = await browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=2,
                                                    locale="en-US", timezone_id=one_digit_hour_zone())
                page = await context.new_page()
                page.set_default_timeout(30000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                panel = await open_panel(page, lab_url)
                await set_sidebar_width(page, 250)

                # -- the grid: owner, team, workload, running time that ticks
                await show_only(panel, ("availability",))
                holder = panel.locator('.jp-gpuqueue-holder[data-holder="team-a/train-a100"]')
                await expect(holder).to_contain_text(re.compile(r"GPU \d+ alice · team-a/train-a100 · \d+:\d\d$"))
                before = await holder.locator(".jp-gpuqueue-holder-time").text_content()
                await expect(holder.locator(".jp-gpuqueue-holder-time")).not_to_have_text(before, timeout=10000)
                await expect(panel.locator('.jp-gpuqueue-holder[data-holder="team-a/notebook-slice"]')).to_contain_text(
                    re.compile(r"GPU \d+ · 1g\.10gb alice · team-a/notebook-slice · \d+:\d\d$"))
                assert "alice · team-a/train-a100" in await panel.locator(
                    '.jp-gpuqueue-slot.jp-mod-used[title*="train-a100"]').first.get_attribute("title")

                # -- the submit form: team-a's cap under the field; 999 days refused, no preview
                await show_only(panel, ("submit",))
                await expect(panel.locator("#jp-gpuqueue-maxruntime-cap")).to_have_text("at most 1 d")
                await panel.locator("#jp-gpuqueue-maxruntime").fill("999d")
                err = panel.locator('.jp-gpuqueue-field-error[data-field="maxRuntime"]')
                await expect(err).to_have_text("At most 1 d for team team-a (set by an admin).")
                await expect(panel).not_to_contain_text("19,420")
                await panel.locator("#jp-gpuqueue-maxruntime").fill("1d")
                await expect(err).to_have_count(0)
                await expect(panel.locator(".jp-gpuqueue-estimate, [class*=estimate]").first).to_contain_text(
                    re.compile(r"\$\d"), timeout=15000)

                # -- the job page: the timeline in the locale's format, no 2-digit hour
                await show_only(panel, ("jobs",))
                card = panel.locator('[data-gpuqueue-job="team-a/train-a100"]')
                await card.locator(".jp-gpuqueue-job-open").click()
                jobpage = page.locator('#jp-main-dock-panel [data-gpuqueue-jobpage="team-a/train-a100"]')
                at = jobpage.locator(".jp-gpuqueue-timeline-at")
                await expect(at.first).to_be_visible()
                for text in await at.all_text_contents():
                    assert re.fullmatch(r"[1-9]:\d\d:\d\d\s?[AP]M", text.strip()), text

                # -- Admin → Usage, then Quotas' caps; light and dark
                await show_only(panel, ("admin",))
                admin = panel.locator(".jp-gpuqueue-admin")
                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    name = "light" if light else "dark"
                    if not light:
                        await use_theme(page, theme, light)
                        await set_sidebar_width(page, 250)
                    await admin.locator('[data-admin-tab="usage"]').click()
                    usage = admin.locator(".jp-gpuqueue-usage")
                    rows = usage.locator(".jp-gpuqueue-usage-users tbody tr")
                    await expect(rows).to_have_count(len(users))
                    for u in users:
                        row = usage.locator(f'tr[data-user="{u["owner"]}"][data-team="{u["namespace"]}"]')
                        shown = float((await row.locator("td").nth(3).text_content()).lstrip("$").replace(",", ""))
                        # running jobs' cost grows after the API was asked (a cent a few seconds)
                        assert u["costUsd"] - 0.006 <= shown <= u["costUsd"] + 0.25, (u, shown)
                        await expect(row.locator("td").nth(1)).to_have_text(str(u["jobs"]))
                    team_a = usage.locator('.jp-gpuqueue-usage-teamcard[data-team="team-a"]')
                    await expect(team_a.locator('[data-stat="lost-gpu-hours"]')).to_have_text("1.00 GPU-h")
                    await expect(team_a.locator('[data-stat="lost-usd"]')).to_have_text("$2.21")
                    await expect(team_a.locator(".jp-gpuqueue-usage-lost")).to_contain_text("Preempted 1×")
                    await expect(team_a.locator('[data-stat="median"]')).to_have_text(re.compile(r"^\d+ (s|min)"))
                    await expect(team_a.locator(".jp-gpuqueue-usage-waits")).to_contain_text(
                        f"{waits['team-a']['admissions']} admitted")
                    await audit(usage, f"Usage tab, {theme}")
                    await page.wait_for_timeout(300)
                    await panel.screenshot(path=str(SCREENSHOT_DIR / f"admin-usage-{name}.png"))
                    if light:  # the README's
                        await panel.locator('[data-section="admin"]').screenshot(
                            path=str(SCREENSHOT_DIR / "admin-usage.png"))

                    await admin.locator('[data-admin-tab="quotas"]').click()
                    caps = admin.locator(".jp-gpuqueue-caps")
                    await expect(caps.locator('[data-cap-team="team-a"] input')).to_have_value("1d")
                    await audit(caps, f"maximum run time per team, {theme}")
                    await caps.scroll_into_view_if_needed()
                    await caps.screenshot(path=str(SCREENSHOT_DIR / f"admin-caps-{name}.png"))

                    await show_only(panel, ("availability",))
                    grid = panel.locator(".jp-gpuqueue-grid")
                    await audit(grid, f"GPU grid with holders, {theme}")
                    await grid.screenshot(path=str(SCREENSHOT_DIR / f"grid-holders-{name}.png"))
                    await show_only(panel, ("admin",))

                # the admin sets team-b's cap in the panel: stored, and the API enforces it
                row = admin.locator('[data-cap-team="team-b"]')
                await row.locator("input").fill("1x")
                await expect(row.locator(".jp-gpuqueue-cap-error")).to_contain_text("a duration")
                await expect(row.locator(".jp-gpuqueue-cap-apply")).to_be_disabled()
                await row.locator("input").fill("12h")
                await row.locator(".jp-gpuqueue-cap-apply").click()
                await expect(row.locator(".jp-gpuqueue-cap-state")).to_contain_text("at most 12 h · set by alice")
                caps = await api(jp_fetch, "admin", "runtime-caps")
                assert next(t for t in caps["teams"] if t["namespace"] == "team-b")["maxRuntimeSeconds"] == 43200
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        await delete_and_drain(jp_fetch, gpuqueue_service, submitted)
