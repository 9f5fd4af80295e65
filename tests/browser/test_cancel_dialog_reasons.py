"""Issue 15, item 10, in headless Chromium against a real server:

- a waiting job's card leads Kueue's reason with a plain sentence ("Waiting for 4 more GPUs of
  nvidia-h100 (the quota is in use)") and keeps Kueue's own words after it;
- the "Cancel running job?" dialog does not stay open, stale, once the job has ended meanwhile:
  it closes, and the card says the job already ended;
- issue 34 item 9, with the keyboard: the dialog's default button is the safe one, after a cancel
  the focus stays on the card, "GPU Queue: Open panel" moves the focus into the panel, the
  selected segment ("Python file") shows its focus ring (3:1), light and dark.
"""

from __future__ import annotations

import pytest
from browserkit import LIVE_TIMEOUT_MS, api, open_palette, sleeper, use_theme, wait_for_state, wait_for_lab


pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

# A focused control's outline against its own background: WCAG's 3:1 for a focus indicator.
RING_CONTRAST = """el => {
  const parse = c => (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
                     return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const s = getComputedStyle(el);
  const a = lum(parse(s.outlineColor)), b = lum(parse(s.backgroundColor));
  return {focused: document.activeElement === el && el.matches(':focus-visible'), style: s.outlineStyle,
          outline: s.outlineColor, background: s.backgroundColor,
          ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)};
}"""


async def test_plain_reason_and_no_stale_cancel_dialog(jp_fetch, started, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    keys: list[str] = []
    try:
        blocker = await api(jp_fetch, "workloads", method="POST", body={
            "name": "dlg-blocker", "localQueue": "team-b/team-b-queue", "command": sleeper(), "gpus": 4,
            "flavor": "nvidia-h100", "maxRuntime": "15m"})
        keys.append(f"{blocker['namespace']}/{blocker['name']}")
        await wait_for_state(jp_fetch, keys[0], ("Running",))
        waiting = await api(jp_fetch, "workloads", method="POST", body={
            "name": "dlg-waiting", "localQueue": "team-b/team-b-queue", "command": sleeper(), "gpus": 4,
            "flavor": "nvidia-h100", "maxRuntime": "15m"})
        keys.append(f"{waiting['namespace']}/{waiting['name']}")
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 1000})
                page.set_default_timeout(30000)
                await page.goto(lab_url)
                await wait_for_lab(page)
                await page.locator(".jp-gpuqueue-status").click()
                panel = page.locator("#jp-gpuqueue-panel")
                await expect(panel.locator(".jp-gpuqueue-conn-live")).to_be_visible(timeout=LIVE_TIMEOUT_MS)

                card = panel.locator(f'[data-gpuqueue-job="{keys[1]}"]')
                plain = card.locator(".jp-gpuqueue-reason-plain")
                await expect(plain).to_contain_text("Waiting for 4 more GPUs of nvidia-h100 (the quota is in use)",
                                                    timeout=15000)
                reason = card.locator(".jp-gpuqueue-reason").first
                await expect(reason).to_contain_text("insufficient unused quota")  # Kueue's words kept

                running = panel.locator(f'[data-gpuqueue-job="{keys[0]}"]')
                await running.locator(".jp-gpuqueue-cancel").click()
                dialog = page.locator(".jp-Dialog")
                await expect(dialog).to_contain_text("Cancel running job?")
                # the job ends while the dialog is open (here: cancelled through the API)
                await api(jp_fetch, "workloads", *keys[0].split("/"), method="DELETE")
                await expect(dialog).to_have_count(0, timeout=15000)
                await expect(running.locator(".jp-gpuqueue-ended-note")).to_contain_text(
                    "has already ended (Cancelled): nothing left to cancel")

                # Issue 34 item 9, with the keyboard. The waiting job now runs; Cancel, then Enter:
                # the dialog's default is the safe button (the job keeps running).
                await expect(card).to_have_attribute("data-state", "Running", timeout=20000)
                await card.locator(".jp-gpuqueue-cancel").focus()
                await page.keyboard.press("Enter")
                await expect(dialog).to_contain_text("Cancel running job?")
                await expect(dialog.locator("button.jp-mod-accept, button.jp-mod-warn").and_(
                    dialog.locator(":focus"))).to_have_count(0)
                await expect(dialog.locator("button:focus")).to_have_text("Keep running")
                await page.keyboard.press("Enter")
                await expect(dialog).to_have_count(0)
                assert (await api(jp_fetch, "workloads", *keys[1].split("/")))["state"] == "Running"
                # Now cancel it: the focus stays on its card, not dropped to <body>.
                await card.locator(".jp-gpuqueue-cancel").focus()
                await page.keyboard.press("Enter")
                await dialog.get_by_role("button", name="Cancel job").click()
                await expect(card).to_have_attribute("data-state", "Cancelled")
                await page.wait_for_timeout(300)
                focused = await page.evaluate(
                    "() => document.activeElement === document.body ? 'body' : "
                    "(document.activeElement.closest('[data-gpuqueue-job]') || {}).dataset?.gpuqueueJob || "
                    "document.activeElement.outerHTML.slice(0, 80)")
                assert focused == keys[1], focused
                # "GPU Queue: Open panel" (here from the editor area) moves the focus into the panel.
                await page.locator("#jp-main-dock-panel .jp-MainAreaWidget").first.click()
                await expect(panel.locator(":focus")).to_have_count(0)
                palette = await open_palette(page)
                await palette.locator("input").fill("GPU Queue: Open panel")
                await page.keyboard.press("Enter")
                await expect(panel.locator(":focus")).to_have_count(1)
                # The selected segment ("Python file") shows a focus ring when the keyboard reaches
                # it: its outline differs from the segment's own colour by at least 3:1.
                toggle = panel.locator('[data-section="submit"] .jp-gpuqueue-section-toggle')
                if await toggle.get_attribute("aria-expanded") != "true":
                    await toggle.click()
                active = panel.locator('[data-section="submit"] .jp-gpuqueue-segmented button.jp-mod-active').first
                await active.focus()
                await page.keyboard.press("Shift+Tab")
                await page.keyboard.press("Tab")
                ring = await active.evaluate(RING_CONTRAST)
                assert ring["focused"] and ring["style"] != "none" and ring["ratio"] >= 3, ring
                await use_theme(page, "JupyterLab Dark", False)
                await active.focus()
                await page.keyboard.press("Shift+Tab")
                await page.keyboard.press("Tab")
                ring = await active.evaluate(RING_CONTRAST)
                assert ring["focused"] and ring["style"] != "none" and ring["ratio"] >= 3, ("dark", ring)
                await use_theme(page, "JupyterLab Light", True)
            finally:
                await browser.close()
    finally:
        for key in keys:
            try:
                await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
            except Exception:
                pass
