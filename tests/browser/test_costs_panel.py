"""The cost view and the status-bar item in JupyterLab (headless Chromium) against a real server,
queue, SQLite ledger and running jobs.

Earlier usage this month is written to the ledger as the service writes it (finished workloads
with closed usage intervals); then a job runs on an A100, one on a MIG slice, and one waits behind
team-b. The test checks the status bar ("GPU · #1 · 2 running · $…", warning style once the team's
soft budget share is reached, ok again as soon as an admin raises the budget), the budget bars,
the daily-spend chart, the top jobs, idle capacity and the MIG availability grid, and takes
docs-ready screenshots (costs.png, statusbar.png) into test-artifacts/screenshots/
(GPUQUEUE_SCREENSHOT_DIR=docs/screenshots refreshes the README's).
"""

from __future__ import annotations

import re
import sys

import pytest

from jupyter_gpuqueue.ledger import Prices, reports
from browserkit import SCREENSHOT_DIR, api, delete_and_drain, set_sidebar_width, wait_for_lab, wait_for_state


pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]

# (name, team, owner, flavor, resource, quantity, days ago, hours)
HISTORY = [
    ("bert-finetune", "team-a", "alice", "nvidia-a100", "nvidia.com/gpu", 2, 6, 3.0),
    ("resnet50-sweep", "team-a", "carol", "nvidia-a100", "nvidia.com/gpu", 1, 5, 4.5),
    ("llama-lora", "team-a", "alice", "nvidia-a100", "nvidia.com/gpu", 1, 3, 2.0),
    ("notebook-mig", "team-a", "alice", "nvidia-a100-mig", "nvidia.com/mig-1g.10gb", 1, 2, 6.0),
    ("vit-eval", "team-a", "carol", "nvidia-l4", "nvidia.com/gpu", 2, 1, 3.0),
    ("h100-pretrain", "team-b", "bob", "nvidia-h100", "nvidia.com/gpu", 4, 4, 2.5),
    ("whisper-asr", "team-b", "bob", "nvidia-l4", "nvidia.com/gpu", 1, 2, 5.0),
]


@pytest.fixture
def gpuqueue_config(gpuqueue_config):
    gpuqueue_config["budgets"] = {"team-b": {"monthlyUSD": 400, "warnAt": 0.8, "hard": True}}
    return gpuqueue_config


def write_history(service) -> None:
    """Finished workloads of this month with their usage intervals (clipped to the month)."""
    prices = Prices()
    now = service.clock()
    month_start = reports.parse_month(reports.month_of(now))[0]
    for i, (name, ns, owner, flavor, resource, qty, days_ago, hours) in enumerate(HISTORY):
        start = max(month_start + 3600 * i, now - days_ago * 86400 - 3600 * (2 + i))
        end = min(start + hours * 3600, now - 60)
        uid = f"history-{name}"
        service.ledger.add_workload({
            "uid": uid, "namespace": ns, "name": name, "owner": owner, "local_queue": f"{ns}-queue",
            "cluster_queue": f"{ns}-cq", "state": "Succeeded", "created_at": start - 120,
            "spec": {"podSets": [{"name": "main", "count": 1, "requests": {resource: qty}}],
                     "command": ["python", f"{name}.py"], "workingDir": "/tmp", "env": {},
                     "maxRuntimeSeconds": int(hours * 3600) + 600, "flavor": flavor, "source": "form"},
            "admitted_at": start, "started_at": start, "finished_at": end, "exit_code": 0})
        service.ledger.open_interval(uid, flavor, resource, qty, prices.gpu_equivalent(resource, qty),
                                     prices.usd_per_hour(flavor, resource, qty), start)
        service.ledger.close_intervals(uid, end)
    service.budgets.invalidate()


async def test_cost_view_and_status_bar(jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    write_history(gpuqueue_service)
    # team-a's budget: its month-to-date spend is 85 % of it, so the soft warning is on.
    spent = next(t for t in (await api(jp_fetch, "budgets"))["teams"] if t["namespace"] == "team-a")["spentUsd"]
    budget = round(spent / 0.85, 2)
    await api(jp_fetch, "budgets", "team-a", method="PUT", body={"monthlyUSD": budget, "warnAt": 0.8, "hard": False})

    submitted = []
    try:
        for body in (
            {"name": "h100-blocker", "localQueue": "team-b/team-b-queue", "gpus": 4, "flavor": "nvidia-h100"},
            {"name": "train-a100", "localQueue": "team-a/team-a-queue", "gpus": 1, "flavor": "nvidia-a100"},
            {"name": "notebook-slice", "localQueue": "team-a/team-a-queue", "migProfile": "1g.10gb"},
        ):
            w = await api(jp_fetch, "workloads", method="POST", body={**body, "command": SLEEP, "maxRuntime": "15m"})
            submitted.append(f"{w['namespace']}/{w['name']}")
            await wait_for_state(jp_fetch, submitted[-1], ("Running",))
        w = await api(jp_fetch, "workloads", method="POST", body={
            "name": "waits-for-h100", "localQueue": "team-a/team-a-queue", "gpus": 1, "flavor": "nvidia-h100",
            "command": SLEEP, "maxRuntime": "15m"})
        submitted.append(f"{w['namespace']}/{w['name']}")
        assert w["state"] == "Pending" and w["budgetWarning"]

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 1000}, device_scale_factor=2)
                page.set_default_timeout(30000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                await page.goto(lab_url)
                await wait_for_lab(page)

                # The status bar: position of the next pending job (1-based), running jobs, spend.
                status = page.locator(".jp-gpuqueue-status")
                await expect(status).to_have_text(re.compile(r"^GPU · #1 · 3 running · \$[\d,]+\.\d\d$"))
                await expect(status).to_have_attribute("data-state", "warning")
                shown = float((await status.text_content()).split("$")[-1].replace(",", ""))
                assert spent <= shown < spent + 5, (spent, shown)
                assert "of its" in (await status.get_attribute("title"))
                box = await page.locator("#jp-main-statusbar").bounding_box()
                await page.screenshot(path=str(SCREENSHOT_DIR / "statusbar.png"),
                                      clip={"x": 0, "y": box["y"] - 6, "width": 420, "height": box["height"] + 6})

                # Clicking it opens the panel; the Costs section shows the month.
                await status.click()
                panel = page.locator("#jp-gpuqueue-panel")
                await expect(panel).to_be_visible()
                await set_sidebar_width(page, 430)
                for section in ("submit", "jobs", "team", "costs"):  # fold three, open Costs
                    await panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle').click()
                costs = panel.locator(".jp-gpuqueue-costs")
                await expect(costs).to_be_visible()
                await expect(costs.locator('.jp-gpuqueue-budget[data-team="team-a"]')).to_have_attribute(
                    "data-state", "warning")
                await expect(costs.locator('.jp-gpuqueue-budget[data-team="team-b"]')).to_have_attribute(
                    "data-state", "ok")
                await expect(costs.locator('.jp-gpuqueue-budget[data-team="team-a"]')).to_contain_text(
                    f"of ${budget:,.2f}")
                days = await costs.locator(".jp-gpuqueue-chart g[data-date]").count()
                assert days >= 2
                rows = costs.locator(".jp-gpuqueue-topjobs tbody tr")
                await expect(rows).to_have_count(5)
                await expect(rows.first).to_contain_text("h100-pretrain")  # 4 × H100 × 2.5 h = $37.50
                await expect(rows.first).to_contain_text("$37.50")
                await expect(costs.locator('.jp-gpuqueue-idle tr[data-flavor="nvidia-h100"]')).to_be_visible()
                # idle notebooks' GPUs given back (issue 16): none in this scenario, said so
                await expect(costs).to_contain_text("GPU-hours reclaimed from idle notebooks")
                await expect(costs.locator(".jp-gpuqueue-reclaimed-none")).to_have_text("None this month.")
                href = await costs.locator(".jp-gpuqueue-costs-csv a").first.get_attribute("href")
                assert "reports/teams?format=csv&month=" in href
                csv = await page.evaluate("url => fetch(url).then(r => r.text())", href)
                assert csv.splitlines()[0].startswith("namespace,month,jobs,gpuHours,costUsd")
                # The MIG grid: the slice held by notebook-slice, on GPU 6 of node-a.
                grid = panel.locator('.jp-gpuqueue-grid-node[data-node="node-a"] [data-gpu="6"]')
                await expect(grid.locator(".jp-gpuqueue-slot.jp-mod-used")).to_have_count(1)
                await expect(grid.locator(".jp-gpuqueue-slot.jp-mod-used")).to_have_text("notebook-slice")
                await expect(panel.locator('[data-node="node-b"] .jp-gpuqueue-slot.jp-mod-used')).to_have_count(4)
                # Whole GPUs and MIG slices are counted apart (issue 15 item 10: "10 free devices").
                head_a = panel.locator('.jp-gpuqueue-grid-node[data-node="node-a"] .jp-gpuqueue-grid-node-name')
                await expect(head_a).to_contain_text(re.compile(r"\d+ free GPUs? · \d+ free MIG slices?"))
                head_b = panel.locator('.jp-gpuqueue-grid-node[data-node="node-b"] .jp-gpuqueue-grid-node-name')
                await expect(head_b).to_contain_text(re.compile(r"\d+ free GPUs?$"))

                await panel.locator('[data-section="availability"] .jp-gpuqueue-section-toggle').click()
                await expect(panel.locator(".jp-gpuqueue-grid")).to_have_count(0)
                await page.wait_for_timeout(300)
                await panel.screenshot(path=str(SCREENSHOT_DIR / "costs.png"))
                await panel.locator('[data-section="availability"] .jp-gpuqueue-section-toggle').click()
                await panel.locator('[data-section="costs"] .jp-gpuqueue-section-toggle').click()
                await page.wait_for_timeout(300)
                await panel.screenshot(path=str(SCREENSHOT_DIR / "mig-grid.png"))

                # Cancelling the pending job: the position goes, the spend keeps ticking.
                await api(jp_fetch, "workloads", *submitted[-1].split("/"), method="DELETE")
                await expect(status).to_have_text(re.compile(r"^GPU · 3 running · \$[\d,]+\.\d\d$"))

                # An admin raises team-a's budget: the status bar hears of it from the budgets
                # event (no workload changes; its own refetch is a minute away).
                await page.wait_for_timeout(1000)  # the refetch after the cancel is done
                await api(jp_fetch, "budgets", "team-a", method="PUT",
                          body={"monthlyUSD": budget * 10, "warnAt": 0.8, "hard": False})
                await expect(status).to_have_attribute("data-state", "ok", timeout=5000)
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        await delete_and_drain(jp_fetch, gpuqueue_service, submitted)
