"""End to end in headless Chromium: a notebook submitted as a GPU job from the notebook toolbar
(issue 37).

team-b's job holds all four H100s of the demo cluster. The user opens examples/train_digits.ipynb
(a real scikit-learn model, with a cell tagged ``parameters``) and clicks the toolbar's "Submit
notebook as GPU job…": the panel's form opens on the Notebook tab with the parameters cell's names
and defaults as rows; the user sets ``epochs`` to 3 and submits to team-a on an H100. The job
waits behind team-b's; once that is cancelled it runs (the card says "cell n of 7", seen live),
succeeds, and its page's "Open executed notebook" opens ``train_digits-<job>.ipynb`` in JupyterLab
with the injected ``epochs = 3`` and the cells' outputs ("epochs=3", the test accuracy). "Resubmit
with other parameters" fills the form again with the notebook and its parameters.

Screenshot: test-artifacts/screenshots/notebook-job.png (GPUQUEUE_SCREENSHOT_DIR=docs/screenshots
refreshes the README's).
"""

from __future__ import annotations

import re

import pytest

from browserkit import SCREENSHOT_DIR, api, set_sidebar_width, sleeper, wait_for_lab, wait_for_state

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

RECORD_PROGRESS = """key => {
  const seen = (window.__gpuqueueProgress = []);
  const note = () => {
    const row = document.querySelector(`[data-gpuqueue-job="${key}"]`);
    const line = row && row.querySelector('.jp-gpuqueue-notebook-line');
    if (!row || !line) return;
    const text = `${row.getAttribute('data-state')}: ${line.textContent}`;
    if (seen[seen.length - 1] !== text) seen.push(text);
  };
  note();
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, characterData: true,
                                                    attributes: true});
}"""


async def test_notebook_from_the_toolbar_queues_runs_and_opens_executed(
        jp_fetch, started, lab_url, chromium_launch_args, jp_root_dir):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    blocker = await api(jp_fetch, "workloads", method="POST", body={
        "name": "team-b-h100-blocker", "localQueue": "team-b/team-b-queue", "command": sleeper(),
        "gpus": 4, "flavor": "nvidia-h100", "maxRuntime": "15m"})
    blocker_key = f"{blocker['namespace']}/{blocker['name']}"
    await wait_for_state(jp_fetch, blocker_key, ("Running",))
    key = None
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            page = await (await browser.new_context(viewport={"width": 1400, "height": 1000})).new_page()
            page.set_default_timeout(30000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(lab_url.replace("/lab?", "/lab/tree/examples/train_digits.ipynb?"))
            await wait_for_lab(page)
            notebook = page.locator(".jp-NotebookPanel").first
            await notebook.locator(".jp-Cell").first.wait_for(timeout=60000)

            # the notebook toolbar's button opens the form on it, its parameters cell as rows
            button = notebook.locator('.jp-Toolbar-item[data-jp-item-name="gpuqueue-submit-notebook"]')
            await button.locator("button, jp-button").first.click()
            panel = page.locator("#jp-gpuqueue-panel")
            await expect(panel).to_be_visible()
            await expect(panel.locator("#jp-gpuqueue-notebook")).to_have_value("examples/train_digits.ipynb")
            epochs = panel.locator('.jp-gpuqueue-parameter[data-parameter="epochs"] .jp-gpuqueue-parameter-value')
            await expect(epochs).to_have_value("10")
            await expect(panel.locator(".jp-gpuqueue-parameter")).to_have_count(4)
            await set_sidebar_width(page, 430)
            await epochs.fill("3")
            await panel.locator("#jp-gpuqueue-flavor").select_option("nvidia-h100")
            await panel.locator("#jp-gpuqueue-localqueue").select_option("team-a/team-a-queue")
            await panel.locator("#jp-gpuqueue-maxruntime").fill("10m")
            await expect(panel.locator(".jp-gpuqueue-estimate")).to_contain_text("nvidia-h100")
            await panel.locator("#jp-gpuqueue-submit").click()
            note = panel.locator(".jp-gpuqueue-submitted")
            await expect(note).to_have_text(re.compile(r"^Submitted team-a/train-digits-\S+$"))
            key = (await note.text_content()).split()[-1]

            # it waits behind team-b's job
            row = panel.locator(f'[data-gpuqueue-job="{key}"]')
            await expect(row).to_have_attribute("data-state", "Pending")
            await expect(row.locator(".jp-gpuqueue-position")).to_contain_text("position 1 in team-a-queue")
            await expect(row.locator(".jp-gpuqueue-notebook-line")).to_contain_text("Notebook train_digits.ipynb")
            await page.evaluate(RECORD_PROGRESS, key)

            # team-b's job ends: the notebook runs, cell by cell, and succeeds
            await api(jp_fetch, "workloads", *blocker_key.split("/"), method="DELETE")
            await expect(row).to_have_attribute("data-state", "Succeeded", timeout=240000)
            await expect(row.locator(".jp-gpuqueue-notebook-progress")).to_have_text(" · all 7 cells ran")
            seen = await page.evaluate("window.__gpuqueueProgress")
            running = [s for s in seen if re.match(r"^Running: .*cell \d of 7", s)]
            assert running, seen  # "cell n of 7" was shown while it ran

            # its page opens the executed notebook: the injected parameter and the outputs
            await row.locator(".jp-gpuqueue-job-open").click()
            job_page = page.locator(f'[data-gpuqueue-jobpage="{key}"]')
            await expect(job_page.locator('[data-section="notebook"]')).to_contain_text("epochs = 3")
            await page.screenshot(path=str(SCREENSHOT_DIR / "notebook-job.png"))
            await job_page.locator(".jp-gpuqueue-open-executed").click()
            name = key.split("/")[1]
            tab = page.locator(".lm-TabBar-tab", has_text=f"train_digits-{name}.ipynb")
            await expect(tab).to_be_visible(timeout=60000)
            executed = page.locator(".jp-NotebookPanel:visible")
            await expect(executed.locator(".jp-Cell").nth(2)).to_contain_text("epochs = 3")  # injected cell
            await expect(executed.locator(".jp-OutputArea-output", has_text="epochs=3 learning_rate=0.001")).to_have_count(1)
            await expect(executed.locator(".jp-OutputArea-output", has_text="test accuracy")).not_to_have_count(0)
            assert (jp_root_dir / "examples" / f"train_digits-{name}.ipynb").is_file()

            # "Resubmit with other parameters" fills the form: the notebook and epochs = 3
            await page.locator(".lm-TabBar-tabLabel", has_text=re.compile(rf"^{name}$")).first.click()
            await job_page.locator(".jp-gpuqueue-resubmit-parameters").click()
            await expect(panel.locator("#jp-gpuqueue-notebook")).to_have_value("examples/train_digits.ipynb")
            await expect(epochs).to_have_value("3")
            assert not errors, errors
        finally:
            await browser.close()


async def test_a_failing_notebook_shows_its_cell_on_the_card(jp_fetch, started, lab_url, chromium_launch_args,
                                                            jp_root_dir):
    """A notebook whose third cell raises: the job ends Failed and its card says at which cell and
    why; its page says the same."""
    import json

    from browserkit import open_panel
    from playwright.async_api import async_playwright, expect

    cells = [{"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}
             for src in ("a = 1", "print('before')", "1 / 0", "print('never')")]
    (jp_root_dir / "broken.ipynb").write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": cells,
                                                          "metadata": {"kernelspec": {"name": "python3"}}}))
    w = await api(jp_fetch, "workloads", method="POST",
                  body={"notebook": "broken.ipynb", "localQueue": "team-a/team-a-queue", "maxRuntime": "5m"})
    key = f"{w['namespace']}/{w['name']}"
    done = await wait_for_state(jp_fetch, key, ("Succeeded", "Failed", "Cancelled"), timeout=180)
    assert done["state"] == "Failed" and done["notebook"]["failedCell"] == 3, done
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            page = await (await browser.new_context(viewport={"width": 1280, "height": 900})).new_page()
            page.set_default_timeout(30000)
            panel = await open_panel(page, lab_url)
            line = panel.locator(f'[data-gpuqueue-job="{key}"] .jp-gpuqueue-notebook-line')
            await expect(line).to_have_attribute("data-notebook-failed-cell", "3")
            await expect(line).to_contain_text("failed at cell 3 of 4: ZeroDivisionError: division by zero")
            await panel.locator(f'[data-gpuqueue-job="{key}"] .jp-gpuqueue-job-open').click()
            section = page.locator(f'[data-gpuqueue-jobpage="{key}"] [data-section="notebook"]')
            await expect(section).to_contain_text("failed at cell 3 of 4")
            await expect(section.locator(".jp-gpuqueue-open-executed")).to_be_visible()
        finally:
            await browser.close()
