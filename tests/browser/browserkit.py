"""What the browser tests share: the REST API through the test server (``api``, ``wait_for``,
``wait_for_state``), a job that sleeps (``sleeper``), and JupyterLab as a user drives it
(``open_panel``, ``show_panel``, ``show_only``, ``run_first_cell``, ``set_sidebar_width``, ``open_palette``,
``use_theme``) and a test's clean-up (``delete_and_drain``). Screenshots go to
``SCREENSHOT_DIR`` (test-artifacts/screenshots/; ``GPUQUEUE_SCREENSHOT_DIR=docs/screenshots``
refreshes the README's and the docs')."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from tornado.httpclient import HTTPClientError

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = Path(os.environ.get("GPUQUEUE_SCREENSHOT_DIR", REPO / "test-artifacts" / "screenshots"))
API = ("gpuqueue", "api")
# How long the panel's event stream may take to connect ("live"): a first try that fails (a busy
# machine, a test's websocket route not answering yet) is retried after 1, 2, 4 … s (model.ts).
LIVE_TIMEOUT_MS = 30000


async def api(jp_fetch, *parts, method="GET", body=None, params=None):
    """Call the REST API with the server's token; the parsed JSON (AssertionError on an HTTP error,
    with its body)."""
    kwargs = {"method": method}
    if params is not None:
        kwargs["params"] = params
    if body is not None:
        kwargs["body"] = json.dumps(body)
    try:
        resp = await jp_fetch(*API, *parts, **kwargs)
    except HTTPClientError as e:
        detail = e.response.body.decode() if e.response is not None and e.response.body else ""
        raise AssertionError(f"{method} {'/'.join(parts)}: HTTP {e.code} {detail}") from None
    return json.loads(resp.body)


async def wait_for(jp_fetch, key: str, pred, timeout: float = 30.0) -> dict:
    """The workload ``namespace/name`` once ``pred(view)`` holds (AssertionError after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        w = await api(jp_fetch, "workloads", *key.split("/"))
        if pred(w):
            return w
        assert time.monotonic() < deadline, f"{key}: {w}"
        await asyncio.sleep(0.2)


async def wait_for_state(jp_fetch, key: str, states: tuple, timeout: float = 30.0) -> dict:
    """The workload ``namespace/name`` once its state is one of ``states``."""
    try:
        return await wait_for(jp_fetch, key, lambda w: w["state"] in states, timeout)
    except AssertionError as e:
        raise AssertionError(f"{key} is not in {states} after {timeout}s: {e}") from None


async def delete_and_drain(jp_fetch, service, keys, timeout: float = 20.0) -> None:
    """A test's clean-up: DELETE each workload ``namespace/name`` of ``keys`` (one already
    finished answers an error, ignored), then wait up to ``timeout`` s for the service's backend
    to have no running job left."""
    for key in keys:
        try:
            await api(jp_fetch, "workloads", *key.split("/"), method="DELETE")
        except AssertionError:
            pass
    deadline = time.monotonic() + timeout
    while service.backend.running() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


PANEL_SECTIONS = ("submit", "jobs", "availability", "costs", "team", "admin")


async def show_only(panel, sections) -> None:
    """Open the named sections of the panel (of :data:`PANEL_SECTIONS`), fold the others, and
    scroll the panel back to its top-left corner."""
    for section in PANEL_SECTIONS:
        toggle = panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle')
        if not await toggle.count():
            continue
        want = "true" if section in sections else "false"
        if await toggle.get_attribute("aria-expanded") != want:
            await toggle.click()
    await panel.evaluate("el => { el.scrollTop = 0; el.scrollLeft = 0; }")


def sleeper(seconds: int = 600) -> list:
    """A command that sleeps ``seconds`` (the PATH's python, as a user's would be)."""
    return [shutil.which("python") or sys.executable, "-c", f"import time; time.sleep({seconds})"]


async def wait_for_lab(page) -> None:
    """After a ``goto`` or ``reload``: wait until JupyterLab has started up. Its start-up ends by
    opening a Launcher in the empty main area (or restoring the workspace's widgets), and
    activating a main-area widget focuses it: a field of the panel focused before then loses the
    focus mid-edit (seen under load: ``fill("")`` selected the cohort, the Launcher took the focus,
    the Delete key went to it and the cohort stayed). So: the main area's first widget, then two
    frames for its activation."""
    await page.locator("#jp-main-dock-panel .jp-MainAreaWidget").first.wait_for(timeout=60000)
    await page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


async def open_panel(page, lab_url: str):
    """JupyterLab at ``lab_url`` with the GPU Queue panel open and live; returns the panel's locator."""
    from playwright.async_api import expect

    await page.goto(lab_url)
    await wait_for_lab(page)
    panel = await show_panel(page)
    await expect(panel.locator(".jp-gpuqueue-conn-live")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    return panel


async def show_panel(page, timeout: float = 30.0):
    """The GPU Queue panel shown in JupyterLab's left sidebar; its locator (AssertionError if it is
    not shown within ``timeout`` s). Its tab toggles it, and JupyterLab may show or hide it on its
    own while it starts (a reload restores an open panel, the layout restorer may collapse the
    sidebar after a click): so click only while it is hidden, and return once it stays shown."""
    # JupyterLab adds the sidebar tab once every plugin is activated (slow on a busy machine)
    tab = page.locator('.lm-TabBar-tab[data-id="jp-gpuqueue-panel"]')
    await tab.wait_for(timeout=60000)
    panel = page.locator("#jp-gpuqueue-panel")
    deadline = time.monotonic() + timeout
    while True:
        if await panel.is_visible():
            await page.wait_for_timeout(300)
            if await panel.is_visible():
                return panel
            continue
        assert time.monotonic() < deadline, f"the GPU Queue panel is not shown after {timeout:.0f} s"
        await tab.click()
        await page.wait_for_timeout(500)


async def run_first_cell(page, timeout: float = 90.0) -> None:
    """Run the open notebook's first cell as a user does: select it, click the toolbar's Run; again
    while its prompt says it never ran ("[ ]:"; a click JupyterLab took before the notebook was
    ready does nothing), until it says "[*]:" or "[n]:" (AssertionError after ``timeout`` s)."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout, expect

    ran = re.compile(r"\[(\*|\d+)\]")
    cell = page.locator(".jp-NotebookPanel .jp-Cell").first
    prompt = cell.locator(".jp-InputPrompt")
    run = page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:run-cell-and-select-next']")
    dialog = page.locator(".jp-Dialog")
    deadline = time.monotonic() + timeout
    while not ran.search(await prompt.inner_text()):
        assert time.monotonic() < deadline, f"the cell does not run: prompt {await prompt.inner_text()!r}"
        try:
            if await dialog.is_visible():  # JupyterLab asks which kernel: the notebook's
                await dialog.locator(".jp-mod-accept").click(timeout=5000)
            await prompt.click(timeout=5000)
            await run.first.click(timeout=5000)
            await expect(prompt).to_have_text(ran, timeout=10000)
        except (AssertionError, PlaywrightTimeout):
            pass


async def set_sidebar_width(page, width: int) -> None:
    """Drag the left sidebar's split handle until the panel is ``width`` pixels wide (± 1; up to
    three drags: JupyterLab's layout may snap the first)."""
    for _ in range(3):
        panel = await page.locator("#jp-gpuqueue-panel").bounding_box()
        handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle").first
        box = await handle.bounding_box()
        if not panel or not box or abs(panel["width"] - width) <= 1:
            return
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        await page.mouse.move(x, y)
        await page.mouse.down()
        await page.mouse.move(x + (width - panel["width"]), y, steps=5)
        await page.mouse.up()
        await page.wait_for_timeout(200)


async def open_palette(page):
    """Open JupyterLab's command palette with its shortcut, as a user would; returns its locator.
    The focus leaves any field first: with a text field of the panel focused the shortcut did not
    open the palette. Now and then a keystroke is missed all the same (a busy page): the shortcut
    is pressed again after a second without a palette, not after a 5-30 s fill timeout."""
    palette = page.locator("#command-palette")
    field = palette.locator("input")
    await page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for attempt in range(5):
        await page.keyboard.press("Control+Shift+C")
        try:
            await field.wait_for(state="visible", timeout=1000)
            return palette
        except Exception:
            if await field.is_visible():
                return palette
            if attempt == 4:
                raise
    return palette


async def use_theme(page, name: str, light: bool, settle_ms: int = 500) -> None:
    """Switch JupyterLab's theme from the command palette (:func:`open_palette`), as a user would;
    then wait ``settle_ms`` for the theme's CSS variables to settle."""
    from playwright.async_api import TimeoutError as PlaywrightTimeoutError

    palette = await open_palette(page)
    await palette.locator("input").fill(name, timeout=5000)
    item = palette.locator(".lm-CommandPalette-item", has_text=re.compile(f"(Use Theme: )?{name}$")).first
    try:
        await item.click(timeout=10000)
    except PlaywrightTimeoutError:
        # On a busy page the click can land while Playwright still retries it (the theme changes,
        # the palette closes, the item is gone): the theme attribute below is what tells.
        pass
    await page.locator(f'body[data-jp-theme-light="{"true" if light else "false"}"]').wait_for(state="attached")
    await page.wait_for_timeout(settle_ms)
