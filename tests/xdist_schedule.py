"""How scripts/test.sh's pytest-xdist workers share the suite (``--dist loadfile`` plus the two
changes below; tests/conftest.py installs them).

1. **Longest first.** xdist hands out whole files in the order of their test counts, so files of
   one or two long tests (the install test, the shared-machine recipe, schemathesis) came last and
   one worker ran them alone at the end. Here the units go out by their measured time, longest
   first (:data:`SECONDS`; a file not listed counts :data:`UNLISTED_SECONDS_PER_TEST` a test), so
   that the short ones fill in around them.
2. **One Kubernetes unit.** Every file under ``tests/k8s/real/`` shares the session's control
   plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler: ~15 s of CPU to start):
   they are one unit, so one worker starts it once instead of each worker once.

The order is only an order: every test runs, in one worker, with its fixtures as before; a run of
a few files (``-p no:xdist`` or ``-n 0``) is not affected beyond the order of its files.
"""

from __future__ import annotations

K8S_REAL = "tests/k8s/real/"

# Seconds each unit took in a whole run (four workers, 2026-11-28, summed per file; the machine was
# shared, load 7-19: only the order matters). Rerun: see BENCHMARKS.md, "Test suite time".
SECONDS = {
    "tests/test_schemathesis.py": 1058,
    "tests/browser/test_install.py": 692,
    "tests/hub/test_shared_machine.py": 466,
    K8S_REAL: 399,
    "tests/hub/test_spawn_queue.py": 230,
    "tests/test_concurrency.py": 183,
    "tests/test_crash.py": 173,
    "tests/test_crash_commits.py": 154,
    "tests/hub/test_lease_shutdown.py": 146,
    "tests/hub/test_idle_reclaim_hub.py": 134,
    "tests/browser/test_lease_warning.py": 132,
    "tests/test_schemathesis_callers.py": 122,
    "tests/test_bench.py": 115,
    "tests/test_cli.py": 114,
    "tests/browser/test_admin_panel.py": 89,
    "tests/hub/test_idle_tab_browser.py": 78,
    "tests/browser/test_sidebar_width.py": 73,
    "tests/test_admin.py": 72,
    "tests/browser/test_notebook_job.py": 64,
    "tests/browser/test_panel.py": 57,
    "tests/test_rest.py": 49,
    "tests/test_notebook_jobs.py": 44,
    "tests/browser/test_job_page.py": 43,
    "tests/test_run_as_owner.py": 43,
    "tests/test_service.py": 33,
    "tests/browser/test_widget_log.py": 32,
    "tests/browser/test_idle_warning.py": 30,
    "tests/hub/test_hub_service.py": 29,
}
UNLISTED_SECONDS_PER_TEST = 0.3


def unit_of(nodeid: str) -> str:
    """The unit a test belongs to: its file, or :data:`K8S_REAL` for every file under it."""
    path = nodeid.split("::", 1)[0]
    return K8S_REAL if path.startswith(K8S_REAL) else path


def longest_first(nodeids: list[str]) -> list[str]:
    """``nodeids`` grouped by unit, the units by :data:`SECONDS` (longest first; ties and unlisted
    files by test count, then in collection order), each unit's tests in their order."""
    units: dict[str, list[str]] = {}
    for nodeid in nodeids:
        units.setdefault(unit_of(nodeid), []).append(nodeid)

    def seconds(item: tuple[int, tuple[str, list[str]]]) -> tuple[float, int]:
        index, (unit, ids) = item
        return (-SECONDS.get(unit, UNLISTED_SECONDS_PER_TEST * len(ids)), index)

    ordered = sorted(enumerate(units.items()), key=seconds)
    return [nodeid for _, (_, ids) in ordered for nodeid in ids]


def make_scheduler(config, log):
    """``--dist loadfile``'s scheduler with :func:`unit_of` as its unit and the collection's order
    (:func:`longest_first`, applied in ``pytest_collection_modifyitems``) as its order."""
    from xdist.scheduler import LoadFileScheduling

    class LongestFirstScheduling(LoadFileScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # keep longest_first's order, not the test counts'

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return LongestFirstScheduling(config, log)
