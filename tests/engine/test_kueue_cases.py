"""An independent oracle: cases translated from Kueue's own unit tests into the format that
``jupyter gpuqueue simulate`` reads.

Each case is ``kueue_cases/<rule>/<case>.yaml`` (self-contained Kueue v1beta1 objects; the header
names the Kueue test it comes from) plus ``<case>.expected.yaml``: for every workload
(``<namespace>/<name>``), the fields of simulate's output that Kueue's test decides (where the test
states nothing about a workload, the engine's fixed point, marked so in the file). Kueue's tests
stop after one scheduling cycle; ``simulate`` runs cycles until nothing changes, so where the two
differ (a preemptor is admitted one cycle after its victims are evicted, a victim may be re-admitted
elsewhere) the expected file's comment derives the fixed point by hand.

See kueue_cases/README.md for the list of cases and their sources.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from jupyter_gpuqueue.engine.simulate import simulate_text

HERE = Path(__file__).parent / "kueue_cases"
CASES = sorted(
    f"{p.parent.name}/{p.name[: -len('.yaml')]}"
    for p in HERE.glob("*/*.yaml")
    if not p.name.endswith(".expected.yaml")
)

# A case must reach simulate's fixed point quickly; an engine that keeps preempting and re-admitting
# the same workloads would otherwise spin through simulate's million-cycle bound.
TIME_LIMIT_S = 20

# Cases that fail only because the engine does not implement the feature yet (xfail, not strict).
# Each must have been run and seen failing for that reason. Engine bugs are never listed here.
NOT_IMPLEMENTED: dict[str, str] = {}


@contextmanager
def time_limit(seconds: int):
    def fire(signum, frame):
        raise TimeoutError(f"simulate did not reach a fixed point within {seconds} s (preemption flapping?)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _params():
    for name in CASES:
        reason = NOT_IMPLEMENTED.get(name)
        marks = [pytest.mark.xfail(strict=False, reason=reason)] if reason else []
        yield pytest.param(name, id=name, marks=marks)


def run_case(name: str) -> tuple[dict, dict]:
    path = HERE / f"{name}.yaml"
    with time_limit(TIME_LIMIT_S):
        out = simulate_text([(path.name, path.read_text())])
    expected = yaml.safe_load((HERE / f"{name}.expected.yaml").read_text())
    return out, expected


@pytest.mark.parametrize("name", list(_params()))
def test_kueue_case(name):
    out, expected = run_case(name)
    problems = []
    for key, fields in expected.items():
        got = out["workloads"].get(key)
        if got is None:
            problems.append(f"{key}: missing from simulate output")
            continue
        for field, want in fields.items():
            if got.get(field) != want:
                problems.append(f"{key}.{field}: want {want!r}, got {got.get(field)!r}")
    assert not problems, "\n".join(problems + ["", f"full output: {out['workloads']}"])


def case_workloads(name: str) -> list[str]:
    """The ``<namespace>/<name>`` keys of every Workload in case ``name``'s .yaml, in file order."""
    docs = yaml.safe_load_all((HERE / f"{name}.yaml").read_text())
    return [
        f"{d['metadata']['namespace']}/{d['metadata']['name']}"
        for d in docs
        if d and d.get("kind") == "Workload"
    ]


def test_every_workload_of_every_case_is_checked():
    """Each Workload of a case has an entry in its .expected.yaml, and each entry names a Workload of the
    case: Kueue's expectation where its test states one (converted to simulate's fixed point), otherwise
    the engine's fixed point, marked in the file ``# not stated by Kueue's test``. A workload left out
    would let the engine evict, move or drop it unnoticed."""
    problems = []
    for name in CASES:
        workloads = case_workloads(name)
        expected = yaml.safe_load((HERE / f"{name}.expected.yaml").read_text()) or {}
        unchecked = [w for w in workloads if w not in expected]
        unknown = [k for k in expected if k not in workloads]
        if unchecked:
            problems.append(f"{name}: {len(unchecked)} of {len(workloads)} workloads unchecked: {unchecked}")
        if unknown:
            problems.append(f"{name}: expected entries name no Workload of the case: {unknown}")
    assert not problems, f"{len(problems)} cases:\n" + "\n".join(problems)


def test_every_case_has_an_expected_file_and_a_source():
    readme = (HERE / "README.md").read_text()
    for name in CASES:
        assert (HERE / f"{name}.expected.yaml").exists(), name
        assert f"`{name}`" in readme, f"{name} is not listed in README.md"
        header = (HERE / f"{name}.yaml").read_text().splitlines()[:2]
        assert header[0].startswith("# Kueue source: ") and header[1].startswith("# Test case: "), name
