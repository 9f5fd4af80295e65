"""End to end in headless Chromium: the ``%%gpujob`` widget's log follows its end (issue 34 item 5).

A real kernel renders a real :class:`~jupyter_gpuqueue.widget.GpuJobWidget` with ipywidgets in
JupyterLab and feeds it a job's output as its watcher does (``set_log`` from a background thread,
one line at a time: "step 0" … "step 59"). The log's scroll box must show the newest line, not
stay at the first ones (it stayed at "step 0–9" while the job printed "step 30"), in the light
and the dark theme, and the log's text must be readable (4.5:1).
"""

from __future__ import annotations

import json

import pytest
from browserkit import run_first_cell, use_theme, wait_for_lab
from test_estimates import AUDIT_TEXT, check_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

STEPS = 60

CELL = f"""
import threading, time
from jupyter_gpuqueue.widget import GpuJobWidget
w = GpuJobWidget({{"namespace": "team-a", "name": "train", "state": "Running", "podSets": []}})
display(w.box)
def feed():
    tail = ""
    for i in range({STEPS}):
        line = f"step {{i}}\\n"
        tail = "".join((tail + line).splitlines(keepends=True)[-20:])
        w.set_log(tail, line)
        time.sleep(0.15)
threading.Thread(target=feed, daemon=True).start()
"""

# The newest line of the log in view: its box within the scroll box's box.
LAST_LINE_IN_VIEW = """() => {
  const box = document.querySelector('.jp-gpuqueue-widget-log');
  if (!box) return null;
  const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
  let last = null;
  for (let n = walker.nextNode(); n; n = walker.nextNode()) if (n.textContent.includes('step')) last = n;
  if (!last) return null;
  const range = document.createRange();
  range.selectNodeContents(last);
  const rects = [...range.getClientRects()].filter(r => r.height > 0);
  const line = rects[rects.length - 1];
  const outer = box.getBoundingClientRect();
  const text = box.innerText.trim().split('\\n');
  return {last: text[text.length - 1], inView: line.bottom <= outer.bottom + 2 && line.top >= outer.top - 2,
          scrollable: box.scrollHeight > box.clientHeight + 2};
}"""


async def test_the_widget_log_follows_its_end(jp_root_dir, started, lab_url, chromium_launch_args, tmp_path):
    from playwright.async_api import async_playwright, expect

    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "feed", "metadata": {}, "outputs": [],
                     "source": CELL}],
          "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    (jp_root_dir / "widget.ipynb").write_text(json.dumps(nb))
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(60000)
            await page.goto(lab_url.replace("/lab?", "/lab/tree/widget.ipynb?"))
            await wait_for_lab(page)
            await expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_be_attached(
                timeout=90000)
            await run_first_cell(page)  # (Shift+Enter once was taken before the notebook was ready)
            log = page.locator(".jp-gpuqueue-widget-log")
            await expect(log).to_contain_text(f"step {STEPS - 1}", timeout=90000)
            await page.wait_for_timeout(500)
            seen = await page.evaluate(LAST_LINE_IN_VIEW)
            assert seen and seen["scrollable"], seen  # more lines than the box holds
            assert seen["last"] == f"step {STEPS - 1}" and seen["inView"], seen
            for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                if not light:
                    await use_theme(page, theme, light)
                check_text(await page.evaluate(AUDIT_TEXT, ".jp-gpuqueue-widget-log, .widget-html"),
                           f"{theme}: the widget")
                await log.screenshot(path=str(tmp_path / f"widget-log-{'light' if light else 'dark'}.png"))
            print("screenshots:", tmp_path)
        finally:
            await browser.close()
