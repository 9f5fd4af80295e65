"""End to end in headless Chromium: a preempted job's card and its page (issue 15 item 7 and "a job's page").

A real preemption on the demo cluster: the user's ``team-b/victim`` (development priority) takes all
four H100s of team-b-cq and writes a line of log every 0.2 s; then ``team-b/urgent`` (experiment-high,
1 × H100) arrives, and team-b-cq's ``withinClusterQueue: LowerPriority`` preempts the victim. The
urgent job ends after a few seconds, the victim is admitted again and runs on.

Asserted, as a user sees them:
- the card says "preempted 1× by team-b/urgent (priority) · $… of runs lost", readable (4.5:1, not
  clipped, no one-character lines) at the sidebar's default width of 250 px in the light and the
  dark theme;
- the card's name opens the job's page in the main area (and `gpuqueue:open-job` opens the same one):
  its timeline has Submitted, Admitted, Preempted (by team-b/urgent) and Admitted again; its cost by
  run has two runs, the first "preempted", whose costs add up to the job's; "no GPU samples (NVML not
  available)" (no NVML here);
- the log follows: new lines appear while the job runs, without a reload; Download saves them;
- Resubmit creates a new workload with the same request (4 × nvidia-h100, development, team-b).

Screenshots: test-artifacts/screenshots/jobpage-*.png (GPUQUEUE_SCREENSHOT_DIR=docs/screenshots
refreshes the docs').
"""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
import time

import pytest
from test_estimates import AUDIT_TEXT, SCREENSHOT_DIR, api, check_text, set_sidebar_width, use_theme, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

FINISHED = ("Succeeded", "Failed", "Cancelled")


@pytest.fixture
def jp_server_config(jp_server_config):
    """``window.jupyterapp``, so that the test can run ``gpuqueue:open-job`` as another extension would."""
    config = dict(jp_server_config)
    config["LabApp"] = {**config.get("LabApp", {}), "expose_app_in_browser": True}
    return config


async def switch_theme(page, name: str, light: bool) -> None:
    """test_estimates' ``use_theme`` (the command palette, as a user would), tried again when the
    palette misses the keystroke on a busy machine."""
    for attempt in range(3):
        try:
            await use_theme(page, name, light)
            return
        except Exception:
            if attempt == 2:
                raise
            await page.keyboard.press("Escape")
            await page.wait_for_timeout(500)


TICKER = "import time, itertools\nfor i in itertools.count():\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)\n"


async def test_a_preempted_jobs_card_and_page(jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    created = ["team-b/victim", "team-b/urgent"]
    try:
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "victim", "localQueue": "team-b/team-b-queue", "command": [sys.executable, "-c", TICKER],
            "gpus": 4, "flavor": "nvidia-h100", "priorityClass": "development", "maxRuntime": "30m"})
        await wait_for(jp_fetch, "team-b/victim", lambda w: w["state"] == "Running")
        await asyncio.sleep(1.0)  # a run worth something
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "urgent", "localQueue": "team-b/team-b-queue",
            "command": [sys.executable, "-c", "import time; time.sleep(3)"],
            "gpus": 1, "flavor": "nvidia-h100", "priorityClass": "experiment-high", "maxRuntime": "5m"})
        await wait_for(jp_fetch, "team-b/urgent", lambda w: w["state"] in FINISHED, timeout=60)
        victim = await wait_for(jp_fetch, "team-b/victim",
                                lambda w: w["state"] == "Running" and (w["preemptions"] or {}).get("count") == 1,
                                timeout=60)
        summary = victim["preemptions"]["summary"]
        assert re.fullmatch(r"preempted 1× by team-b/urgent \(priority\) · (\$\d+\.\d\d|< \$0\.01) of runs lost",
                            summary), summary

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
                page.set_default_timeout(30000)
                page_errors: list[str] = []
                page.on("pageerror", lambda e: page_errors.append(str(e)))
                await page.goto(lab_url)
                await page.wait_for_selector("#jp-main-dock-panel", timeout=60000)
                await page.locator(".jp-gpuqueue-status").click()  # opens the panel
                panel = page.locator("#jp-gpuqueue-panel")
                await expect(panel.locator(".jp-gpuqueue-conn-live")).to_be_visible()
                for section in ("submit", "availability", "team"):
                    toggle = panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle')
                    if await toggle.get_attribute("aria-expanded") == "true":
                        await toggle.click()

                card = panel.locator('[data-gpuqueue-job="team-b/victim"]')
                line = card.locator(".jp-gpuqueue-preempted")
                await expect(line).to_have_text(summary)
                await expect(line).to_have_attribute("data-preemptions", "1")
                # the urgent job itself was never preempted: no line
                await expect(panel.locator('[data-gpuqueue-job="team-b/urgent"] .jp-gpuqueue-preempted')).to_have_count(0)

                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    if not light:
                        await switch_theme(page, theme, light)
                    await set_sidebar_width(page, 250)
                    items = await page.evaluate(AUDIT_TEXT, '[data-gpuqueue-job="team-b/victim"]')
                    check_text([i for i in items if i["text"] in summary or "victim" in i["text"]],
                               f"{theme} card at 250 px")
                    await card.scroll_into_view_if_needed()
                    await card.screenshot(path=str(SCREENSHOT_DIR / f"jobpage-card-250-{'light' if light else 'dark'}.png"))
                await switch_theme(page, "JupyterLab Light", True)

                # The card's name opens the job's page in the main area.
                await card.locator(".jp-gpuqueue-job-open").click()
                jobpage = page.locator('#jp-main-dock-panel [data-gpuqueue-jobpage="team-b/victim"]')
                await expect(jobpage).to_be_visible()
                await expect(page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current")).to_contain_text("victim")
                timeline = jobpage.locator(".jp-gpuqueue-timeline li")
                await expect(timeline.first).to_have_attribute("data-type", "Submitted")
                types = await timeline.evaluate_all("els => els.map(e => e.dataset.type)")
                assert types.count("Admitted") == 2 and "Preempted" in types, types
                assert types.index("Preempted") < len(types) - 1 - types[::-1].index("Admitted"), types
                await expect(jobpage.locator('.jp-gpuqueue-timeline li[data-type="Preempted"]')).to_contain_text(
                    "team-b/urgent")
                await expect(jobpage.locator(".jp-gpuqueue-preempted")).to_have_text(summary)
                runs = jobpage.locator(".jp-gpuqueue-runs tbody tr")
                await expect(runs).to_have_count(2)
                await expect(runs.nth(0)).to_have_attribute("data-outcome", "preempted")
                await expect(runs.nth(0)).to_contain_text("4 × nvidia-h100")
                await expect(runs.nth(1)).to_have_attribute("data-outcome", "running")
                await expect(jobpage.locator(".jp-gpuqueue-util-none")).to_have_text(
                    "no GPU samples (NVML not available)")

                # The log follows: it grows without a reload, and its end stays in view.
                log = jobpage.locator(".jp-gpuqueue-jobpage-logtext")
                await expect(log).to_contain_text("tick 3")
                await expect(jobpage.locator('[data-log-status="following"]')).to_be_visible()
                first = await log.text_content()
                await page.wait_for_timeout(2500)
                later = await log.text_content()
                assert len(later) > len(first) and later.startswith(first[:20]), (first[-80:], later[-80:])
                gap = await log.evaluate("el => el.scrollHeight - el.scrollTop - el.clientHeight")
                assert gap <= 24, f"the log does not follow its end ({gap} px below)"
                async with page.expect_download() as dl:
                    await jobpage.locator(".jp-gpuqueue-download").click()
                download = await dl.value
                assert download.suggested_filename == "team-b-victim.log"
                saved = open(await download.path(), encoding="utf-8").read()
                assert saved.startswith("tick 0\n") and "tick 5\n" in saved, saved[:200]

                # gpuqueue:open-job opens the same page, not a second one.
                await page.evaluate(
                    "() => window.jupyterapp.commands.execute('gpuqueue:open-job', {namespace: 'team-b', name: 'victim'}).then(() => true)")
                await expect(page.locator('[data-gpuqueue-jobpage="team-b/victim"]')).to_have_count(1)

                # screenshots of the page, light and dark (text audited as on the card)
                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    if not light:
                        await switch_theme(page, theme, light)
                    items = await page.evaluate(
                        AUDIT_TEXT, '[data-gpuqueue-jobpage="team-b/victim"] :is(header, .jp-gpuqueue-jobpage-meta, '
                        '.jp-gpuqueue-preempted, .jp-gpuqueue-timeline, .jp-gpuqueue-runs, .jp-gpuqueue-util-none)')
                    check_text(items, f"{theme} job page")
                    await page.locator("#jp-main-dock-panel").screenshot(
                        path=str(SCREENSHOT_DIR / f"jobpage-{'light' if light else 'dark'}.png"))
                await switch_theme(page, "JupyterLab Light", True)

                # Resubmit: the same request again, as a new workload.
                await jobpage.locator(".jp-gpuqueue-resubmit").click()
                note = jobpage.locator(".jp-gpuqueue-jobpage-actions [role=status]")
                await expect(note).to_have_text(re.compile(r"^Submitted team-b/victim-r[0-9a-f]{4}$"))
                new_key = await note.get_attribute("data-gpuqueue-action")
                created.append(new_key)
                again = await api(jp_fetch, "workloads", *new_key.split("/"))
                assert again["command"] == victim["command"] and again["priorityClass"] == "development"
                assert again["podSets"][0]["requests"].get("nvidia.com/gpu") in ("4", 4), again["podSets"]
                assert again["maxRuntimeSeconds"] == victim["maxRuntimeSeconds"]
                # it waits for the H100s the victim holds, on the H100s: never silently elsewhere
                await expect(panel.locator(f'[data-gpuqueue-job="{new_key}"]')).to_be_attached()
                # its name on the note opens its page
                await note.locator("button").click()
                await expect(page.locator(f'[data-gpuqueue-jobpage="{new_key}"]')).to_be_visible()

                # Clone into the form: the (collapsed) submit section opens, holding the job's request.
                await page.locator('#jp-main-dock-panel .lm-TabBar-tab', has_text="victim").first.click()
                await jobpage.locator(".jp-gpuqueue-clone").click()
                submit = panel.locator('[data-section="submit"]')
                await expect(submit.locator(".jp-gpuqueue-section-toggle")).to_have_attribute("aria-expanded", "true")
                command = await submit.locator("#jp-gpuqueue-command").input_value()
                # (the command field is one line: the -c program's line breaks do not survive it)
                assert shlex.split(command)[:2] == victim["command"][:2] and "tick" in command, command
                await expect(submit.locator("#jp-gpuqueue-gpus")).to_have_value("4")
                # Collapsing the section keeps what it holds (issue 15 item 10).
                await submit.locator(".jp-gpuqueue-section-toggle").click()
                await submit.locator(".jp-gpuqueue-section-toggle").click()
                assert await submit.locator("#jp-gpuqueue-command").input_value() == command
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


async def test_the_utilisation_chart_draws_nvml_samples(jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    """Where NVML sampled the job's GPUs (not on this machine: the samples are added to the server's
    real timeline answer on its way to the page), one line a device, 0–100 %, with a legend; and an
    ended job's page neither follows its log nor offers what only a running job has."""
    import json as _json

    from playwright.async_api import async_playwright, expect

    await api(jp_fetch, "workloads", method="POST", body={
        "name": "short", "localQueue": "team-a/team-a-queue",
        "command": [sys.executable, "-c", "print('done')"], "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "5m"})
    w = await wait_for(jp_fetch, "team-a/short", lambda w: w["state"] in FINISHED)
    assert w["state"] == "Succeeded", w
    t0 = w["startedAt"]

    async def add_samples(route):
        response = await route.fetch()
        body = await response.json()
        body["utilization"] = [
            {"device": dev, "at": t0 + i, "percent": p}
            for dev, ps in (("GPU 0", (10, 80, 95, 90)), ("GPU 1", (5, 40, 60, 20))) for i, p in enumerate(ps)]
        await route.fulfill(response=response, body=_json.dumps(body))

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30000)
            await page.route("**/gpuqueue/api/workloads/team-a/short/timeline*", add_samples)
            await page.goto(lab_url)
            await page.wait_for_selector("#jp-main-dock-panel", timeout=60000)
            await page.evaluate(
                "() => window.jupyterapp.commands.execute('gpuqueue:open-job', {namespace: 'team-a', name: 'short'}).then(() => true)")
            jobpage = page.locator('[data-gpuqueue-jobpage="team-a/short"]')
            await expect(jobpage).to_have_attribute("data-state", "Succeeded")
            chart = jobpage.locator(".jp-gpuqueue-util")
            await expect(chart.locator("polyline")).to_have_count(2)
            await expect(chart.locator(".jp-gpuqueue-util-legend")).to_have_text("GPU 0GPU 1")
            points = await chart.locator("polyline").first.get_attribute("points")
            assert len(points.split()) == 4, points
            await expect(jobpage.locator(".jp-gpuqueue-util-none")).to_have_count(0)
            await expect(jobpage.locator(".jp-gpuqueue-jobpage-logtext")).to_have_text("done\n")
            await expect(jobpage.locator('[data-log-status="idle"]')).to_be_visible()
            await expect(jobpage.locator(".jp-gpuqueue-runs tbody tr")).to_have_attribute("data-outcome", "succeeded")
            await switch_theme(page, "JupyterLab Dark", False)
            items = await page.evaluate(AUDIT_TEXT, '[data-gpuqueue-jobpage="team-a/short"] .jp-gpuqueue-util-legend')
            check_text(items, "dark: the chart's legend")
            await jobpage.locator('[data-section="utilization"]').screenshot(
                path=str(SCREENSHOT_DIR / "jobpage-utilization-dark.png"))
            # a job that is not there (a page restored after the ledger was reset) says so
            await page.evaluate(
                "() => window.jupyterapp.commands.execute('gpuqueue:open-job', {namespace: 'team-a', name: 'nope'}).then(() => true)")
            await expect(page.locator('[data-gpuqueue-jobpage="team-a/nope"] .jp-gpuqueue-form-error')).to_contain_text(
                re.compile("not found|no workload|unknown", re.I))
        finally:
            await browser.close()
