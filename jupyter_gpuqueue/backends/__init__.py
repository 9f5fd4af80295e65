"""Backends: where admitted work runs. One small protocol (:class:`Backend`): start, stop with a
reason, poll for finished runs, adopt runs after a restart.

- :class:`LocalBackend` (``local.py``): local processes under a wrapper (``runner.py``) that records
  exit codes; the standalone default.
"""

from .base import Backend, LaunchSpec, RunInfo, RunStatus
from .local import LocalBackend

__all__ = ["Backend", "LaunchSpec", "RunInfo", "RunStatus", "LocalBackend"]
