"""Kueue's pending reasons lead with a plain sentence (issue 15, item 10), in the %%gpujob widget
(``plain_reason``, widget.py) and the panel's job card (labextension/src/reasons.ts: the same
cases run through the built ``lib/reasons.js`` with node, where it is built); the widget's log
is appended to, not replaced, so it follows its end unless the user scrolled up."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from jupyter_gpuqueue.widget import LOG_CLASS, GpuJobWidget, plain_reason

REPO = Path(__file__).resolve().parents[1]
REASONS_JS = REPO / "labextension" / "lib" / "reasons.js"

CASES = [
    ("NoFit", "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
     "flavor nvidia-a100, 2 more needed, flavor nvidia-h100 doesn't match node affinity",
     "Waiting for 2 more GPUs of nvidia-a100 (the quota is in use)"),
    ("NoFit", "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
     "flavor nvidia-a100, 1 more needed, insufficient unused quota for nvidia.com/gpu in flavor "
     "nvidia-h100, 3 more needed",
     "Waiting for 1 more GPU of nvidia-a100 or 3 more GPUs of nvidia-h100 (the quota is in use)"),
    ("NoFit", "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/mig-1g.10gb "
     "in flavor a100-mig, 1 more needed",
     "Waiting for 1 more MIG 1g.10gb slice of a100-mig (the quota is in use)"),
    ("PlacementFailed", "quota fits, but no node of flavor nvidia-a100 has 6 × nvidia.com/gpu free for pod 1 "
     "of 1 in pod set main",
     "Waiting for devices: the quota allows it, but no single node of nvidia-a100 has 6 × nvidia.com/gpu "
     "free yet"),
    ("NoFit", "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor "
     "nvidia-a100, request > maximum capacity (8 > 6)",
     "It asks for more than the queue can ever give: it cannot start as it is (ask for fewer GPUs or "
     "another flavor)"),
    ("NoFit", "couldn't assign flavors to pod set main: flavor nvidia-a100 doesn't match node affinity, "
     "untolerated taint {spot: true} in flavor nvidia-h100-spot",
     "No flavor of the queue matches what it asks for (its node selection or tolerations)"),
    ("BudgetExceeded", "team-a's budget of $100.00 is spent",
     "Held: the team's budget for this period is spent (a hub admin can raise it or lift the hold)"),
    ("Preempted", "Preempted to accommodate team-b/urgent (UID: 1234) due to prioritization in the ClusterQueue",
     "Preempted to make room for team-b/urgent; waiting in the queue again"),
    ("Inactive", "ClusterQueue team-a-cq is inactive: stopPolicy Hold",
     "The team's queue is stopped or misconfigured: ask a hub admin"),
    ("Misconfigured", "LocalQueue team-a/nope doesn't exist", "The team's queue is misconfigured: ask a hub admin"),
    ("Pending", None, None),
    (None, None, None),
    ("SomethingNew", "a reason this mapping does not know", None),
]


@pytest.mark.parametrize("reason,message,expected", CASES)
def test_plain_reason(reason, message, expected):
    assert plain_reason(reason, message) == expected


def test_the_panel_maps_the_same_cases(tmp_path):
    node = shutil.which("node")
    if node is None or not REASONS_JS.exists():
        pytest.skip("node or the built labextension (lib/reasons.js) is missing")
    module = tmp_path / "reasons.mjs"
    module.write_text(REASONS_JS.read_text())
    script = (f"import {{ plainReason }} from {json.dumps(str(module))};\n"
              f"const cases = {json.dumps([[r, m] for r, m, _ in CASES])};\n"
              "console.log(JSON.stringify(cases.map(([r, m]) => plainReason(r, m))));\n")
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [e for _, _, e in CASES]


def _pending(reason, message):
    return {"namespace": "team-a", "name": "train", "state": "Pending", "reason": reason, "message": message,
            "podSets": [{"count": 1, "requests": {"nvidia.com/gpu": "2"}}], "costUsd": 0}


def test_the_widget_leads_with_the_plain_sentence_and_keeps_kueues_words():
    reason, message, expected = CASES[0]
    widget = GpuJobWidget(_pending(reason, message))
    details = widget.details.value
    assert "Why" in details and expected in details
    assert "doesn&#x27;t match node affinity" in details or "doesn't match node affinity" in details
    assert details.index(expected) < details.index("insufficient unused quota")


def test_the_widget_log_is_appended_to_and_follows_its_end():
    widget = GpuJobWidget(_pending("Pending", None))
    assert LOG_CLASS in widget.log_view._dom_classes
    assert "column-reverse" in widget._log_style.value  # the scroll box starts at, and follows, its end
    widget.set_log("epoch 1\n", "epoch 1\n")
    first = widget.log_view.outputs
    assert len(first) == 1 and first[0]["text"] == "epoch 1\n"
    widget.set_log("epoch 1\nepoch 2\n", "epoch 2\n")
    # appended, never replaced: the outputs already shown stay (and so does the user's scroll position)
    assert widget.log_view.outputs[0] is first[0] or widget.log_view.outputs[0] == first[0]
    assert "".join(o["text"] for o in widget.log_view.outputs) == "epoch 1\nepoch 2\n"
    assert widget.log.value == "epoch 1\nepoch 2\n"
    widget.set_log("epoch 2\n")  # no increment: the view restarts from the tail
    assert "".join(o["text"] for o in widget.log_view.outputs) == "epoch 2\n"
