"""Issue 34 item 10, end to end: the hub's spawn options say what is free now and how long a
lease lasts. A real JupyterHub (configurable-http-proxy, the gpuqueue service, the shipped example
configuration with its queued spawner and profiles), alice logged in through the hub's login form
in headless Chromium, on /hub/spawn:

- under each GPU profile, "Free now: N of M …" as the queue's inventory says (bob's job holds two
  of the A100s, so the A100 profile shows two fewer), and "Lease: up to 8 h; the server is stopped
  then (warned before)" (the spawner's ``gpuqueue_max_runtime_seconds``);
- once an admin caps team-a's maximum run time at 4 h, the lease line says it passes the cap;
- light and dark (the browser's colour scheme) with WCAG AA contrast of the new lines.

Screenshots: test-artifacts/screenshots/hub-spawn-options-{light,dark}.png, and the README's
hub-spawn-options.png (the whole page, light).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from hubtools import chp_path, start_hub, stop_hub

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "browser"))
from test_estimates import AUDIT_TEXT, check_text  # noqa: E402

CHROMIUM = os.environ.get("GPUQUEUE_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT_DIR = Path(os.environ.get("GPUQUEUE_SCREENSHOT_DIR", REPO / "test-artifacts" / "screenshots"))
PY = sys.executable
DEMO_PASSWORD = "gpuqueue-demo"

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(300)]


def _skip_reason():
    if chp_path() is None:
        return "configurable-http-proxy (npm) is not installed; scripts/test.sh installs it"
    if not os.path.exists(CHROMIUM):
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set GPUQUEUE_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (Python) is not installed: pip install -e '.[test]'"
    return None


@pytest.fixture(scope="module")
def shub(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    h = start_hub(tmp_path_factory.mktemp("shub"), env={"GPUQUEUE_INVENTORY": str(DEMO_INVENTORY_PATH)})
    yield h
    stop_hub(h)


def test_the_spawn_options_say_what_is_free_now_and_how_long_a_lease_lasts(shub):
    from playwright.sync_api import expect, sync_playwright

    alice, bob, ada = shub.token_for("alice"), shub.token_for("bob"), shub.token_for("ada")
    r = shub.queue("POST", "workloads", bob, json={
        "name": "b-holder", "command": [PY, "-c", "import time; time.sleep(300)"],
        "gpus": 2, "flavor": "nvidia-a100", "maxRuntime": "10m"})
    assert r.status_code == 201, r.text
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    try:
        deadline = time.monotonic() + 60
        while shub.queue("GET", "workloads/team-b/b-holder", bob).json()["state"] != "Running":
            assert time.monotonic() < deadline, f"bob's job does not run\n{shub.log_tail()}"
            time.sleep(0.25)
        summary = shub.queue("GET", "inventory", alice).json()["summary"]
        a100 = [s for s in summary if s["flavor"] == "nvidia-a100" and s["resource"] == "nvidia.com/gpu"]
        free, total = sum(s["free"] for s in a100), sum(s["total"] for s in a100)
        assert total - free >= 2
        mig = [s for s in summary if s["resource"] == "nvidia.com/mig-1g.10gb"]

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                for scheme in ("light", "dark"):
                    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
                    page = context.new_page()
                    page.set_default_timeout(60000)
                    page.goto(shub.url + "hub/login?next=%2Fhub%2Fspawn")
                    page.fill("#username_input", "alice")
                    page.fill("#password_input", DEMO_PASSWORD)
                    page.click("#login_submit")
                    facts = page.locator(".gpuqueue-facts[data-profile='a100']")
                    expect(facts).to_contain_text(f"Free now: {free} of {total} A100 GPUs")
                    expect(facts).to_contain_text("Lease: up to 8 h; the server is stopped then (warned before)")
                    expect(page.locator(".gpuqueue-facts[data-profile='mig-1g']")).to_contain_text(
                        f"Free now: {sum(s['free'] for s in mig)} of {sum(s['total'] for s in mig)} MIG 1g.10gb slices")
                    expect(page.locator(".gpuqueue-facts[data-profile='any-gpu']")).to_contain_text(
                        re.compile(r"Free now: \d+ of \d+ GPUs"))
                    expect(page.locator(".gpuqueue-facts[data-profile='cpu']")).to_have_count(0)
                    check_text(page.evaluate(AUDIT_TEXT, ".gpuqueue-facts"), f"spawn options, {scheme}")
                    page.locator("#spawn_form").screenshot(path=str(SCREENSHOT_DIR / f"hub-spawn-options-{scheme}.png"))
                    if scheme == "light":  # the README's
                        page.screenshot(path=str(SCREENSHOT_DIR / "hub-spawn-options.png"))
                    context.close()

                # an admin caps team-a's run time below the lease: the form says so
                r = shub.queue("PUT", "admin/runtime-caps/team-a", ada, json={"maxRuntimeSeconds": 4 * 3600})
                assert r.status_code == 200, r.text
                context = browser.new_context(viewport={"width": 1000, "height": 900})
                page = context.new_page()
                page.goto(shub.url + "hub/login?next=%2Fhub%2Fspawn")
                page.fill("#username_input", "alice")
                page.fill("#password_input", DEMO_PASSWORD)
                page.click("#login_submit")
                expect(page.locator(".gpuqueue-facts[data-profile='a100']")).to_contain_text(
                    "more than your team's maximum run time of 4 h: ask an admin")
                context.close()
            finally:
                browser.close()
    finally:
        shub.queue("DELETE", "workloads/team-b/b-holder", bob)
        shub.queue("DELETE", "admin/runtime-caps/team-a", ada)
