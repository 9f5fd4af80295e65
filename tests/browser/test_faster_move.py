"""A faster option keeps the job's size or says plainly that it changes it, and is taken in one click
(issue 34 item 6): Chromium, the sidebar at its default width (250 px), light and dark.

The demo queue: ``team-a/hold`` holds team-a's four A100s for an hour; ``team-a/wide`` (4 × A100,
pinned) waits behind it. Free now: four L4s (team-a's two and team-b's, borrowed), four H100s
(team-b's, borrowed) and two A100s (team-b's). The card offers the same size on another flavor
first ("4 × nvidia-l4 is free now: start at once, $3.24/h"), and a smaller job only in words that say
so ("runs on 2 GPUs instead of 4: …"); never "2 GPUs … is free" alone, as it did. *Move* on the
first option moves the job in place: the same workload (uid, name, creation time) runs on four
L4s, its timeline says "moved by … from 4 × nvidia-a100 to 4 × nvidia-l4", and no second workload
appears. Text contrast (WCAG AA, 4.5:1) and no sideways scrolling are checked in both themes.
Screenshots: test-artifacts/screenshots/faster-move-*.png.
"""

from __future__ import annotations

import re

import pytest
from browserkit import SCREENSHOT_DIR, api, open_panel, set_sidebar_width, sleeper, use_theme, wait_for
from test_estimates import AUDIT_TEXT, check_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture
def gpuqueue_server_config():
    return {"tornado_settings": {"gpuqueue_standalone_admin": False}}


async def test_a_faster_option_keeps_the_size_and_is_taken_in_one_click(jp_fetch, gpuqueue_service, lab_url,
                                                                         chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    created = []
    try:
        for name in ("hold", "wide"):
            await api(jp_fetch, "workloads", method="POST", body={
                "name": name, "localQueue": "team-a/team-a-queue", "command": sleeper(900),
                "gpus": 4, "flavor": "nvidia-a100", "maxRuntime": "1h"})
            created.append(f"team-a/{name}")
            if name == "hold":
                await wait_for(jp_fetch, "team-a/hold", lambda w: w["state"] == "Running")
        wide = await wait_for(jp_fetch, "team-a/wide",
                              lambda w: len(w["fasterOptions"] or []) >= 2, timeout=75)
        assert wide["state"] == "Pending"

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

                card = panel.locator('[data-gpuqueue-job="team-a/wide"]')
                options = card.locator(".jp-gpuqueue-eta-faster > li")
                await expect(options.first).to_contain_text("4 × nvidia-l4 is free now: start at once, $")
                texts = [t.strip() for t in await options.locator(".jp-gpuqueue-eta-faster-text").all_inner_texts()]
                assert len(texts) >= 2, texts
                for t in texts:  # each keeps the size (4 ×) or says how it changes it
                    assert re.match(r"^faster: (4 × nvidia-\w+ |runs on \d GPUs? .*instead of 4: )", t), texts
                assert not any(re.search(r"\b[12] GPUs? (of [\w-]+ )?is free", t) for t in texts), texts
                move = options.first.get_by_role("button", name=re.compile(r"^Move team-a.wide: 4 × nvidia-l4"))
                await expect(move).to_be_visible()

                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    if not light:
                        await use_theme(page, theme, light)
                        await set_sidebar_width(page, 250)
                    width = (await panel.bounding_box())["width"]
                    assert abs(width - 250) <= 2, width
                    check_text(await page.evaluate(AUDIT_TEXT, '[data-gpuqueue-job="team-a/wide"] .jp-gpuqueue-eta-faster'),
                               f"{theme}: the faster options")
                    overflow = await panel.evaluate("el => el.scrollWidth - el.clientWidth")
                    assert overflow <= 1, f"{theme}: the panel scrolls sideways by {overflow} px"
                    box, li = await move.bounding_box(), await options.first.bounding_box()
                    assert box["x"] + box["width"] <= li["x"] + li["width"] + 1, (box, li)  # inside its option
                    await card.scroll_into_view_if_needed()
                    await card.screenshot(path=str(SCREENSHOT_DIR / f"faster-move-250-{'light' if light else 'dark'}.png"))
                await use_theme(page, "JupyterLab Light", True)

                # one click: the job moves, the same card runs on four L4s
                await move.click()
                await expect(card.locator(".jp-gpuqueue-badge, [class*=badge]").first).to_have_text(
                    re.compile("Admitted|Running"), timeout=30000)
                moved = await wait_for(jp_fetch, "team-a/wide", lambda w: w["state"] == "Running")
                assert (moved["uid"], moved["createdAt"]) == (wide["uid"], wide["createdAt"])
                assert moved["admission"]["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] == "nvidia-l4"
                assert moved["podSets"][0]["requests"]["nvidia.com/gpu"] == "4"
                timeline = await api(jp_fetch, "workloads", "team-a", "wide", "timeline")
                texts = [e["text"] for e in timeline["events"] if e["type"] == "Moved"]
                assert len(texts) == 1 and texts[0].endswith("from 4 × nvidia-a100 to 4 × nvidia-l4"), texts
                items = (await api(jp_fetch, "workloads"))["items"]
                assert [w["uid"] for w in items if w["name"] == "wide"] == [wide["uid"]]  # no second workload
                await expect(card).to_contain_text("nvidia-l4")
                await card.screenshot(path=str(SCREENSHOT_DIR / "faster-move-250-moved.png"))
                assert not page_errors, page_errors
            finally:
                await browser.close()
    finally:
        for key in created:
            await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
