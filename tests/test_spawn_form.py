"""The hub's spawn form says, under each GPU profile, what is free now and how long a lease lasts
(issue 34 item 10). The form's text from the queue's real answers: a QueueService's inventory
view and info (tests/servicetools.py), rendered by hub/profiles.py as the spawner renders it."""

from __future__ import annotations

import sys

from servicetools import service_factory, stop_jobs
from test_service import CLUSTER, INVENTORY, state, wait

from jupyter_gpuqueue.hub.profiles import profile_facts, profiles_form

PROFILES = [
    {"slug": "cpu", "display_name": "CPU only", "default": True, "gpuqueue": {}},
    {"slug": "a", "display_name": "1 × A", "gpuqueue": {"gpus": 1, "flavor": "gpu-a"}},
    {"slug": "any", "display_name": "1 × GPU", "gpuqueue": {"gpus": 1, "maxRuntimeSeconds": 1800}},
]


def test_the_spawn_form_says_what_is_free_now_and_how_long_a_lease_lasts(tmp_path):
    make = service_factory(tmp_path, CLUSTER, INVENTORY, default_local_queue="one/q", stop_grace_seconds=0.5)
    try:
        svc = make()
        svc.submit({"name": "busy", "command": [sys.executable, "-c", "import time; time.sleep(60)"],
                    "gpus": 2, "flavor": "gpu-a", "localQueue": "two/q"}, user="bob")
        wait(svc, lambda: state(svc, "two", "busy") == "Running")
        facts = profile_facts(PROFILES, 8 * 3600, svc.inventory_view())
        assert "cpu" not in facts
        assert facts["a"] == ["Free now: none of 2 GPU-A GPUs (you wait in your team's queue)",
                              "Lease: up to 8 h; the server is stopped then (warned before)"]
        assert facts["any"] == ["Free now: 2 of 4 GPUs", "Lease: up to 30 min; the server is stopped then (warned before)"]
        svc.runtime_caps.configure({"one": 3600})
        cap = {q["namespace"]: q["maxRuntimeSeconds"] for q in svc.info("alice")["localQueues"]}["one"]
        facts = profile_facts(PROFILES, 8 * 3600, svc.inventory_view(), cap)
        assert facts["a"][1].endswith("more than your team's maximum run time of 1 h: ask an admin")
        assert facts["any"][1] == "Lease: up to 30 min; the server is stopped then (warned before)"
        html = profiles_form(PROFILES, facts=facts)
        assert "data-profile='a'" in html and "Free now: 2 of 4 GPUs" in html
        assert profiles_form(PROFILES) != html  # the configured form stays as it was (get_options_form compares)
    finally:
        stop_jobs(make.services, grace=0.2)
