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
  run has two runs, the first "preempted", whose costs add up to the job's; its GPU utilisation and
  GPU memory charts (one line a device) drawn from the samples the service took through the NVML
  seam (``inventory/nvml.gpu_samples`` given a pynvml-shaped object: this machine has no GPU), the
  memory chart's legend giving each H100's last sample and peak "of 81,559 MiB" as the timeline
  holds them, readable in the light and the dark theme;
- the log follows: new lines appear while the job runs, without a reload; Download saves them;
- Resubmit creates a new workload with the same request (4 × nvidia-h100, development, team-b).

A job NVML never sampled (no NVML: the second test) says so in both charts' places.

Screenshots: test-artifacts/screenshots/jobpage-*.png (GPUQUEUE_SCREENSHOT_DIR=docs/screenshots
refreshes the docs').
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pynvml
import pytest

from jupyter_gpuqueue.inventory.nvml import gpu_samples
from browserkit import LIVE_TIMEOUT_MS, SCREENSHOT_DIR, api, set_sidebar_width, use_theme, wait_for, wait_for_lab
from test_estimates import AUDIT_TEXT, check_text

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


MIB = 1024 * 1024
H100_MIB = 81559  # what NVML reports for an H100 80GB HBM3


class TrainingNvml:
    """The pynvml functions ``gpu_samples`` calls, with pynvml's structs and errors, for the demo
    inventory's H100s (node-b): 81,559 MiB each; each pass (nvmlInit) device ``i`` holds
    ``(i + 1) × 4 GiB + 1 GiB × passes`` (up to 72 GiB), as a training job's memory grows, and is
    busy ``55 + 10 i ± 5`` %. Any other UUID: NVML_ERROR_NOT_FOUND."""

    def __init__(self, uuids):
        self.uuids = list(uuids)
        self.passes = 0

    def nvmlInit(self):
        self.passes += 1

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        uuid = uuid.decode()
        if uuid not in self.uuids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self.uuids.index(uuid)

    def nvmlDeviceGetUtilizationRates(self, i):
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = 55 + 10 * i + (5 if self.passes % 2 else -5), 30
        return u

    def nvmlDeviceGetMemoryInfo(self, i):
        m = pynvml.c_nvmlMemory_t()
        m.total = H100_MIB * MIB
        m.used = min(72 * 1024, (i + 1) * 4096 + 1024 * self.passes) * MIB
        m.free = m.total - m.used
        return m


def memory_legend(samples: list[dict]) -> dict[str, str]:
    """What the memory chart's legend says of each device: its last sample and its peak, whole
    MiB grouped by thousands, "of" its total."""
    out = {}
    for dev in dict.fromkeys(s["device"] for s in samples):
        mine = [s for s in samples if s["device"] == dev]
        last, peak = mine[-1]["memoryUsedMiB"], max(s["memoryUsedMiB"] for s in mine)
        out[dev] = f"{last:,.0f} of {mine[-1]['memoryTotalMiB']:,.0f} MiB (peak {peak:,.0f})"
    return out


TICKER = "import time, itertools\nfor i in itertools.count():\n    print(f'tick {i}', flush=True)\n    time.sleep(0.2)\n"


async def test_a_preempted_jobs_card_and_page(jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    created = ["team-b/victim", "team-b/urgent"]
    h100s = [g.uuid for n in gpuqueue_service.inventory.nodes if n.name == "node-b" for g in n.gpus]
    nvml = TrainingNvml(h100s)
    costs = gpuqueue_service.costs
    costs.utilization_interval = 0.5
    costs.utilization_sampler = lambda uuids: gpu_samples(uuids, nvml)  # NVML, through its seam
    try:
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "victim", "localQueue": "team-b/team-b-queue", "command": [sys.executable, "-c", TICKER],
            "gpus": 4, "flavor": "nvidia-h100", "priorityClass": "development", "maxRuntime": "30m"})
        await wait_for(jp_fetch, "team-b/victim", lambda w: w["state"] == "Running")
        await asyncio.sleep(1.0)  # a run worth something
        await api(jp_fetch, "workloads", method="POST", body={
            "name": "urgent", "localQueue": "team-b/team-b-queue",
            "command": [sys.executable, "-c", "import time; time.sleep(1)"],
            "gpus": 1, "flavor": "nvidia-h100", "priorityClass": "experiment-high", "maxRuntime": "5m"})
        await wait_for(jp_fetch, "team-b/urgent", lambda w: w["state"] in FINISHED, timeout=60)
        victim = await wait_for(jp_fetch, "team-b/victim",
                                lambda w: w["state"] == "Running" and (w["preemptions"] or {}).get("count") == 1,
                                timeout=60)
        summary = victim["preemptions"]["summary"]
        assert re.fullmatch(r"preempted 1× by team-b/urgent \(priority\) · (\$\d+\.\d\d|< \$0\.01) of runs lost",
                            summary), summary
        # a few NVML passes of its second run, then no more (the page's numbers stay put)
        for _ in range(100):
            t = await api(jp_fetch, "workloads", "team-b", "victim", "timeline")
            if len({s["at"] for s in t["memory"] if s["at"] >= victim["startedAt"]}) >= 3:
                break
            await asyncio.sleep(0.2)
        costs.utilization_sampler = None
        await asyncio.sleep(0.3)  # a pass under way ends
        samples = (await api(jp_fetch, "workloads", "team-b", "victim", "timeline"))["memory"]
        assert {s["device"] for s in samples} == set(h100s), samples[-4:]
        legend = memory_legend(samples)

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
                page.set_default_timeout(30000)
                page_errors: list[str] = []
                page.on("pageerror", lambda e: page_errors.append(str(e)))
                await page.goto(lab_url)
                await wait_for_lab(page)
                await page.locator(".jp-gpuqueue-status").click()  # opens the panel
                panel = page.locator("#jp-gpuqueue-panel")
                await expect(panel.locator(".jp-gpuqueue-conn-live")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
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
                # GPU utilisation and GPU memory, one line per H100, from the service's NVML samples
                util = jobpage.locator('[data-section="utilization"] .jp-gpuqueue-util')
                await expect(util.locator("path.jp-gpuqueue-util-line")).to_have_count(4)
                memory = jobpage.locator('[data-section="memory"] .jp-gpuqueue-mem')
                lines = memory.locator("path.jp-gpuqueue-util-line")
                await expect(lines).to_have_count(4)
                await expect(memory.locator("svg")).to_have_attribute(
                    "aria-label", re.compile(r"^GPU memory used of 4 device\(s\) from .* MiB$"))
                for dev, text in legend.items():
                    await expect(memory.locator(f'[data-device="{dev}"] .jp-gpuqueue-mem-value')).to_have_text(text)
                labels = await memory.locator(".jp-gpuqueue-util-label").all_text_contents()
                assert labels[:4] == ["0", "20 GiB", "40 GiB", "60 GiB"], labels  # up to the H100's 79.6 GiB
                await expect(memory.locator(".jp-gpuqueue-mem-total")).to_have_text("total 81,559 MiB")  # theirs
                mine = [s for s in samples if s["device"] == h100s[0]]
                first = memory.locator(f'path[data-device="{h100s[0]}"]')
                await expect(first).to_have_attribute("data-samples", str(len(mine)))
                d = await first.get_attribute("d")
                # one point a sample; the line is broken where the job was preempted (a new run)
                assert d.count("M") + d.count("L") == len(mine), d
                assert d.count("M") == len({s["at"] >= victim["startedAt"] for s in mine}), (d, mine)
                await expect(jobpage.locator(".jp-gpuqueue-util-none, .jp-gpuqueue-mem-none")).to_have_count(0)

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
                        '.jp-gpuqueue-preempted, .jp-gpuqueue-timeline, .jp-gpuqueue-runs, .jp-gpuqueue-util-legend, '
                        '.jp-gpuqueue-jobpage-charts h2)')
                    check_text(items, f"{theme} job page")
                    assert sum(1 for i in items if "MiB (peak" in i["text"]) == 4, items
                    # the whole page, at the default width (docs/screenshots/jobpage-light.png)
                    await page.set_viewport_size({"width": 1280, "height": 1500})
                    await page.wait_for_timeout(300)
                    await page.locator("#jp-main-dock-panel").screenshot(
                        path=str(SCREENSHOT_DIR / f"jobpage-{'light' if light else 'dark'}.png"))
                    await page.set_viewport_size({"width": 1280, "height": 900})
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
                # Issue 34 item 3: the -c program's line breaks survive the one-line command field
                # (as bash's $'…\n…'): bash reads the same argv back, and so does the form.
                words = subprocess.run(["bash", "-c", f'for w in {command}; do printf "%s\\0" "$w"; done'],
                                       capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
                assert words == victim["command"], (command, words)
                await expect(submit.locator("#jp-gpuqueue-gpus")).to_have_value("4")
                # Collapsing the section keeps what it holds (issue 15 item 10).
                await submit.locator(".jp-gpuqueue-section-toggle").click()
                await submit.locator(".jp-gpuqueue-section-toggle").click()
                assert await submit.locator("#jp-gpuqueue-command").input_value() == command
                await submit.locator("#jp-gpuqueue-submit").click()
                cloned_note = submit.locator(".jp-gpuqueue-submitted")
                await expect(cloned_note).to_have_text(re.compile(r"^Submitted team-b/\S+$"))
                cloned_key = (await cloned_note.text_content()).split()[-1]
                created.append(cloned_key)
                cloned = await api(jp_fetch, "workloads", *cloned_key.split("/"))
                assert cloned["command"] == victim["command"], cloned["command"]
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


async def test_a_job_nvml_never_sampled_says_so_and_an_ended_job_does_not_follow(jp_fetch, gpuqueue_service, lab_url,
                                                                                 chromium_launch_args):
    """Without NVML (this machine; no sampler given) both charts' places say that there are no
    samples, never an empty or made-up chart; and an ended job's page neither follows its log nor
    offers what only a running job has."""
    from playwright.async_api import async_playwright, expect

    assert gpuqueue_service.costs.utilization_sampler is None  # the demo inventory is no NVML's
    await api(jp_fetch, "workloads", method="POST", body={
        "name": "short", "localQueue": "team-a/team-a-queue",
        "command": [sys.executable, "-c", "print('done')"], "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "5m"})
    w = await wait_for(jp_fetch, "team-a/short", lambda w: w["state"] in FINISHED)
    assert w["state"] == "Succeeded", w

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30000)
            await page.goto(lab_url)
            await wait_for_lab(page)
            await page.evaluate(
                "() => window.jupyterapp.commands.execute('gpuqueue:open-job', {namespace: 'team-a', name: 'short'}).then(() => true)")
            jobpage = page.locator('[data-gpuqueue-jobpage="team-a/short"]')
            await expect(jobpage).to_have_attribute("data-state", "Succeeded")
            await expect(jobpage.locator(".jp-gpuqueue-util-none")).to_have_text("no GPU samples (NVML not available)")
            await expect(jobpage.locator(".jp-gpuqueue-mem-none")).to_have_text(
                "no GPU memory samples (NVML not available)")
            await expect(jobpage.locator(".jp-gpuqueue-jobpage-charts svg")).to_have_count(0)
            await expect(jobpage.locator(".jp-gpuqueue-jobpage-logtext")).to_have_text("done\n")
            await expect(jobpage.locator('[data-log-status="idle"]')).to_be_visible()
            await expect(jobpage.locator(".jp-gpuqueue-runs tbody tr")).to_have_attribute("data-outcome", "succeeded")
            await switch_theme(page, "JupyterLab Dark", False)
            items = await page.evaluate(AUDIT_TEXT, '[data-gpuqueue-jobpage="team-a/short"] .jp-gpuqueue-jobpage-charts')
            check_text(items, "dark: no samples")
            await jobpage.locator(".jp-gpuqueue-jobpage-charts").screenshot(
                path=str(SCREENSHOT_DIR / "jobpage-no-samples-dark.png"))
            # a job that is not there (a page restored after the ledger was reset) says so
            await page.evaluate(
                "() => window.jupyterapp.commands.execute('gpuqueue:open-job', {namespace: 'team-a', name: 'nope'}).then(() => true)")
            await expect(page.locator('[data-gpuqueue-jobpage="team-a/nope"] .jp-gpuqueue-form-error')).to_contain_text(
                re.compile("not found|no workload|unknown", re.I))
        finally:
            await browser.close()
