"""A workload's states in the live service and the ledger, and the defaults of a submission."""

from __future__ import annotations

from ..backends.lease import LEASE_KIND

PENDING, ADMITTED, RUNNING = "Pending", "Admitted", "Running"
SUCCEEDED, FAILED, CANCELLED = "Succeeded", "Failed", "Cancelled"
ACTIVE_STATES = (PENDING, ADMITTED, RUNNING)
FINISHED_STATES = (SUCCEEDED, FAILED, CANCELLED)

DEFAULT_MAX_RUNTIME = 3600  # seconds, when a submission gives none
MAX_RUNTIME_LIMIT = 2**31 - 1  # seconds: Kueue's maximumExecutionTimeSeconds is an int32


def is_lease(rec: dict) -> bool:
    """Whether a workload record is a notebook GPU lease (backends/lease.py)."""
    return (rec.get("spec") or {}).get("kind") == LEASE_KIND
