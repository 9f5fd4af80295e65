"""Failpoints in the commits that change quota or money, for crash tests (tests/test_crash.py).

The environment variable ``GPUQUEUE_FAILPOINT`` set to ``<commit>:<point>[:N]`` makes the process
SIGKILL itself at the Nth such commit of the process (default 1), where ``<commit>`` is one of

- ``admit``: the admissions of a tick (their usage intervals opened; service/admission.py
  ``admit_many``), written before any of them is started;
- ``finish``: a job's end (its intervals closed, its final state);
- ``cancel``: a user's cancel (intervals closed, Cancelled), written before it is answered;
- ``requeue``: a preempted job gone back to the queue (intervals closed, quota released);
- ``preempt``: a victim's eviction recorded, before its process is told to stop;
- ``move``: a pending workload's new request (service/moves.py), before the engine is told;

and ``<point>`` is ``before`` (nothing of the commit written) or ``after`` (committed, nothing of
it applied or answered yet). ``group-commit:…`` (the submissions' commit) is the group commit's
own (ledger/group_commit.py). Unset, a failpoint costs one dictionary lookup.

:func:`failpoint` is called by the service around each of these commits; ValueError for a
malformed value naming one of these commits (a test's typo must not pass silently).
"""

from __future__ import annotations

import logging
import os
import signal
from collections import Counter
from typing import Optional

log = logging.getLogger(__name__)

FAILPOINT_ENV = "GPUQUEUE_FAILPOINT"
COMMITS = ("admit", "finish", "cancel", "requeue", "preempt", "move")
POINTS = ("before", "after")

_counts: Counter = Counter()  # commits of each kind reached in this process ("before" counts them)


def parse(text: Optional[str]) -> Optional[tuple[str, str, int]]:
    """``"finish:after:2"`` → ``("finish", "after", 2)``; None when unset or naming another
    component (``group-commit:…``)."""
    if not text or text.split(":", 1)[0] not in COMMITS:
        return None
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[1] not in POINTS:
        raise ValueError(f"{FAILPOINT_ENV}={text!r}: expected <{'|'.join(COMMITS)}>:before|after[:N]")
    if len(parts) == 3 and not parts[2].isdigit():
        raise ValueError(f"{FAILPOINT_ENV}={text!r}: N must be a whole number >= 1")
    nth = int(parts[2]) if len(parts) == 3 else 1
    if nth < 1:
        raise ValueError(f"{FAILPOINT_ENV}={text!r}: N must be >= 1")
    return parts[0], parts[1], nth


def failpoint(commit: str, point: str) -> None:
    """Called ``before`` and ``after`` each commit of kind ``commit`` (one of :data:`COMMITS`):
    SIGKILL this process there when ``GPUQUEUE_FAILPOINT`` names it (the module docstring)."""
    text = os.environ.get(FAILPOINT_ENV)
    if not text:
        return
    if point == "before":
        _counts[commit] += 1
    armed = parse(text)
    if armed is not None and armed == (commit, point, _counts[commit]):
        log.warning("gpuqueue: failpoint %s:%s:%d: killing the process", commit, point, _counts[commit])
        for h in logging.getLogger().handlers + logging.getLogger("jupyter_gpuqueue").handlers:
            try:
                h.flush()
            except Exception:  # noqa: BLE001 - dying anyway
                pass
        os.kill(os.getpid(), signal.SIGKILL)
