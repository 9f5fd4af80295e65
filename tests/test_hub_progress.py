"""The spawn page's words for a notebook server's GPU lease (jupyter_gpuqueue.hub.profiles): the
queue position, the estimated start with its range, and what the lease waits for, read from the
workload view's ``estimatedStartAt``, ``estimatedStartRange``, ``waitingFor``, ``estimateReason``
and ``estimateMessage`` (docs/rest-api.md)."""

from __future__ import annotations

import pytest

pytest.importorskip("jupyterhub")

from jupyter_gpuqueue.hub.profiles import estimate_text, profile_needs_gpu, profiles_form, progress_message  # noqa: E402

NOW = 1_700_000_000.0
A100 = {"gpus": 1, "flavor": "nvidia-a100"}


def pending(**fields) -> dict:
    return {"state": "Pending", "namespace": "team-a", "positionInLocalQueue": 0, **fields}


def test_position_estimate_and_range():
    w = pending(estimatedStartAt=NOW + 240, estimatedStartRange={"early": NOW + 120, "late": NOW + 540})
    assert progress_message(w, A100, now=NOW) == (
        "position 1 in team-a's queue · expected in ~4 min (2–9 min) · waiting for 1 × A100")
    w = pending(estimatedStartAt=NOW + 240, estimatedStartRange=None)
    assert progress_message(w, A100, now=NOW) == "position 1 in team-a's queue · expected in ~4 min · waiting for 1 × A100"
    w = pending(estimatedStartAt=NOW + 7000, estimatedStartRange={"early": NOW + 2000, "late": NOW + 9000})
    assert estimate_text(w, now=NOW) == "expected in ~1 h 57 min (33 min–2 h 30 min)"
    assert estimate_text(pending(estimatedStartAt=NOW + 5), now=NOW) == "expected any moment now"
    assert estimate_text(pending(estimatedStartAt=NOW - 60), now=NOW) == "expected any moment now"
    assert estimate_text(pending(estimatedStartAt=NOW + 3 * 86400), now=NOW) == "expected in ~3 d"


def test_no_estimate_says_so_and_why():
    assert estimate_text(pending(), now=NOW) == "no estimate yet"  # a view without the fields
    assert estimate_text(pending(estimatedStartAt=None, estimateReason="NotYetEstimated"), now=NOW) == "no estimate yet"
    w = pending(estimatedStartAt=None, estimateReason="ExceedsMaxQuota",
                estimateMessage="asks for more than team-a's queue can ever have")
    assert progress_message(w, {"gpus": 8}, now=NOW) == (
        "position 1 in team-a's queue · no estimate: asks for more than team-a's queue can ever have · "
        "waiting for 8 × GPU")
    assert estimate_text(pending(estimateReason="BudgetExceeded"), now=NOW) == "no estimate: BudgetExceeded"


def test_what_it_waits_for_named_or_anonymised():
    w = pending(estimatedStartAt=NOW + 240, waitingFor=[
        {"namespace": "team-b", "name": "train-x", "kind": "running", "expectedEndAt": NOW + 200,
         "summary": "2 × nvidia-a100"},
        {"namespace": "team-a", "name": "eval", "kind": "pending", "expectedEndAt": NOW + 900, "summary": "1 × nvidia-a100"},
    ])
    assert progress_message(w, A100, now=NOW) == (
        "position 1 in team-a's queue · expected in ~4 min · waiting for 1 × A100 after team-b/train-x "
        "(2 × nvidia-a100, ends in ~3 min) + 1 more")
    w["waitingFor"] = [{"namespace": "team-b", "name": None, "kind": "running", "expectedEndAt": NOW + 10,
                        "summary": "2 × nvidia-a100"}]
    assert progress_message(w, A100, now=NOW).endswith(
        "waiting for 1 × A100 after a running job of team-b (2 × nvidia-a100, ends any moment now)")


def test_preemption_in_progress_and_admitted():
    w = pending(message="Pending the preemption of 1 workload(s)", positionInLocalQueue=2)
    assert progress_message(w, A100, now=NOW) == (
        "position 3 in team-a's queue · no estimate yet · waiting for 1 × A100 (Pending the preemption of 1 workload(s))")
    w = {"state": "Running", "namespace": "team-a", "visibleDevices": "0"}
    assert progress_message(w, A100, now=NOW) == "1 × A100 admitted in team-a's queue (devices 0)"


def test_profiles_form_note_and_gpu_profiles():
    cpu = {"slug": "cpu", "display_name": "CPU only", "gpuqueue": {}}
    mig = {"slug": "mig", "display_name": "MIG", "gpuqueue": {"migProfile": "1g.10gb"}}
    choice = {"slug": "pick", "display_name": "Pick", "profile_options": {"gpu": {"choices": {
        "none": {"display_name": "none"}, "a100": {"display_name": "A100", "gpuqueue": {"gpus": 1}}}}}}
    assert [profile_needs_gpu(p) for p in (cpu, mig, choice)] == [False, True, True]
    form = profiles_form([cpu], note="You are in no team <yet>")
    assert "You are in no team &lt;yet&gt;" in form and "value='cpu' checked" in form
    assert "gpuqueue-note" not in profiles_form([cpu, mig])
