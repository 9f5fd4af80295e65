"""Child processes that die with whoever started them (Linux ``PR_SET_PDEATHSIG``), so that a killed
test run leaves no control-plane component or container process behind."""

from __future__ import annotations

import signal
from typing import Callable, Optional


def pdeathsig_preexec() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` that has the child get SIGKILL when the *thread* that started it dies;
    None where ``prctl`` is unavailable."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def preexec() -> None:
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

    return preexec
