"""End to end in headless Chromium: an admin edits quotas in the GPU Queue panel's Admin view.

The admin first tries an invalid change (a borrowingLimit on a ClusterQueue taken out of its
cohort): the API refuses it with Kueue's reason, shown under the field, and nothing changes. Then
a valid change (team-a's A100 nominalQuota 4 → 5) is applied live: the REST API and the queue view
show it, and the audit log lists it with before → after. Priority values, prices and a YAML
round trip are edited the same way. A user without the admin scope sees no Admin section.
Screenshots go to test-artifacts/screenshots/ (GPUQUEUE_SCREENSHOT_DIR=docs/screenshots refreshes
the README's admin.png).
"""

from __future__ import annotations

import re

import pytest

from jupyter_gpuqueue.server.scopes import STANDALONE_ADMIN_KEY
from browserkit import SCREENSHOT_DIR, api, open_panel, set_sidebar_width, use_theme
from test_estimates import AUDIT_TEXT, check_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def gpu_quota(view: dict, cq: str, flavor: str) -> dict:
    q = next(c for c in view["clusterQueues"] if c["name"] == cq)
    return next(r for r in q["resources"] if r["flavor"] == flavor and r["resource"] == "nvidia.com/gpu")


async def test_admin_edits_a_quota_and_sees_it_applied(jp_fetch, started, lab_url, chromium_launch_args):
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    before = await api(jp_fetch, "admin", "config")
    assert gpu_quota(before, "team-a-cq", "nvidia-a100")["nominalQuota"] == "4"

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 1000})
            page = await context.new_page()
            page.set_default_timeout(30000)
            page_errors: list[str] = []
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            panel = await open_panel(page, lab_url)
            await set_sidebar_width(page, 470)
            # fold the user's sections; open Admin
            for section in ("submit", "jobs", "availability", "team"):
                await panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle').click()
            await panel.locator('[data-section="admin"] .jp-gpuqueue-section-toggle').click()
            card = panel.locator('[data-admin-cluster-queue="team-a-cq"]')
            await expect(card).to_be_visible()
            a100 = card.locator('tr[data-quota="nvidia-a100|nvidia.com/gpu"]')
            nominal = a100.locator('input[data-admin-field="nominalQuota"]')
            await expect(nominal).to_have_value("4")

            # (1) invalid: out of the cohort, with a borrowingLimit → Kueue's reason under the field
            cohort = card.locator('input[data-admin-field="cohort"]')
            borrowing = a100.locator('input[data-admin-field="borrowingLimit"]')
            await cohort.fill("")
            await borrowing.fill("2")
            # both edits are in the form when the admin applies (a refetch must not undo them)
            await expect(cohort).to_have_value("")
            await expect(borrowing).to_have_value("2")
            await card.locator('[data-action="apply-cluster-queue"]').click()
            error = card.locator(
                '.jp-gpuqueue-field-error[data-field="spec.resourceGroups[0].flavors[0].resources[2].borrowingLimit"]'
            )
            await expect(error).to_contain_text("must be nil when cohort is empty")
            await expect(a100.locator('input[data-admin-field="borrowingLimit"]')).to_have_class(
                re.compile("jp-mod-invalid"))
            unchanged = await api(jp_fetch, "admin", "config")
            assert next(c for c in unchanged["clusterQueues"] if c["name"] == "team-a-cq")["cohort"] == "research"
            assert (await api(jp_fetch, "admin", "audit"))["total"] == 0

            # (2) valid: reset, raise the A100 quota to 5, apply
            await card.get_by_role("button", name="Reset").click()
            await expect(error).to_have_count(0)
            await nominal.fill("5")
            await card.locator('[data-action="apply-cluster-queue"]').click()
            await expect(panel.locator(".jp-gpuqueue-admin-notice")).to_contain_text(
                "ClusterQueue team-a-cq: applied")
            await expect(nominal).to_have_value("5")
            await expect(nominal).not_to_have_class(re.compile("jp-mod-dirty"))
            after = await api(jp_fetch, "admin", "config")
            assert gpu_quota(after, "team-a-cq", "nvidia-a100")["nominalQuota"] == "5"
            queues = await api(jp_fetch, "queues")
            live = next(r for c in queues["clusterQueues"] if c["name"] == "team-a-cq" for r in c["resources"]
                        if r["flavor"] == "nvidia-a100" and r["resource"] == "nvidia.com/gpu")
            assert live["nominalQuota"] == "5"
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin.png"))

            # (3) the audit log shows who changed what, before → after
            await panel.locator('[data-admin-tab="audit"]').click()
            entry = panel.locator(".jp-gpuqueue-admin-audit > li").first
            await expect(entry).to_contain_text("patch-cluster-queue")
            await expect(entry).to_contain_text("ClusterQueue/team-a-cq")
            await expect(entry).to_contain_text("alice")
            await expect(entry.locator(".jp-gpuqueue-admin-changes")).to_contain_text(
                "nvidia-a100 nvidia.com/gpu.nominalQuota: 4 → 5")
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-audit.png"))

            # (4) priorities, prices and the YAML export, each edited or shown in the panel
            await panel.locator('[data-admin-tab="priorities"]').click()
            dev = panel.locator('[data-admin-priority-class="development"]')
            await dev.locator('input[data-admin-field="value"]').fill("1000000001")
            await dev.get_by_role("button", name="Apply").click()
            await expect(dev.locator('.jp-gpuqueue-field-error[data-field="value"]')).to_contain_text(
                "maximum allowed value of a user defined priority is 1000000000")
            # an unsaved edit in another row survives the view's reload after this apply
            other = panel.locator('[data-admin-priority-class]:not([data-admin-priority-class="development"])').first
            other_description = other.locator('[data-admin-field="description"]')
            await other_description.fill("a draft, not applied")
            await dev.locator('input[data-admin-field="value"]').fill("1500")
            await dev.get_by_role("button", name="Apply").click()
            await expect(panel.locator(".jp-gpuqueue-admin-notice")).to_contain_text("PriorityClass development")
            total = (await api(jp_fetch, "admin", "audit"))["total"]
            # the view has reloaded (its audit count is the new one)
            await expect(panel.locator('[data-admin-tab="audit"]')).to_have_text(f"Audit ({total})")
            await expect(other_description).to_have_value("a draft, not applied")
            await expect(other.get_by_role("button", name="Apply")).to_be_enabled()
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-priorities.png"))
            await panel.locator('[data-admin-tab="prices"]').click()
            l4 = panel.locator('tr[data-price-flavor="nvidia-l4"] input')
            await l4.fill("0.95")
            # a flavor left without a price is priced as the GPU its nodeLabels name, and says so
            # (issue 32: never silently at the default; a flavor of no known GPU says "billed at the default")
            await panel.locator('tr[data-price-flavor="nvidia-h100"] input').fill("")
            await panel.get_by_role("button", name="Save prices").click()
            await expect(panel.locator('tr[data-price-flavor="nvidia-l4"]')).to_contain_text("$0.95 (listed)")
            await expect(panel.locator('tr[data-price-flavor="nvidia-h100"]')).to_contain_text(
                "$3.75 (priced as H100)")
            assert (await api(jp_fetch, "prices"))["flavors"]["nvidia-l4"] == 0.95
            effective = {e["flavor"]: e["source"] for e in (await api(jp_fetch, "admin", "prices"))["effective"]}
            assert effective["nvidia-h100"] == "family" and effective["nvidia-l4"] == "listed"
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-prices.png"))
            await panel.locator('[data-admin-tab="yaml"]').click()
            await panel.locator('[data-action="export"]').click()
            yaml_box = panel.locator("textarea.jp-gpuqueue-admin-yaml")
            await expect(yaml_box).to_have_value(re.compile(r"kind: ClusterQueue"))
            await panel.get_by_role("button", name="Validate").click()
            await expect(panel.locator('[role="status"]', has_text="Valid:")).to_contain_text("2 clusterQueues")
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-yaml.png"))
            assert (await api(jp_fetch, "admin", "audit"))["total"] == 3
            await panel.get_by_role("button", name="Import (replace all)").click()
            await page.locator(".jp-Dialog-button.jp-mod-warn").click()  # confirm
            await expect(panel.locator('[role="status"]', has_text="Imported:")).to_be_visible()
            entries = (await api(jp_fetch, "admin", "audit"))["items"]
            assert [e["operation"] for e in entries][:1] == ["import"] and len(entries) == 4

            # (5) a user without the admin scope sees no Admin section (the setting is read per
            # request, so the same server serves a non-admin after a reload)
            started.web_app.settings[STANDALONE_ADMIN_KEY] = False
            try:
                panel = await open_panel(page, lab_url)
                await expect(panel.locator('[data-section="team"]')).to_be_visible()
                await expect(panel.locator('[data-section="admin"]')).to_have_count(0)
            finally:
                started.web_app.settings[STANDALONE_ADMIN_KEY] = True
            assert not page_errors, page_errors
            await context.close()
        finally:
            await browser.close()


async def test_a_fractional_gpu_quota_is_refused_and_quota_above_the_hardware_is_shown(
        jp_fetch, started, lab_url, chromium_launch_args):
    """Issue 15, items 3 and 8, at the sidebar's default width: "1.5" GPUs is refused under the
    field (Apply disabled; a spelling the panel does not check, "15e-1", is refused by the API with
    the reason under the same field) and nothing changes; raising team-b's A100 quota to 3 gives
    the cohort 7 A100s of quota for 6 devices: applied, with the warning in the quota editor and in
    the audit log."""
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 1000})
            page = await context.new_page()
            page.set_default_timeout(30000)
            page_errors: list[str] = []
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            panel = await open_panel(page, lab_url)
            width = (await panel.bounding_box())["width"]
            assert 200 <= width <= 320, width  # the default sidebar width
            for section in ("submit", "jobs", "availability", "team"):
                await panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle').click()
            await panel.locator('[data-section="admin"] .jp-gpuqueue-section-toggle').click()
            card = panel.locator('[data-admin-cluster-queue="team-b-cq"]')
            await card.scroll_into_view_if_needed()
            a100 = card.locator('tr[data-quota="nvidia-a100|nvidia.com/gpu"]')
            nominal = a100.locator('input[data-admin-field="nominalQuota"]')
            apply = card.locator('[data-action="apply-cluster-queue"]')
            await expect(nominal).to_have_value("2")
            await expect(panel.locator("[data-admin-warnings]")).to_have_count(0)

            # (1) "1.5": refused at once, under the field; Apply disabled
            await nominal.fill("1.5")
            path = "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota"
            error = card.locator(f'.jp-gpuqueue-field-error[data-field="{path}"]')
            await expect(error).to_contain_text("is counted in whole GPUs")
            await expect(nominal).to_have_class(re.compile("jp-mod-invalid"))
            await expect(apply).to_be_disabled()
            await expect(apply).to_have_css("opacity", "0.5")  # and looks it (JupyterLab's styles do not)
            await error.scroll_into_view_if_needed()
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-quota-fraction.png"))

            # (2) the API refuses a spelling the panel leaves to it, with the reason under the field
            await nominal.fill("15e-1")
            await expect(error).to_have_count(0)
            await apply.click()
            await expect(error).to_contain_text('Invalid value: "15e-1": nvidia.com/gpu is counted in whole GPUs')
            await expect(error).not_to_contain_text("document")  # the field path prefix is not repeated
            view = await api(jp_fetch, "admin", "config")
            assert gpu_quota(view, "team-b-cq", "nvidia-a100")["nominalQuota"] == "2"
            assert (await api(jp_fetch, "admin", "audit"))["total"] == 0

            # (3) 3 A100s: applied; the cohort's 7 exceed the 6 devices, and the editor says so
            await nominal.fill("3")
            await apply.click()
            await expect(panel.locator(".jp-gpuqueue-admin-notice")).to_contain_text("ClusterQueue team-b-cq: applied")
            warning = panel.locator("[data-admin-warnings]")
            await expect(warning).to_contain_text(
                "Cohort research has 7 nvidia.com/gpu of flavor nvidia-a100 in nominal quota, but the inventory has 6")
            view = await api(jp_fetch, "admin", "config")
            assert gpu_quota(view, "team-b-cq", "nvidia-a100")["nominalQuota"] == "3"
            await warning.scroll_into_view_if_needed()
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-quota-warning.png"))
            await panel.locator('[data-admin-tab="audit"]').click()
            entry = panel.locator(".jp-gpuqueue-admin-audit > li").first
            await expect(entry.locator(".jp-gpuqueue-admin-changes")).to_contain_text(
                "nvidia-a100 nvidia.com/gpu.nominalQuota: 2 → 3")
            await expect(entry.locator("[data-audit-warning]")).to_contain_text("Cohort research has 7")
            # (the tab bar overflows the default width, issue 15 item 9: clicking "Audit" scrolls it)
            await page.evaluate("""() => document.querySelectorAll('#jp-gpuqueue-panel, #jp-gpuqueue-panel *')
                .forEach(el => { el.scrollLeft = 0; })""")
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-audit-warning.png"))
            # Issue 34 item 4: the warning is readable (4.5:1) in Quotas and in Audit, light and dark
            for theme, light in (("JupyterLab Light", True), ("JupyterLab Dark", False)):
                if not light:
                    await use_theme(page, theme, light)
                for tab, selector in (("audit", "[data-audit-warning]"), ("quotas", "[data-admin-warnings]")):
                    await panel.locator(f'[data-admin-tab="{tab}"]').click()
                    await panel.locator(selector).first.scroll_into_view_if_needed()
                    check_text(await page.evaluate(AUDIT_TEXT, selector), f"{theme}, {tab}: quota above the hardware")
                await page.screenshot(path=str(SCREENSHOT_DIR / f"admin-quota-warning-{'light' if light else 'dark'}.png"))
            await use_theme(page, "JupyterLab Light", True)
            assert not page_errors, page_errors
            await context.close()
        finally:
            await browser.close()


async def test_admin_sets_a_teams_idle_policy_in_the_idle_tab(jp_fetch, started, lab_url, chromium_launch_args):
    """Issue 16, at the sidebar's default width: the Admin view's "Idle" tab has a card per team.
    A timeout below the minimum (5 min) is refused as typed (Apply disabled); a warning longer than
    a day is refused by the API with its reason under the Warning field and nothing is stored; a
    valid policy (the server going on without its GPUs when idle) is applied (REST API and audit log
    agree); "Turn off" stores it without a timeout."""
    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    before = await api(jp_fetch, "admin", "idle-policy")
    assert {t["namespace"] for t in before["teams"]} >= {"team-a", "team-b"}
    assert before["minimumTimeoutSeconds"] == 300
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(**chromium_launch_args)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 1000})
            page = await context.new_page()
            page.set_default_timeout(30000)
            page_errors: list[str] = []
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            panel = await open_panel(page, lab_url)
            width = (await panel.bounding_box())["width"]
            assert 200 <= width <= 320, width  # the default sidebar width
            for section in ("submit", "jobs", "availability", "team"):
                await panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle').click()
            await panel.locator('[data-section="admin"] .jp-gpuqueue-section-toggle').click()
            await panel.locator('[data-admin-tab="idle"]').click()
            card = panel.locator('[data-idle-team="team-a"]')
            await expect(card).to_be_visible()
            await expect(panel.locator('[data-idle-team="team-b"]')).to_be_visible()
            await expect(card.locator("[data-idle-state]")).to_contain_text("off")
            timeout = card.locator('input[data-idle-field="idleTimeoutSeconds"]')
            warn = card.locator('input[data-idle-field="warnSeconds"]')
            keeps = card.locator('input[data-idle-field="maxKeeps"]')
            util = card.locator('input[data-idle-field="utilizationBelowPercent"]')
            apply = card.locator('[data-action="apply-idle-policy"]')
            await expect(apply).to_be_disabled()

            # (1) 3 minutes: below the minimum, refused as typed
            await timeout.fill("3")
            t_error = card.locator('.jp-gpuqueue-field-error[data-field="idleTimeoutSeconds"]')
            await expect(t_error).to_contain_text("at least 5 minutes")
            await expect(timeout).to_have_class(re.compile("jp-mod-invalid"))
            await expect(apply).to_be_disabled()

            # (2) a warning of 2000 minutes: the API refuses it, its reason under the field
            await timeout.fill("60")
            await expect(t_error).to_have_count(0)
            await warn.fill("2000")
            await apply.click()
            w_error = card.locator('.jp-gpuqueue-field-error[data-field="warnSeconds"]')
            await expect(w_error).to_contain_text(
                "must be between 1 and 86400 seconds (0.02–1440 min), got 120000 (2000 min)")
            await expect(warn).to_have_class(re.compile("jp-mod-invalid"))
            await w_error.scroll_into_view_if_needed()
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-idle-error.png"))
            stored = await api(jp_fetch, "admin", "idle-policy")
            assert next(t for t in stored["teams"] if t["namespace"] == "team-a")["stored"] is False
            assert (await api(jp_fetch, "admin", "audit"))["total"] == 0

            # (3) valid: 60 min, warned 10 min before, 2 keeps, idle below 5 % GPU use
            await warn.fill("10")
            await expect(w_error).to_have_count(0)
            await keeps.fill("2")
            await util.fill("5")
            # when idle, the server goes on without its GPUs (default: it stops)
            on_idle = card.locator('select[data-idle-field="onIdle"]')
            await expect(on_idle).to_have_value("stop")
            await on_idle.select_option("release")
            await apply.click()
            await expect(panel.locator(".jp-gpuqueue-admin-notice")).to_contain_text("Idle policy of team-a")
            await expect(card.locator("[data-idle-state]")).to_contain_text("on: 60 min")
            await expect(card.locator("[data-idle-state]")).to_contain_text("set by alice")
            view = await api(jp_fetch, "admin", "idle-policy")
            team_a = next(t for t in view["teams"] if t["namespace"] == "team-a")
            assert team_a["policy"] == {"idleTimeoutSeconds": 3600, "warnSeconds": 600, "maxKeeps": 2,
                                        "utilizationBelowPercent": 5, "onIdle": "release"}, team_a
            await expect(on_idle).to_have_value("release")
            assert team_a["stored"] and team_a["updatedBy"] == "alice"
            assert next(t for t in view["teams"] if t["namespace"] == "team-b")["policy"]["idleTimeoutSeconds"] is None
            await expect(timeout).to_have_value("60")
            await expect(timeout).not_to_have_class(re.compile("jp-mod-dirty"))
            await card.scroll_into_view_if_needed()
            await page.evaluate("""() => document.querySelectorAll('#jp-gpuqueue-panel, #jp-gpuqueue-panel *')
                .forEach(el => { el.scrollLeft = 0; })""")
            await page.screenshot(path=str(SCREENSHOT_DIR / "admin-idle.png"))
            audit = (await api(jp_fetch, "admin", "audit"))["items"]
            assert audit[0]["operation"] == "set-idle-policy" and audit[0]["target"] == "namespace/team-a"

            # (4) Turn off: stored without a timeout
            await card.locator('[data-action="turn-off-idle-policy"]').click()
            await expect(card.locator("[data-idle-state]")).to_contain_text("off")
            view = await api(jp_fetch, "admin", "idle-policy")
            team_a = next(t for t in view["teams"] if t["namespace"] == "team-a")
            assert team_a["policy"]["idleTimeoutSeconds"] is None and team_a["stored"]
            await expect(timeout).to_have_value("")
            # (5) Use default: the stored policy is dropped
            await card.locator('[data-action="default-idle-policy"]').click()
            await expect(card.locator("[data-idle-state]")).to_contain_text("default")
            view = await api(jp_fetch, "admin", "idle-policy")
            assert not next(t for t in view["teams"] if t["namespace"] == "team-a")["stored"]
            assert not page_errors, page_errors
            await context.close()
        finally:
            await browser.close()


async def test_admin_sees_every_teams_jobs_and_cancels_one_in_the_jobs_tab(
        jp_fetch, started, gpuqueue_service, lab_url, chromium_launch_args):
    """The Admin view's "Jobs" tab, at the sidebar's default width: every team's waiting and running
    jobs by team, with owner, request, position and cost. Cancelling one asks first ("Keep it"
    changes nothing), then cancels it and says so. A standalone server's owner may cancel only
    their own jobs (the hub's admins any: tests/hub/test_authz_matrix.py): the server's 403 for
    bob's job shows next to it, and bob's job goes on."""
    import shutil
    import sys

    from playwright.async_api import async_playwright, expect

    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    python = shutil.which("python") or sys.executable
    sleep = {"command": [python, "-c", "import time; time.sleep(600)"], "maxRuntime": "15m"}
    svc = gpuqueue_service
    mine = await api(jp_fetch, "workloads", method="POST",
                     body={"name": "adm-mine", "localQueue": "team-a/team-a-queue", "gpus": 1, **sleep})
    svc.submit({"name": "adm-bobs", "localQueue": "team-b/team-b-queue", "gpus": 4, "flavor": "nvidia-h100",
                **sleep}, user="bob")
    svc.submit({"name": "adm-bobs-next", "localQueue": "team-b/team-b-queue", "gpus": 4, "flavor": "nvidia-h100",
                **sleep}, user="bob")
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(**chromium_launch_args)
            try:
                page = await browser.new_page(viewport={"width": 1280, "height": 1000})
                page.set_default_timeout(30000)
                page_errors: list[str] = []
                page.on("pageerror", lambda e: page_errors.append(str(e)))
                panel = await open_panel(page, lab_url)
                for section in ("submit", "jobs", "availability", "team"):
                    await panel.locator(f'[data-section="{section}"] .jp-gpuqueue-section-toggle').click()
                await panel.locator('[data-section="admin"] .jp-gpuqueue-section-toggle').click()
                await panel.locator('[data-admin-tab="jobs"]').click()
                team_b = panel.locator('[data-team="team-b"]')
                await expect(team_b).to_contain_text("1 running · 1 pending")
                row = lambda key: panel.locator(f'[data-admin-job="{key}"]')  # noqa: E731
                await expect(row("team-a/adm-mine")).to_contain_text("alice · 1 GPU")
                await expect(row("team-b/adm-bobs")).to_contain_text("bob · 4 GPUs on nvidia-h100")
                await expect(row("team-b/adm-bobs-next")).to_contain_text("position 1 in team-b-cq")
                await page.screenshot(path=str(SCREENSHOT_DIR / "panel-admin-jobs-250.png"))

                # "Keep it": nothing changes
                await row("team-a/adm-mine").locator(".jp-gpuqueue-cancel").click()
                dialog = page.locator(".jp-Dialog")
                await expect(dialog).to_contain_text("Cancel your job?")
                await dialog.get_by_role("button", name="Keep it").click()
                assert (await api(jp_fetch, "workloads", "team-a", "adm-mine"))["state"] in ("Admitted", "Running")

                # Cancel job: cancelled, said so, gone from the list
                await row("team-a/adm-mine").locator(".jp-gpuqueue-cancel").click()
                await page.locator(".jp-Dialog").get_by_role("button", name="Cancel job").click()
                await expect(panel.locator(".jp-gpuqueue-admin-notice")).to_contain_text("team-a/adm-mine (alice) cancelled")
                await expect(row("team-a/adm-mine")).to_have_count(0)
                assert (await api(jp_fetch, "workloads", "team-a", "adm-mine"))["state"] == "Cancelled"

                # bob's, on a standalone server: refused with the server's words, and it goes on
                await row("team-b/adm-bobs").locator(".jp-gpuqueue-cancel").click()
                await expect(page.locator(".jp-Dialog")).to_contain_text("Cancel bob's job?")
                await page.locator(".jp-Dialog").get_by_role("button", name="Cancel job").click()
                await expect(row("team-b/adm-bobs").locator(".jp-gpuqueue-form-error")).to_contain_text("bob")
                assert svc.record("team-b", "adm-bobs")["state"] == "Running"
                assert not page_errors, page_errors
            finally:
                await browser.close()
    finally:
        for ns, name in (("team-a", "adm-mine"), ("team-b", "adm-bobs"), ("team-b", "adm-bobs-next")):
            try:
                svc.cancel(ns, name, user="alice" if ns == "team-a" else "bob")
            except Exception:
                pass
        assert mine["owner"] == "alice"
