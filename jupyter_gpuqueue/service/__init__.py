"""The service: the single owner of live state (DESIGN.md, "Layers").

One module per responsibility, each a class composed into :class:`QueueService` and given, at
construction, only the collaborators it works with (its docstring lists them), never the service:

- ``queue_service``: QueueService, the live state and its loop; it owns the engine, the ledger,
  the backend and the clock, wires the rest, and is the API the server, the hub and tests use;
- ``live``: the state QueueService shares by reference with its collaborators: ``LiveConfig``
  (configuration, prices, Scheduler, budgets, clock: replaced while it runs) and ``LiveState``
  (the tracked workloads and the loop's flags);
- ``checks``: what a request is checked for wherever it comes from (priority class, run time,
  GPUs / MIG profile / flavor, Kueue's ExceedsMaxQuota, command);
- ``submissions``: a request or a manifest → spec + engine Workload, with every check;
- ``intake``: accepted submissions persisted (one by one or in a group commit), then queued;
- ``admission``: a cycle's decisions applied: admit, launch, preempt, requeue, finish, maximum
  run time, cancel; Kueue's decisions mirrored in delegation mode;
- ``recovery``: the live state rebuilt from the ledger at start;
- ``views``: the JSON the REST API returns; ``logs``: jobs' output;
- ``configuration``: what admins apply (``admin.py``), stored and audited;
- ``costs``: budgets and budget holds, spot notices, utilization, reports; ``billing``: what
  admitted work is charged and has cost;
- ``teams``: users and groups → LocalQueues; ``events``: the event stream's subscribers;
- ``states`` (workload states), ``names`` (uids and names), ``factory`` (``create_service``).
"""

# Imported on first use (PEP 562): a submodule (the estimates' worker process imports
# ``service.estimates`` and nothing of the service around it) does not import the whole service.
_EXPORTS = {
    "QueueService": "queue_service", "create_service": "factory", "DEMO_DIR": "factory",
    **{name: "states" for name in ("PENDING", "ADMITTED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED",
                                   "ACTIVE_STATES", "FINISHED_STATES", "DEFAULT_MAX_RUNTIME", "MAX_RUNTIME_LIMIT")},
}

__all__ = [
    "QueueService", "create_service", "DEMO_DIR",
    "PENDING", "ADMITTED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "ACTIVE_STATES", "FINISHED_STATES",
    "DEFAULT_MAX_RUNTIME", "MAX_RUNTIME_LIMIT",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
