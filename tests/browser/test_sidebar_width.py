"""End to end in headless Chromium: every view of the GPU Queue panel at the sidebar's default
width (250 px) and at 300 px, in the JupyterLab Light and Dark themes (issue 15, item 9).

A real server, queue and SQLite ledger: this month's history of finished jobs (so the costs view
has budgets, a daily chart, top jobs and a month of idle capacity in the thousands of dollars),
team-b's blocker on the four H100s, the user's running, pending (positions 1 and 2 in the team
queue), succeeded and failed jobs. For each theme and width, and for each view (submit form, jobs
list, availability and MIG grid, team queue, costs, and the admin view's five tabs), the test
asserts:

- no horizontal overflow: the panel and each of its sections scroll no sideways
  (scrollWidth ≤ clientWidth), and no table cell's content spills into its neighbour;
- no text truncated: every option of every dropdown and every placeholder or value of an input
  fits its box ("experiment-normal (100)", "no limit"), no text is clipped by an ellipsis or an
  overflow, none is wrapped one character a line;
- WCAG AA contrast (4.5:1) of every text node against the background it is drawn on (computed
  here from the computed styles, alpha-blended up the tree, color-mix() included: axe-core's own
  color-contrast rule finds the panel's text "inapplicable" inside JupyterLab's sidebar), and
  axe-core's other WCAG 2 A/AA rules (names, labels, ARIA; axe-core is a devDependency of
  labextension/, node_modules/axe-core/axe.min.js, installed by `jlpm install` there);
- chart labels of at least 10 px as drawn;
- a visible focus ring (outline or box-shadow) on every dropdown reached with the keyboard.

Screenshots of each view go to test-artifacts/screenshots/ as panel-<view>-<width>-<theme>.png
(GPUQUEUE_SCREENSHOT_DIR=docs/images refreshes the README's).
"""

from __future__ import annotations

import re
import sys

import pytest

from jupyter_gpuqueue.ledger import reports

from test_costs_panel import write_history
from browserkit import (REPO, SCREENSHOT_DIR, api, delete_and_drain, open_panel, set_sidebar_width, show_only,
                        use_theme as _use_theme, wait_for_state)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

AXE = REPO / "labextension" / "node_modules" / "axe-core" / "axe.min.js"
SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]
ADMIN_TABS = ("quotas", "usage", "jobs", "priorities", "prices", "idle", "yaml", "audit")


async def use_theme(page, name: str, light: bool) -> None:
    """browserkit's theme switch, with 600 ms for the CSS variables to settle."""
    await _use_theme(page, name, light, settle_ms=600)


# What a person would see as broken, found from the computed styles of everything in the panel.
AUDIT = r"""root => {
  const problems = [];
  const parse = c => {
    // color-mix() computes to color(srgb r g b / a), channels 0-1
    const srgb = c.match(/color\(srgb ([^)]+)\)/);
    if (srgb) {
      const p = srgb[1].split(/[ \/]+/).filter(Boolean).map(Number);
      return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1];
    }
    const m = c.match(/rgba?\(([^)]+)\)/);
    if (!m) throw new Error('cannot parse the colour ' + c);
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
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
  const name = el => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    const cls = [...el.classList].filter(c => c.startsWith('jp-gpuqueue')).slice(0, 2);
    if (cls.length) s += '.' + cls.join('.');
    return s;
  };
  const visible = el => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden';
  };
  // (1) sideways scrolling of the panel and its sections
  for (const el of [root, ...root.querySelectorAll('.jp-gpuqueue-section, .jp-gpuqueue-section-body')]) {
    if (el.scrollWidth > el.clientWidth + 1) {
      problems.push(`overflow: ${name(el)} scrolls sideways by ${el.scrollWidth - el.clientWidth} px`);
    }
  }
  const rootBox = root.getBoundingClientRect();
  // (2) text: contrast, clipping, one character a line, spilling out of its cell or the panel
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.trim();
    const el = n.parentElement;
    if (!text || !el || !visible(el) || el.closest('option, select, textarea, title, style')) continue;
    const style = getComputedStyle(el);
    const bg = background(el);
    let fg = parse(style.color);
    if (el.closest('svg')) fg = parse(style.fill);
    let opacity = 1;
    for (let e = el; e; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
    fg = over([fg[0], fg[1], fg[2], fg[3] * opacity], bg);
    const l1 = lum(fg), l2 = lum(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const disabled = el.closest('button:disabled, input:disabled');
    if (ratio < 4.5 && !disabled) {
      problems.push(`contrast: ${ratio.toFixed(2)}:1 for ${JSON.stringify(text.slice(0, 40))} in ${name(el)}`);
    }
    const range = document.createRange();
    range.selectNodeContents(n);
    const rects = [...range.getClientRects()].filter(r => r.width > 0);
    const lines = new Set(rects.map(r => Math.round(r.top))).size;
    if (text.length >= 6 && lines > 2 && lines >= text.length / 4) {
      problems.push(`wraps: ${JSON.stringify(text.slice(0, 40))} in ${name(el)} wraps ${lines} lines`);
    }
    // (a MIG slice's cell is a seventh of a GPU's row: the holder's name, also in its tooltip and
    // in the jobs list, may end in an ellipsis there)
    for (let e = el; e && e !== root && !el.closest('.jp-gpuqueue-slot'); e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX !== 'visible' && e.scrollWidth > e.clientWidth + 1 && e.tagName !== 'PRE') {
        problems.push(`clipped: ${JSON.stringify(text.slice(0, 40))} in ${name(e)} (${e.scrollWidth} > ${e.clientWidth} px)`);
        break;
      }
    }
    const cell = el.closest('td, th');
    if (cell) {
      const c = cell.getBoundingClientRect();
      for (const r of rects) {
        if (r.right > c.right + 1 || r.left < c.left - 1) {
          problems.push(`spills: ${JSON.stringify(text.slice(0, 40))} out of its table cell in ${name(cell.closest('table'))}`);
          break;
        }
      }
    }
    for (const r of rects) {
      if (r.right > rootBox.right + 1) {
        problems.push(`outside: ${JSON.stringify(text.slice(0, 40))} ends ${Math.round(r.right - rootBox.right)} px right of the panel`);
        break;
      }
    }
    if (el.closest('svg')) {
      const svg = el.closest('svg').getBoundingClientRect();
      if (rects.some(r => r.left < svg.left - 1 || r.right > svg.right + 1 || r.top < svg.top - 1 || r.bottom > svg.bottom + 1)) {
        problems.push(`clipped: chart label ${JSON.stringify(text)} is cut at the chart's edge`);
      }
      const size = rects.length ? Math.max(...rects.map(r => r.height)) : 0;
      if (size && size < 10) problems.push(`small: chart label ${JSON.stringify(text)} is ${size.toFixed(1)} px high`);
    } else if (parseFloat(style.fontSize) < 10) {
      problems.push(`small: ${JSON.stringify(text.slice(0, 40))} in ${name(el)} is ${style.fontSize}`);
    }
  }
  // (3) every option of every dropdown, every value and placeholder of every input, fits its box
  const ctx = document.createElement('canvas').getContext('2d');
  for (const el of root.querySelectorAll('select, input:not([type=checkbox]):not([type=radio])')) {
    if (!visible(el)) continue;
    const s = getComputedStyle(el);
    ctx.font = `${s.fontStyle} ${s.fontWeight} ${s.fontSize} ${s.fontFamily}`;
    const room = el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight)
      - (el.type === 'number' ? 16 : 0);
    const texts = el.tagName === 'SELECT' ? [...el.options].map(o => o.text) : [el.value, el.placeholder];
    for (const t of texts) {
      if (t && ctx.measureText(t).width > room + 0.5) {
        problems.push(`cut: ${JSON.stringify(t)} does not fit ${name(el)}${el.dataset.adminField ? '[' + el.dataset.adminField + ']' : ''} (${Math.ceil(ctx.measureText(t).width)} > ${Math.floor(room)} px)`);
      }
    }
  }
  return [...new Set(problems)];
}"""

AXE_RUN = """async selector => {
  const result = await window.axe.run({include: [selector]}, {
    runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
    resultTypes: ['violations']
  });
  return result.violations.flatMap(v => v.nodes.map(
    n => `axe ${v.id}: ${n.target.join(' ')}: ${(n.failureSummary || '').replace(/\\s+/g, ' ').slice(0, 200)}`));
}"""

# The focus ring of a control reached with the keyboard: its outline and box-shadow.
RING = """el => {
  const s = getComputedStyle(el);
  return {active: document.activeElement === el, focusVisible: el.matches(':focus-visible'), outline: `${s.outlineStyle} ${s.outlineWidth} ${s.outlineColor}`,
          outlineWidth: parseFloat(s.outlineWidth), outlineStyle: s.outlineStyle, boxShadow: s.boxShadow};
}"""


async def audit(page, panel, where: str, use_axe: bool = True) -> list[str]:
    problems = await panel.evaluate(AUDIT)
    if use_axe:
        if not await page.evaluate("() => !!window.axe"):
            await page.add_script_tag(path=str(AXE))
        problems += await page.evaluate(AXE_RUN, "#jp-gpuqueue-panel")
    return [f"{where}: {p}" for p in problems]


async def focus_rings(page, panel, where: str) -> list[str]:
    """Reach each dropdown with the keyboard (Tab from the control before it): a ring shows."""
    problems = []
    selects = panel.locator("select")
    for i in range(await selects.count()):
        select = selects.nth(i)
        if not await select.is_visible():
            continue
        for _ in range(3):  # a refresh of the panel between the two keys can move the focus: again
            await select.focus()
            await page.keyboard.press("Shift+Tab")
            await page.keyboard.press("Tab")
            ring = await select.evaluate(RING)
            if ring["active"]:
                break
        label = await select.evaluate("el => el.id || el.name")
        if not ring["active"]:
            problems.append(f"{where}: {label} is not reached by Shift+Tab, Tab")
        elif not ring["focusVisible"]:
            problems.append(f"{where}: {label} is not :focus-visible after Tab")
        elif (ring["outlineStyle"] == "none" or ring["outlineWidth"] < 1) and ring["boxShadow"] in ("none", ""):
            problems.append(f"{where}: no focus ring on {label} ({ring})")
        await select.evaluate("el => el.blur()")
    return problems


async def screenshot(panel, name: str) -> None:
    await panel.evaluate("el => { el.scrollTop = 0; el.scrollLeft = 0; }")
    await panel.page.wait_for_timeout(150)
    await panel.screenshot(path=str(SCREENSHOT_DIR / name))


async def test_every_view_fits_the_sidebar_in_both_themes(
        jp_fetch, gpuqueue_service, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    assert AXE.exists(), (
        f"{AXE} is missing: axe-core is a devDependency of labextension/ "
        "(jlpm --cwd labextension install; scripts/test.sh does it)")
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    write_history(gpuqueue_service)
    # Idle capacity since the 1st of the month: thousands of dollars, as on a queue that has run
    # all month ("$7,681.…" was clipped).
    month_start = reports.parse_month(reports.month_of(gpuqueue_service.clock()))[0]
    gpuqueue_service.costs._capacity_since = month_start
    spent = next(t for t in (await api(jp_fetch, "budgets"))["teams"] if t["namespace"] == "team-a")["spentUsd"]
    await api(jp_fetch, "budgets", "team-a", method="PUT",
              body={"monthlyUSD": round(spent / 0.85, 2), "warnAt": 0.8, "hard": False})

    submitted: list[str] = []

    async def submit(**body):
        w = await api(jp_fetch, "workloads", method="POST", body={"maxRuntime": "15m", **body})
        submitted.append(f"{w['namespace']}/{w['name']}")
        return submitted[-1]

    try:
        await wait_for_state(jp_fetch, await submit(
            name="h100-blocker", localQueue="team-b/team-b-queue", gpus=4, flavor="nvidia-h100",
            command=SLEEP), ("Running",))
        await wait_for_state(jp_fetch, await submit(
            name="quick-ok", localQueue="team-a/team-a-queue", gpus=1, flavor="nvidia-l4",
            command=[sys.executable, "-c", "print('done')"]), ("Succeeded",))
        await wait_for_state(jp_fetch, await submit(
            name="crashes", localQueue="team-a/team-a-queue", gpus=1, flavor="nvidia-l4",
            command=[sys.executable, "-c", "raise SystemExit(3)"]), ("Failed",))
        await wait_for_state(jp_fetch, await submit(
            name="train-a100", localQueue="team-a/team-a-queue", gpus=1, flavor="nvidia-a100",
            priorityClass="experiment-normal", command=SLEEP), ("Running",))
        await wait_for_state(jp_fetch, await submit(
            name="notebook-slice", localQueue="team-a/team-a-queue", migProfile="1g.10gb",
            command=SLEEP), ("Running",))
        for name in ("wants-h100", "then-h100"):
            await submit(name=name, localQueue="team-a/team-a-queue", gpus=1, flavor="nvidia-h100",
                         command=SLEEP)
        await wait_for_state(jp_fetch, submitted[-1], ("Pending",))

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 1400})
                page.set_default_timeout(30000)
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                panel = await open_panel(page, lab_url)
                default = (await panel.bounding_box())["width"]
                assert 200 <= default <= 320, default  # JupyterLab's default sidebar width
                await expect(panel.locator('[data-gpuqueue-job="team-a/then-h100"]')).to_have_attribute(
                    "data-state", "Pending")
                await expect(panel.locator('[data-gpuqueue-pending="team-a/then-h100"]')).to_be_visible()

                problems: list[str] = []
                for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                    if not light:
                        await use_theme(page, theme, light)
                    mode = "light" if light else "dark"
                    for width in (250, 300):
                        await set_sidebar_width(page, width)
                        got = (await panel.bounding_box())["width"]
                        assert abs(got - width) <= 2, (width, got)
                        where = f"{theme} at {width} px"
                        # the user's views, one at a time (as a person scrolls to them)
                        for view, sections in (("submit", ("submit",)), ("jobs", ("jobs",)),
                                               ("availability", ("availability", "team")),
                                               ("costs", ("costs",))):
                            await show_only(panel, sections)
                            if view == "costs":
                                await expect(panel.locator(".jp-gpuqueue-idle")).to_contain_text(
                                    re.compile(r"\$\d,\d{3}\.\d\d"))  # thousands of dollars idle
                                await expect(panel.locator(".jp-gpuqueue-chart g[data-date]").first).to_be_attached()
                            problems += await audit(page, panel, f"{where}, {view}")
                            if view == "submit":
                                problems += await focus_rings(page, panel, f"{where}, {view}")
                            await screenshot(panel, f"panel-{view}-{width}-{mode}.png")
                        await show_only(panel, ("admin",))
                        for admin_tab in ADMIN_TABS:
                            button = panel.locator(f'[data-admin-tab="{admin_tab}"]')
                            await button.click()
                            # choosing a tab never scrolls the panel sideways
                            scrolled = await panel.evaluate(
                                "el => Math.max(el.scrollLeft, ...[...el.querySelectorAll('*')].map(e => e.scrollLeft))")
                            if scrolled:
                                problems.append(f"{where}, admin {admin_tab}: clicking the tab scrolled by {scrolled} px")
                            if admin_tab == "yaml":
                                await panel.locator('[data-action="export"]').click()
                                await expect(panel.locator("textarea.jp-gpuqueue-admin-yaml")).to_have_value(
                                    re.compile("kind: ClusterQueue"))
                            if admin_tab == "prices":
                                await expect(panel.locator("tr[data-price-flavor]").first).to_be_visible()
                            if admin_tab == "jobs":
                                await expect(panel.locator("[data-admin-job]").first).to_be_visible()
                            if admin_tab == "usage":  # per-user rows and the teams' waits (issue 34)
                                await expect(panel.locator(".jp-gpuqueue-usage-users tbody tr").first).to_be_visible()
                            if admin_tab == "quotas":
                                await expect(panel.locator("[data-cap-team] input").first).to_be_visible()
                            problems += await audit(page, panel, f"{where}, admin {admin_tab}")
                            problems += await focus_rings(page, panel, f"{where}, admin {admin_tab}")
                            await screenshot(panel, f"panel-admin-{admin_tab}-{width}-{mode}.png")
                        await panel.locator('[data-admin-tab="quotas"]').click()
                await use_theme(page, "JupyterLab Light", True)
                assert not problems, "\n".join(problems)
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        await delete_and_drain(jp_fetch, gpuqueue_service, submitted)
