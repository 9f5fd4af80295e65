"""End to end in headless Chromium: estimated start times on the GPU Queue panel and the status bar.

The ledger starts with a history: ten finished team-b runs of 6 to 30 minutes (written through the
real Ledger before the server starts, as an earlier day's work would have left them). Team-b's
blocker then takes all four H100s (declared maximum: an hour); the estimator predicts its end from
team-b's history, so the jobs behind it get an estimate with a range.

The user's two pending jobs:

- ``team-a/wants-h100`` (1 × nvidia-h100, team-a, which has no H100 quota of its own and borrows
  team-b's): waits for the blocker, which belongs to another team: "a team-b workload"; the same
  request on an A100, free now, is offered as a faster way;
- ``team-b/next-h100`` (team-b's own queue): waits for "team-b/h100-blocker" by name.

Asserted: "starts in ~N min (A–B min)", "waiting for 4 × nvidia-h100 from …", the faster option,
the tooltip that says what an estimate cannot foresee, the clock ticking from the browser's time
alone (Playwright's clock moves it: minutes later, past the estimate "any moment now", later
"overdue", never a negative time), the status bar's tooltip naming the next pending job, money
formatting ("< $0.01" for a job that failed at once, "$0.00" for nothing; issue 15 item 4), no text clipped or wrapped one character a line at the sidebar's default
width (250 px) and at 300 px, and WCAG AA contrast (4.5:1) of the estimate's text in the light and
the dark theme. Screenshots: test-artifacts/screenshots/estimates-*.png
(GPUQUEUE_SCREENSHOT_DIR=docs/screenshots refreshes the docs').
"""

from __future__ import annotations

import re
import shutil
import sys
import time
import uuid

import pytest
from browserkit import LIVE_TIMEOUT_MS, SCREENSHOT_DIR, api, set_sidebar_width, sleeper, use_theme, wait_for, wait_for_lab

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

FINISHED = ("Succeeded", "Failed", "Cancelled")
HISTORY_MINUTES = (6, 8, 9, 11, 12, 14, 16, 19, 24, 30)


@pytest.fixture
def gpuqueue_config(gpuqueue_config):
    """The demo queue, with team-b's past runs in the ledger (the estimator's history)."""
    from jupyter_gpuqueue.ledger import Ledger

    ledger = Ledger(gpuqueue_config["db_url"])
    try:
        now = time.time()
        for i, minutes in enumerate(HISTORY_MINUTES):
            end = now - 86400 + i * 3600
            ledger.add_workload({
                "uid": str(uuid.uuid4()), "namespace": "team-b", "name": f"past-run-{i}", "owner": "bob",
                "local_queue": "team-b-queue", "cluster_queue": "team-b-cq", "state": "Succeeded",
                "created_at": end - minutes * 60 - 5, "started_at": end - minutes * 60, "finished_at": end,
                "exit_code": 0,
                "spec": {"podSets": [{"name": "main", "count": 1, "requests": {"nvidia.com/gpu": 4}}],
                         "command": ["python", "train.py"], "workingDir": "/tmp", "env": {},
                         "maxRuntimeSeconds": 3600},
            })
    finally:
        ledger.close()
    return gpuqueue_config


@pytest.fixture
def gpuqueue_server_config():
    """The user is a researcher, not an admin: other teams' workloads are not named to her."""
    return {"tornado_settings": {"gpuqueue_standalone_admin": False}}


# Every text node under `selector`: its colour against the background it is drawn on (alpha
# blended up the tree), the WCAG contrast ratio, and whether its element is wrapped to one
# character a line or clipped.
AUDIT_TEXT = """selector => {
  const parse = c => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, bottom) => {
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat([1]);
  };
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const bg = parse(getComputedStyle(e).backgroundColor);
      if (bg[3] > 0) layers.push(bg);
      if (bg[3] >= 1) break;
    }
    let c = [255, 255, 255, 1];
    for (const l of layers.reverse()) c = over(l, c);
    return c;
  };
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const out = [];
  for (const root of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const text = n.textContent.trim();
      if (!text) continue;
      const el = n.parentElement;
      const style = getComputedStyle(el);
      const bg = background(el);
      let fg = parse(style.color);
      let opacity = 1;
      for (let e = el; e; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
      fg = over([fg[0], fg[1], fg[2], fg[3] * opacity], bg);
      const l1 = lum(fg), l2 = lum(bg);
      const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
      const range = document.createRange();
      range.selectNodeContents(n);
      const rects = [...range.getClientRects()];
      const lines = new Set(rects.map(r => Math.round(r.top))).size;
      const box = el.getBoundingClientRect();
      out.push({
        text: text.slice(0, 60), ratio: Math.round(ratio * 100) / 100, fontSize: style.fontSize,
        lines, chars: text.length, width: Math.round(box.width),
        clipped: el.scrollWidth > el.clientWidth + 1 && style.overflow !== 'visible'
      });
    }
  }
  return out;
}"""


def check_text(items: list, where: str) -> None:
    assert items, f"{where}: no text found"
    for it in items:
        assert it["ratio"] >= 4.5, f"{where}: contrast {it['ratio']}:1 below 4.5:1 for {it['text']!r}"
        # one character a line: as many lines as characters (or nearly) for any word of text
        assert it["chars"] < 8 or it["lines"] < it["chars"] / 4, f"{where}: {it['text']!r} wraps {it['lines']} lines"
        assert not it["clipped"], f"{where}: {it['text']!r} is clipped"


async def test_estimates_on_the_card_and_the_status_bar(jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    try:
        # A job that fails at once costs a fraction of a cent (issue 15: it read "$0.").
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "fails-at-once", "localQueue": "team-a/team-a-queue", "gpus": 1, "flavor": "nvidia-l4",
            "command": [shutil.which("python") or sys.executable, "-c", "raise SystemExit(3)"], "maxRuntime": "5m"})
        failed = await wait_for(jp_fetch, "team-a/fails-at-once", lambda w: w["state"] in FINISHED)
        assert failed["state"] == "Failed" and 0 < failed["costUsd"] < 0.005, failed
        # team-b's blocker holds all four H100s; the estimator knows team-b's runs take 6-30 min.
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "h100-blocker", "localQueue": "team-b/team-b-queue", "command": sleeper(900),
            "gpus": 4, "flavor": "nvidia-h100", "maxRuntime": "1h"})
        created.append("team-b/h100-blocker")
        await wait_for(jp_fetch, "team-b/h100-blocker", lambda w: w["state"] == "Running")
        for name, queue in (("wants-h100", "team-a/team-a-queue"), ("next-h100", "team-b/team-b-queue")):
            await api(jp_fetch, "workloads", method="POST", body={
                "name": name, "localQueue": queue, "command": sleeper(900), "gpus": 1,
                "flavor": "nvidia-h100", "maxRuntime": "30m"})
        created += ["team-a/wants-h100", "team-b/next-h100"]
        mine = await wait_for(jp_fetch, "team-a/wants-h100",
                              lambda w: w["estimatedStartAt"] is not None and w["fasterOptions"],
                              timeout=75)  # faster options: at once for new pending work, on a refresh
        theirs = await wait_for(jp_fetch, "team-b/next-h100", lambda w: w["estimatedStartAt"] is not None)
        assert mine["state"] == theirs["state"] == "Pending"
        # the API's contract, as the panel reads it
        assert mine["estimateReason"] is None and mine["estimatedStartRange"]["early"] < mine["estimatedStartRange"]["late"]
        (wf,) = mine["waitingFor"][:1]
        assert wf["namespace"] == "team-b" and wf["name"] is None and wf["summary"] == "4 × nvidia-h100"
        assert theirs["waitingFor"][0]["name"] == "h100-blocker"
        assert any(o["startsNow"] and o["flavor"] for o in mine["fasterOptions"]), mine["fasterOptions"]

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900})
                page.set_default_timeout(30000)
                page_errors: list[str] = []
                page.on("pageerror", lambda e: page_errors.append(str(e)))
                await page.goto(lab_url)
                await wait_for_lab(page)
                # the status bar's tooltip names the next pending job and its estimate
                status = page.locator(".jp-gpuqueue-status")
                await expect(status).to_have_attribute("title", re.compile(
                    r"Your next pending job: team-(a/wants|b/next)-h100, #1 in team-[ab]-cq\n  starts\sin\s~\d+\smin"))
                title = await status.get_attribute("title")
                assert "waiting for 4 × nvidia-h100 from" in title, title
                await status.click()  # opens the panel
                panel = page.locator("#jp-gpuqueue-panel")
                await expect(panel.locator(".jp-gpuqueue-conn-live")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
                # the form, the availability and the team queue are folded: the cards are what this is about
                for section in ("submit", "availability", "team"):
                    toggle = panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle')
                    if await toggle.get_attribute("aria-expanded") == "true":
                        await toggle.click()

                card = panel.locator('[data-gpuqueue-job="team-a/wants-h100"]')
                start = card.locator(".jp-gpuqueue-eta-start")
                # (no-break spaces inside: "~11 min" never wraps between the number and its unit)
                await expect(start).to_have_text(re.compile(r"^starts\sin\s~\d+\smin\s\((\d+–\d+\smin|up\sto\s\d+\smin)\)$"))
                waiting = card.locator(".jp-gpuqueue-eta-waiting li").first
                await expect(waiting).to_have_text(re.compile(
                    r"^waiting for 4 × nvidia-h100 from a team-b workload \(ends ~\d{1,2}:\d\d( [AP]M)?\)$"))
                faster = card.locator(".jp-gpuqueue-eta-faster li").first
                await expect(faster).to_contain_text("is free now: start at once, $", timeout=15000)
                tooltip = await start.get_attribute("title")
                assert "cannot foresee" in tooltip and "higher-priority" in tooltip and "quota" in tooltip, tooltip
                assert "preemptions" in tooltip and "run times" in tooltip, tooltip
                # a workload of the user's own team is named
                own = panel.locator('[data-gpuqueue-job="team-b/next-h100"] .jp-gpuqueue-eta-waiting li').first
                await expect(own).to_contain_text("from your team-b/h100-blocker (ends ~")
                # money: a pending job costs nothing yet; one that failed at once a fraction of a cent
                await expect(card.locator(".jp-gpuqueue-cost")).to_have_text("$0.00")
                failed_card = panel.locator('[data-gpuqueue-job="team-a/fails-at-once"]')
                await expect(failed_card.locator(".jp-gpuqueue-cost")).to_have_text("< $0.01")
                await expect(failed_card.locator(".jp-gpuqueue-clock")).to_have_text(re.compile(r"^ran 0:0\d$"))

                # screenshots at the sidebar's default width and at 300 px, light and dark
                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    if not light:
                        await use_theme(page, theme, light)
                    for width in (250, 300):
                        await set_sidebar_width(page, width)
                        items = await page.evaluate(AUDIT_TEXT, "#jp-gpuqueue-panel .jp-gpuqueue-eta")
                        check_text(items, f"{theme} at {width} px")
                        overflow = await panel.evaluate("el => el.scrollWidth - el.clientWidth")
                        assert overflow <= 1, f"{theme} at {width} px: the panel scrolls sideways by {overflow} px"
                        await panel.evaluate("el => { el.scrollTop = 0; }")
                        await panel.screenshot(path=str(SCREENSHOT_DIR / f"estimates-{width}-{'light' if light else 'dark'}.png"))
                await use_theme(page, "JupyterLab Light", True)

                # The clock ticks from the browser's time alone: move it, the words follow.
                at = mine["estimatedStartAt"]
                rng = mine["estimatedStartRange"]
                await page.clock.install()
                shown = lambda: start.text_content()  # noqa: E731
                await page.clock.set_system_time(at - 5 * 60 - 20)
                await page.clock.run_for(16000)
                await expect(start).to_have_text(re.compile(r"^starts\sin\s~(4|5|6)\smin"))
                await page.clock.set_system_time(at + 30)
                await page.clock.run_for(16000)
                await expect(start).to_have_text("starts any moment now")
                await page.clock.set_system_time(max(rng["late"], at + 120) + 600)
                await page.clock.run_for(16000)
                await expect(start).to_have_text(re.compile(r"^start overdue \(expected ~\d{1,2}:\d\d"))
                assert "-" not in (await shown()).replace("–", "")
                await expect(card).to_have_attribute("data-state", "Pending")
                await page.clock.set_system_time(time.time())
                await page.clock.run_for(16000)

                # The user cancels the blocker's neighbour: the card ends, its cost reads $0.00
                # (never "$0."), and the estimate lines go with the pending state.
                await api(jp_fetch, "workloads", "team-a", "wants-h100", method="DELETE")
                await expect(card).to_have_attribute("data-state", "Cancelled")
                await expect(card.locator(".jp-gpuqueue-eta")).to_have_count(0)
                await expect(card.locator(".jp-gpuqueue-cost")).to_have_text("$0.00")
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
