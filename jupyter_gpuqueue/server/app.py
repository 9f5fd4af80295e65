"""The jupyter_server extension: ``GpuQueueApp``.

Loaded by ``jupyter lab`` / ``jupyter server`` when ``jpserver_extensions.jupyter_gpuqueue`` is
enabled (the package installs ``jupyter-config/server-config/jupyter_gpuqueue.json``). It builds one
:class:`~jupyter_gpuqueue.service.QueueService`, starts it once the server's event loop runs, and
serves the REST API and the event stream under ``{base_url}gpuqueue/api/`` (docs/rest-api.md).

Configure with ``c.GpuQueueApp.<trait>`` in ``jupyter_server_config.py``, for example::

    c.GpuQueueApp.config_files = ["/etc/gpuqueue/cluster.yaml"]
    c.GpuQueueApp.prices = {"nvidia-a100": 2.21, "nvidia-h100": 3.75}
    c.GpuQueueApp.default_local_queue = "team-a/team-a-queue"

Modes (``c.GpuQueueApp.mode``, docs/rest-api.md "JupyterHub"): ``standalone`` (the queue runs in
this server), ``hub-service`` (this server is the hub-managed service ``gpuqueue``: custom scopes
are enforced and teams come from hub groups), ``hub-client`` (a user's single-user server: no
queue here, every ``gpuqueue/api`` request is forwarded to the service, see ``forward.py``).
``auto`` picks hub-service when ``$JUPYTERHUB_SERVICE_NAME`` is ``hub_service_name``, hub-client
when ``$JUPYTERHUB_API_TOKEN`` is set and a service URL is configured (``service_url`` or
``$GPUQUEUE_SERVICE_URL``), else standalone.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any, Optional

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, CaselessStrEnum, Dict, Float, Int, List, Unicode, default

from ..errors import GpuQueueError, ValidationError
from .admin_handlers import admin_handlers
from .events import PING_INTERVAL_KEY, events_handler
from .forward import FORWARDER_KEY, Forwarder, forward_handlers
from .handlers import (
    HUB_GROUPS_KEY,
    MAX_BODY_KEY,
    SERVICE_KEY,
    STANDALONE_USER_KEY,
    STARTUP_ERROR_KEY,
    SUBMIT_LIMITER_KEY,
    default_handlers,
    default_standalone_user,
    not_found_handler,
)
from .hub_groups import HubGroups
from .metrics import METRICS_TOKEN_KEY, install_global, metrics_handler, uninstall_global
from .report_handlers import report_handlers
from .ratelimit import TokenBucketLimiter
from .scopes import HUB_SCOPES_KEY

ENV_CONFIG = "GPUQUEUE_CONFIG"
ENV_INVENTORY = "GPUQUEUE_INVENTORY"
ENV_DB_URL = "GPUQUEUE_DB_URL"
ENV_SERVICE_URL = "GPUQUEUE_SERVICE_URL"

MODES = ("auto", "standalone", "hub-service", "hub-client")
NO_TEAM_HINT = (  # a researcher's words: no configuration names (issue 34 item 10)
    "ask a hub admin to add you to a team of the GPU queue (a hub group that has a queue)"
)


def resolve_mode(mode: str, *, hub_service_name: str, service_url: Optional[str], environ) -> str:
    """The mode to run in: ``mode`` itself unless it is ``"auto"`` (see the module docstring)."""
    if mode != "auto":
        return mode
    if environ.get("JUPYTERHUB_SERVICE_NAME"):
        # a hub-managed service: ours, or someone else's jupyterhub-singleuser service that has
        # this extension installed too (that one keeps a private standalone queue)
        return "hub-service" if environ["JUPYTERHUB_SERVICE_NAME"] == hub_service_name else "standalone"
    if environ.get("JUPYTERHUB_API_TOKEN") and (service_url or environ.get(ENV_SERVICE_URL)):
        return "hub-client"
    return "standalone"


PACKAGE_LOGGER = "jupyter_gpuqueue"


def route_package_logs(server_log: logging.Logger) -> None:
    """Send the records of every ``jupyter_gpuqueue.*`` module logger (the backends' retries,
    relists and warnings among them) through the Jupyter server's logger, so that they appear in
    the server log with its time, level and format, at its level (INFO by default)."""
    pkg = logging.getLogger(PACKAGE_LOGGER)
    if server_log is pkg or not isinstance(server_log, logging.Logger):
        return
    pkg.parent = server_log
    pkg.propagate = True
    pkg.setLevel(logging.NOTSET)


class GpuQueueApp(ExtensionApp):
    """A fair, quota-aware GPU queue (Kueue semantics) inside the Jupyter server."""

    name = "jupyter_gpuqueue"
    description = __doc__
    load_other_extensions = True

    config_files = List(
        Unicode(),
        help="""Kubernetes / Kueue YAML files that define the queueing objects: ResourceFlavors,
        ClusterQueues, Cohorts, LocalQueues, PriorityClasses, WorkloadPriorityClasses, Namespaces.
        Later files override earlier objects of the same kind and name. Empty: the paths in the
        GPUQUEUE_CONFIG environment variable (separated by os.pathsep), else the bundled demo
        cluster. Once an admin has changed the configuration (admin API or panel: quotas,
        cohorts, priority classes, prices, import), the configuration stored in the ledger is
        used instead of these files (and of `prices`) at every start, until
        `discard_stored_config` is set.""",
    ).tag(config=True)

    discard_stored_config = Bool(
        False,
        help="""Drop the configuration admins stored in the ledger (and its prices) at startup,
        so that `config_files` and `prices` apply again; the drop is written to the audit log.
        Command line: `jupyter lab --GpuQueueApp.discard_stored_config=True`.""",
    ).tag(config=True)

    inventory_file = Unicode(
        None,
        allow_none=True,
        help="""A static inventory YAML (nodes, GPUs, MIG devices). None: the GPUQUEUE_INVENTORY
        environment variable, else the GPUs NVML reports, else the bundled demo inventory.""",
    ).tag(config=True)

    db_url = Unicode(
        None,
        allow_none=True,
        help="""SQLAlchemy URL of the ledger (workloads, decisions, usage intervals), e.g.
        "postgresql+psycopg://gpuqueue@db/gpuqueue". None: the GPUQUEUE_DB_URL environment
        variable, else SQLite at {state_dir}/gpuqueue.sqlite.""",
    ).tag(config=True)

    upgrade_db = Bool(
        False,
        help="""Upgrade a ledger made by an older release to this release's schema at startup
        (a SQLite ledger is first backed up next to it, as <file>.<time>.rev-<revision>.bak;
        back up PostgreSQL yourself with pg_dump). False: a ledger of an older schema is left
        as it is and the queue does not start (every request answers 503 naming the command
        to run: `jupyter gpuqueue upgrade-db`). A new ledger is always created at the newest
        schema; a ledger newer than this release is always refused.""",
    ).tag(config=True)

    state_dir = Unicode(
        help="""Where the queue keeps its SQLite ledger and job logs. Default: the
        "gpuqueue" folder in the Jupyter data directory.""",
    ).tag(config=True)

    @default("state_dir")
    def _state_dir_default(self) -> str:
        from jupyter_core.paths import jupyter_data_dir

        return os.path.join(jupyter_data_dir(), "gpuqueue")

    prices = Dict(
        key_trait=Unicode(),
        value_trait=Float(),
        help="""USD per GPU-hour by ResourceFlavor name, e.g. {"nvidia-a100": 2.21}. The key
        "default" sets the price of flavors not listed. Empty: the built-in price list.""",
    ).tag(config=True)

    default_local_queue = Unicode(
        None,
        allow_none=True,
        help="""The LocalQueue ("namespace/name") used when a submission names none. None: the
        user's first permitted LocalQueue.""",
    ).tag(config=True)

    default_priority_class = Unicode(
        None,
        allow_none=True,
        help="""The PriorityClass or WorkloadPriorityClass used when a submission names none.
        None: the cluster's globalDefault PriorityClass, else priority 0.""",
    ).tag(config=True)

    user_local_queues = Dict(
        key_trait=Unicode(),
        value_trait=List(Unicode()),
        help="""Which LocalQueues ("namespace/name") each user may submit to, e.g.
        {"alice": ["team-a/team-a-queue"]}. Empty: every user may use every LocalQueue.""",
    ).tag(config=True)

    standalone_user = Unicode(
        help="""The queue user name of a standalone server (jupyter_server's own token or
        password login, where every client is the server's owner). Default: the OS user
        running the server. Under JupyterHub the Hub user name is used instead.""",
    ).tag(config=True)

    @default("standalone_user")
    def _standalone_user_default(self) -> str:
        return default_standalone_user()

    max_body_bytes = Int(
        1 << 20,
        help="""Largest accepted request body in bytes (a SubmitRequest or a manifest); larger
        bodies are answered with 413 PayloadTooLarge.""",
    ).tag(config=True)

    submit_rate_limit = Unicode(
        "",
        help="""Per-user limit on submissions (POST workloads) as a token bucket, e.g. "20/s",
        "600/min" or "100/10s"; beyond it the answer is 429 TooManyRequests with Retry-After.
        Empty: no limit. See also submit_rate_burst and max_pending_per_user.""",
    ).tag(config=True)

    submit_rate_burst = Int(
        0,
        help="""Submissions a user may make at once before submit_rate_limit applies (the
        token bucket's size). 0: the rate's count (20 for "20/s").""",
    ).tag(config=True)

    max_pending_per_user = Int(
        0,
        help="""Most Pending workloads one user may have; a submission beyond it is answered
        429 TooManyRequests naming this limit (nothing is queued). 0: no limit.""",
    ).tag(config=True)

    max_notebook_bytes = Int(
        50 * 1024 * 1024,
        help="""The largest notebook a notebook job may submit, in bytes (larger: 400 naming
        ``notebook``, nothing queued). papermill rewrites the whole executed notebook after every
        cell, so a notebook heavy with outputs costs the job that much I/O per cell.""",
    ).tag(config=True)

    freeze_gc_after_start = Bool(
        True,
        help="""Once the queue has started (ledger restored, jobs adopted), collect garbage and
        move every object left to the collector's permanent generation (``gc.freeze()``): the
        server's start-up objects are then never scanned again, and a full collection under load
        takes a few milliseconds instead of 100-180 ms, during which no request or event is
        served (BENCHMARKS.md, "The live service"). False: leave the collector alone.""",
    ).tag(config=True)

    gil_switch_interval = Float(
        0.0005,
        allow_none=True,
        help="""Seconds given to ``sys.setswitchinterval`` once the queue has started: how long a
        thread holding the GIL keeps it while another waits. The group commit's writer thread
        (submissions) and the event loop (requests, events, scheduling) share it; with Python's
        default of 0.005 s the loop waits up to 5 ms each time the writer runs Python code, and
        position queries' p99 under 100 live panels was 10-20 % higher (BENCHMARKS.md, "The
        live service"). It is a setting of the whole server process. None: Python's default.""",
    ).tag(config=True)

    cycle_interval = Float(
        0.5,
        help="""Seconds between the service's background scheduling cycles (it also runs one
        right after every change).""",
    ).tag(config=True)

    lease_preemption_grace_seconds = Float(
        300.0,
        help="""Seconds a notebook GPU lease (kind NotebookLease) chosen as a preemption victim
        keeps its GPUs after the warning: it carries evictionDeadline and the user sees the time
        left in JupyterLab; then it is released. 0: released at once.""",
    ).tag(config=True)

    lease_extension_seconds = Float(
        0.0,
        help="""Seconds by which the owner of a running notebook GPU lease may extend its maximum
        time (JupyterLab offers "Extend" in the warning before it; POST
        workloads/{namespace}/{name}/extend). 0: leases are not extended.""",
    ).tag(config=True)

    lease_max_extensions = Int(
        1,
        help="""How many times one notebook lease may be extended (lease_extension_seconds).""",
    ).tag(config=True)

    max_runtime_caps = Dict(
        {},
        help="""The longest maximum run time each team's submissions may ask for, in seconds:
        {"team-a": 86400, "*": 604800} ("*": every team without its own entry; none: no cap). A
        submission asking for more is refused (400 naming maxRuntimeSeconds / maxRuntime and the
        cap); one asking for none gets the default run time, at most the cap. Admins change a
        team's cap in the panel or with PUT admin/runtime-caps/{namespace} (stored; wins over
        this).""",
    ).tag(config=True)

    estimate_start_times = Bool(
        True,
        help="""Estimate when each pending workload starts (estimatedStartAt, estimatedStartRange,
        waitingFor, fasterOptions in the workload view; docs/estimates.md): the queue copied and
        run forward with predicted run times on a worker thread after each change. False: those
        fields are null / empty (estimateReason "Disabled").""",
    ).tag(config=True)

    estimate_min_interval = Float(
        1.0,
        help="""Seconds between two refreshes of the estimated start times, at least (they are
        recomputed after a change, debounced to this interval, and every 30 s regardless).""",
    ).tag(config=True)

    estimate_rate_blend = Float(
        0.2,
        help="""Weight (0–1) of the ClusterQueue's admission rate (counted over the time the server
        has observed, at most the last hour) in the estimated start time's blend with the forward
        simulation (engine/wait_rate.py; 0: the simulation alone). BENCHMARKS.md, "Estimated start
        times on a live queue", measures both.""",
    ).tag(config=True)

    lease_priority_class = Unicode(
        "development",
        allow_none=True,
        help="""The PriorityClass or WorkloadPriorityClass of notebook GPU leases that name
        none. It must exist in the cluster configuration (else lease submissions naming no
        class are refused, field priorityClass). None: the same default as other submissions.""",
    ).tag(config=True)

    backend = CaselessStrEnum(
        ["local", "kubernetes", "kueue"],
        default_value="local",
        help="""Where admitted jobs run (docs/kubernetes.md): "local" processes on this server,
        "kubernetes" batch/v1 Jobs admitted by this queue, or "kueue" Jobs admitted by an
        installed Kueue (positions from Kueue's visibility API). With a cluster backend the
        inventory comes from the cluster's Nodes unless inventory_file is set.""",
    ).tag(config=True)

    kubeconfig = Unicode(
        None, allow_none=True,
        help="""kubeconfig file of the cluster backends. None: the in-cluster service account
        when running in a pod, else $KUBECONFIG or ~/.kube/config.""",
    ).tag(config=True)

    kube_context = Unicode(None, allow_none=True, help="""kubeconfig context (None: current).""").tag(config=True)

    kube_namespaces = Dict(
        key_trait=Unicode(), value_trait=Unicode(),
        help="""Team namespace (a LocalQueue's namespace) → cluster namespace its Jobs are created
        in. Unlisted teams use their own name.""",
    ).tag(config=True)

    job_image = Unicode(
        "python:3.12-slim",
        help="""Container image of Jobs built from the submit form (the command runs in it).""",
    ).tag(config=True)

    job_pod_template = Dict(
        help="""A partial PodSpec merged into Jobs built from the form and %%gpujob: e.g. the users'
        home volume, so that the cell file and working directory the kernel saw exist in the job
        ({"volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{owner_safe}"}}],
        "containers": [{"volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}]}]}).
        {owner} / {owner_safe} become the submitting user. With it, the job runs in the
        submission's working directory.""",
    ).tag(config=True)

    volcano_gang = Bool(
        False,
        help="""Kubernetes backend: gang-schedule each Job's pods with Volcano (schedulerName
        volcano and a PodGroup with minMember = the Job's parallelism).""",
    ).tag(config=True)

    kueue_api_version = Unicode(
        "v1beta1", help="""Kueue backend: API version of Kueue's Workload and visibility APIs.""",
    ).tag(config=True)

    kube_start_concurrency = Int(
        16,
        help="""Kubernetes backend: Jobs created by worker threads, at most this many at a time, so
        that the queue's loop never waits for the API server (0: created on the loop's thread).""",
    ).tag(config=True)

    kube_pods_ready_timeout = Float(
        300.0,
        help="""Kubernetes backend (Kueue's waitForPodsReady.timeout): seconds from admission within
        which every Pod of the Job must be Ready, whether Pods exist or not (FailedCreate,
        Unschedulable, ImagePullBackOff, a node that is not Ready). Past it the workload is evicted
        (reason PodsReadyTimeout; billing stops) and requeued with backoff.""",
    ).tag(config=True)

    kube_pods_ready_recovery_timeout = Float(
        None, allow_none=True,
        help="""Kubernetes backend (Kueue's waitForPodsReady.recoveryTimeout): seconds a job whose
        Pods were all Ready has to be Ready again after one stops being Ready (a lost node);
        past it the workload is evicted and requeued, billed until its Pods stopped running.
        None: kube_pods_ready_timeout.""",
    ).tag(config=True)

    kube_requeue_backoff_base = Float(
        60.0,
        help="""Kubernetes backend (Kueue's requeuingStrategy.backoffBaseSeconds): a workload
        evicted for PodsReadyTimeout the n-th time is queued again after base * 2**(n-1) seconds
        (at most an hour).""",
    ).tag(config=True)

    kube_requeue_backoff_limit = Int(
        5, allow_none=True,
        help="""Kubernetes backend (Kueue's requeuingStrategy.backoffLimitCount): evictions for
        PodsReadyTimeout after which the workload fails (reason RequeuingLimitExceeded) and its
        Job is deleted. None: no limit (Kueue's default).""",
    ).tag(config=True)

    kube_job_ttl_seconds = Int(
        86400, allow_none=True,
        help="""Kubernetes and Kueue backends: spec.ttlSecondsAfterFinished of the Jobs the queue
        creates (a manifest's own value is kept): the TTL-after-finished controller deletes a
        finished Job and its Pods that long after it ended. None: finished Jobs are kept.""",
    ).tag(config=True)

    event_ping_interval = Float(
        30.0,
        help="""Seconds between {"type": "ping"} messages on the event stream; 0 disables.""",
    ).tag(config=True)

    mode = CaselessStrEnum(
        MODES,
        default_value="auto",
        help="""Where the queue runs: "standalone" (in this server), "hub-service" (this server
        is the JupyterHub-managed service; custom scopes enforced, teams from hub groups),
        "hub-client" (a user's server forwarding to the service), or "auto" (detect from the
        environment JupyterHub sets; see the module docstring).""",
    ).tag(config=True)

    hub_service_name = Unicode(
        "gpuqueue",
        help="""The name of the JupyterHub-managed service that runs the queue
        (c.JupyterHub.services[].name); "auto" mode is hub-service in the service of this name.""",
    ).tag(config=True)

    service_url = Unicode(
        None,
        allow_none=True,
        help="""hub-client mode: the base URL of the hub-managed service including its prefix,
        e.g. "http://127.0.0.1:10101/services/gpuqueue/" (direct) or
        "https://hub.example.org/services/gpuqueue/" (through the hub's proxy). None: the
        GPUQUEUE_SERVICE_URL environment variable.""",
    ).tag(config=True)

    forward_timeout = Float(
        30.0,
        help="""hub-client mode: seconds to wait for the service per forwarded request (502
        BadGateway when unreachable, 504 GatewayTimeout after this).""",
    ).tag(config=True)

    forward_local_paths = Bool(
        True,
        help="""hub-client mode: make relative "script" / "workingDir" of forwarded
        SubmitRequests absolute against this server's root directory (and run commands there),
        for a service that runs jobs on the same machine. Turn off when the service runs jobs
        elsewhere (Kubernetes) and paths should pass unchanged.""",
    ).tag(config=True)

    group_local_queues = Dict(
        key_trait=Unicode(),
        value_trait=List(Unicode()),
        help="""hub-service mode: teams from JupyterHub groups. Maps a group to the LocalQueues
        ("namespace/name") its members may submit to, e.g. {"team-a": ["team-a/team-a-queue"]}.
        A user in several groups picks among all their LocalQueues (the first is the default);
        a user in none gets 403 naming the fix. Empty: teams come from user_local_queues only
        (and with both empty every user may use every LocalQueue).""",
    ).tag(config=True)

    workload_visibility = CaselessStrEnum(
        ["team", "all"],
        default_value="team",
        help="""Whose workloads a user who is not a queue admin sees. "team": their own and their
        teams' (the namespaces of the LocalQueues they may submit to): another team's are left out
        of the workload list, the event stream and the jobs / users reports, answered 404 by name,
        and anonymised in the queues' pending lists and the devices' holders (namespace kept; name
        and owner null). "all": every workload, names and owners included. Without a team mapping
        (user_local_queues and group_local_queues empty) every user sees every workload.
        docs/rest-api.md, "Who sees what".""",
    ).tag(config=True)

    # -- jobs as their owners (issue 16; docs/security.md) ----------------------------------------

    run_jobs_as_owner = Bool(
        None,
        allow_none=True,
        help="""Run each local job as its owner's OS account (uid, gid, groups, umask, a fresh
        environment; the working directory the owner's home unless given, checked as that user;
        logs 0600). Needs the service to run as root: asked for without root, the service refuses
        to start. A hub service running as root with the local backend always runs jobs as their
        owners: False is refused there (logged as an error; jobs never run as root). None
        (default): on in that case, off otherwise (a hub service that is not root says at start
        that every job runs as its account; standalone servers run jobs as the server's user).""",
    ).tag(config=True)

    os_account_template = Unicode(
        "{username}",
        help="""The OS account of a hub user: a template with {username} (or {USERNAME}), or a
        preset: "tljh" (The Littlest JupyterHub's jupyter-<user>, long names shortened as TLJH
        does), "systemd" (SystemdSpawner's default username_template, the hub user name).""",
    ).tag(config=True)

    os_account_map = Dict(
        key_trait=Unicode(),
        value_trait=Unicode(),
        help="""Hub user → OS account name, overriding os_account_template (may name an account
        below UID_MIN; never root). A hub user whose account does not exist cannot submit jobs.""",
    ).tag(config=True)

    owner_job_path = Unicode(
        "/usr/local/bin:/usr/bin:/bin",
        help="""Where jobs run as their owners: the PATH of a job's fresh environment (a command such
        as `python` is looked up on it, as the owner). The TLJH plugin puts the users' environment
        (/opt/tljh/user/bin) first.""",
    ).tag(config=True)

    # -- costs (issue 6: budgets, spot flavors, utilization, metrics; docs/rest-api.md "Costs") ----

    budgets = Dict(
        key_trait=Unicode(),
        help="""Monthly budgets per team (namespace), USD per UTC month, e.g.
        {"team-a": {"monthlyUSD": 500, "warnAt": 0.8, "hard": true}}. At warnAt × monthlyUSD
        (default 0.8) the team is warned (panel, status bar, %%gpujob widget); with "hard", once
        monthlyUSD is spent new submissions wait with reason BudgetExceeded until the month ends,
        the budget is raised, or an admin lifts the hold. Admins can change budgets through the
        REST API (stored in the ledger; a stored budget wins over this one).""",
    ).tag(config=True)

    spot_flavors = List(
        Unicode(),
        help="""ResourceFlavors that are spot / preemptible capacity (give them their own price in
        `prices`, and a nodeTaints entry so that only submissions with acceptSpot land there).
        Jobs that accept spot get GPUQUEUE_SPOT and GPUQUEUE_PREEMPTION_NOTICE_FILE, and are sent
        `spot_signal` `spot_grace_seconds` before they are stopped when preempted.""",
    ).tag(config=True)

    spot_signal = Unicode("SIGUSR1", help="""The preemption notice signal of spot jobs.""").tag(config=True)

    spot_grace_seconds = Float(
        30.0, help="""Seconds between a spot job's preemption notice and its SIGTERM.""",
    ).tag(config=True)

    utilization_interval = Float(
        30.0,
        help="""Seconds between NVML GPU-utilization samples of running jobs (only where the inventory
        came from NVML); the reports' average utilization comes from them.""",
    ).tag(config=True)

    idle_policy = Dict(
        {},
        help="""Idle notebook GPU reclaim (docs/idle-reclaim.md), the default policy of every team
        without one set by an admin: {"idleTimeoutSeconds": int ≥ idle_timeout_minimum_seconds
        or None (off), "warnSeconds": 600, "maxKeeps": 3, "utilizationBelowPercent": 5 or None,
        "onIdle": "stop" or "release"}; fields left out take these values. Off by default. Acts
        on notebook leases of the hub service: activity is a kernel executing or terminal input
        (reported by each notebook server, else read from the Hub) or GPU use (NVML).""",
    ).tag(config=True)

    idle_timeout_minimum_seconds = Int(
        300,
        help="""The smallest idleTimeoutSeconds an idle policy may have (servers report their
        activity every $GPUQUEUE_ACTIVITY_INTERVAL, 30 s by default; the Hub learns of a server's
        activity only every JUPYTERHUB_ACTIVITY_INTERVAL, 300 s by default).""",
    ).tag(config=True)

    idle_activity_interval = Float(
        30.0,
        help="""Seconds between reads of the notebook servers' activity from the Hub API (idle
        notebook reclaim; only for leases of teams whose idle policy is on and whose servers do
        not report their own activity).""",
    ).tag(config=True)

    idle_activity_stale_seconds = Float(
        None,
        allow_none=True,
        help="""Seconds after which the activity known of a lease (a server's last report, the
        Hub's last answer) is stale: nothing is warned or released on it. None: 3 ×
        idle_activity_interval, at least 90 s. Keep it well above the servers'
        $GPUQUEUE_ACTIVITY_INTERVAL.""",
    ).tag(config=True)

    metrics_token = Unicode(
        None,
        allow_none=True,
        help="""A bearer token that may read {base_url}gpuqueue/metrics (Prometheus:
        `authorization: {credentials: ...}`) without a Jupyter login. None: the endpoint needs
        the server's own authentication, like jupyter_server's /metrics.""",
    ).tag(config=True)

    # -- lifecycle ------------------------------------------------------------------------------

    _service_started = False
    service = None
    resolved_mode: Optional[str] = None

    def _resolve_mode(self) -> str:
        if self.resolved_mode is None:
            self.resolved_mode = resolve_mode(
                self.mode,
                hub_service_name=self.hub_service_name,
                service_url=self.service_url,
                environ=os.environ,
            )
        return self.resolved_mode

    def _use_stored_config(self, service) -> None:
        """The configuration admins applied (ledger) wins over the config files, unless discarded."""
        if self.discard_stored_config:
            n = service.discard_stored_config(actor="GpuQueueApp.discard_stored_config")
            if n:
                self.log.warning("jupyter_gpuqueue: discarded the stored admin configuration; using the config files")
        elif service.load_stored_config():
            self.log.info("jupyter_gpuqueue: using the configuration stored by admins (ledger), not the config files")

    def initialize_handlers(self) -> None:
        if self._resolve_mode() == "hub-client":
            self.handlers.extend(forward_handlers)  # every gpuqueue/api path goes to the service
            return
        self.handlers.extend(default_handlers)
        self.handlers.extend(admin_handlers)  # gpuqueue/api/admin/...: admin scope only
        self.handlers.extend(report_handlers)  # reports, budgets (report_handlers.py)
        self.handlers.append(metrics_handler)  # gpuqueue/metrics (metrics.py)
        self.handlers.append(events_handler)
        self.handlers.append(not_found_handler)  # must stay last: JSON 404 under gpuqueue/api/

    def _resolved_config_paths(self) -> Optional[list[str]]:
        if self.config_files:
            return list(self.config_files)
        env = os.environ.get(ENV_CONFIG, "")
        paths = [p for p in env.split(os.pathsep) if p.strip()]
        return paths or None

    def initialize_settings(self) -> None:
        """Build the QueueService. An invalid configuration is logged and every endpoint then
        answers 503 with the reason, instead of the extension silently missing."""
        self.service = None
        route_package_logs(self.log)
        mode = self._resolve_mode()
        self.settings.update(
            {
                SERVICE_KEY: None,
                FORWARDER_KEY: None,
                MAX_BODY_KEY: self.max_body_bytes,
                STANDALONE_USER_KEY: self.standalone_user,
                PING_INTERVAL_KEY: self.event_ping_interval,
                HUB_SCOPES_KEY: mode == "hub-service",
                METRICS_TOKEN_KEY: self.metrics_token,
            }
        )
        if mode == "hub-client":
            self._initialize_client()
            return
        try:
            self.settings[SUBMIT_LIMITER_KEY] = TokenBucketLimiter.from_setting(
                self.submit_rate_limit, self.submit_rate_burst)
            service = self._create_service()
            service.configure_costs(  # budgets, spot flavors, NVML utilization (service_costs.py)
                budgets=dict(self.budgets), spot_flavors=list(self.spot_flavors), spot_signal=self.spot_signal,
                spot_grace_seconds=self.spot_grace_seconds, utilization_interval=self.utilization_interval)
            if self.max_pending_per_user < 0:
                raise ValidationError("must be ≥ 0 (0: no limit)", "max_pending_per_user")
            service.max_pending_per_user = self.max_pending_per_user
            if self.max_notebook_bytes <= 0:
                raise ValidationError("must be > 0 bytes", "max_notebook_bytes")
            service.checks.notebooks.max_bytes = self.max_notebook_bytes
            service.lease_extensions.configure(self.lease_extension_seconds, self.lease_max_extensions)
            service.runtime_caps.configure(dict(self.max_runtime_caps))
            if self.estimate_min_interval <= 0:
                raise ValidationError("must be > 0 seconds", "estimate_min_interval")
            service.estimates.enabled = service.estimates.wanted = bool(self.estimate_start_times)
            service.estimates.min_interval = float(self.estimate_min_interval)
            if not 0.0 <= self.estimate_rate_blend <= 1.0:
                raise ValidationError("must be between 0 and 1", "estimate_rate_blend")
            service.estimates.rate_blend = float(self.estimate_rate_blend)
            service.teams.set_visibility(self.workload_visibility.lower())
            self._use_stored_config(service)
            service.idle.configure(dict(self.idle_policy), minimum_timeout=self.idle_timeout_minimum_seconds)
            if self.idle_activity_stale_seconds is not None:
                if not self.idle_activity_stale_seconds > 0:
                    raise ValidationError("must be > 0 seconds (or None)", "idle_activity_stale_seconds")
                service.idle.stale_after = float(self.idle_activity_stale_seconds)
            if mode == "hub-service":
                self._use_hub_teams(service)
                self._stop_on_sigint()
        except GpuQueueError as e:
            self.log.error("jupyter_gpuqueue: the queue service cannot start: %s", e)
            self.settings[STARTUP_ERROR_KEY] = str(e)
            return
        self.service = service
        self.settings[SERVICE_KEY] = service

    def _initialize_client(self) -> None:
        """hub-client mode: no queue here, only a Forwarder to the hub-managed service."""
        url = self.service_url or os.environ.get(ENV_SERVICE_URL) or ""
        try:
            root_dir = getattr(self.serverapp, "root_dir", None) or os.getcwd()
            forwarder = Forwarder(
                url,
                os.environ.get("JUPYTERHUB_API_TOKEN", ""),
                timeout=self.forward_timeout,
                root_dir=os.path.expanduser(root_dir) if self.forward_local_paths else None,
            )
        except GpuQueueError as e:
            self.log.error("jupyter_gpuqueue: hub-client mode cannot forward: %s", e)
            self.settings[STARTUP_ERROR_KEY] = str(e)
            return
        self.settings[FORWARDER_KEY] = forwarder
        self.log.info("jupyter_gpuqueue: hub-client mode, forwarding to %s", forwarder.api_url)

    def _stop_on_sigint(self) -> None:
        """hub-service mode: SIGINT stops this server, as SIGTERM does. JupyterHub stops a managed
        service with SIGINT and sends SIGTERM only ``Spawner.interrupt_timeout`` (30 s) later; a
        hub started where SIGINT is ignored (a background job of a non-interactive shell, e.g.
        ``nohup jupyterhub &``) passes that on, and jupyter_server sets no SIGINT handler without a
        terminal: the queue would then stop 30 s late at every hub shutdown."""
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN \
                and threading.current_thread() is threading.main_thread():
            stop = getattr(self.serverapp, "_signal_stop", None)
            if stop is not None:
                signal.signal(signal.SIGINT, stop)

    def _use_hub_teams(self, service) -> None:
        """hub-service mode: enforce custom scopes (settings) and map hub groups to teams."""
        service.mode = "hub-service"
        if os.environ.get("JUPYTERHUB_API_URL") and os.environ.get("JUPYTERHUB_API_TOKEN"):
            from ..service.idle import HubActivity  # idle notebook reclaim reads the servers' activity

            service.idle.activity_source = HubActivity(os.environ["JUPYTERHUB_API_URL"],
                                                       os.environ["JUPYTERHUB_API_TOKEN"], log=self.log)
            service.idle.poll_interval = max(0.1, float(self.idle_activity_interval))
        groups = HubGroups()
        self.settings[HUB_GROUPS_KEY] = groups
        if self.group_local_queues:
            service.use_group_teams(
                {g: list(q) for g, q in self.group_local_queues.items()}, groups, hint=NO_TEAM_HINT
            )
        self.log.info(
            "jupyter_gpuqueue: hub-service mode (scopes enforced; teams from %d hub group(s))",
            len(self.group_local_queues),
        )

    def _create_service(self):
        from ..service import create_service

        owner_accounts = self._owner_accounts()
        os.makedirs(self.state_dir, mode=0o700 if owner_accounts else 0o777, exist_ok=True)
        root_dir = getattr(self.serverapp, "root_dir", None) or os.getcwd()
        return create_service(
            owner_accounts=owner_accounts,
            config_paths=self._resolved_config_paths(),
            inventory_path=self.inventory_file or os.environ.get(ENV_INVENTORY) or None,
            db_url=self.db_url or os.environ.get(ENV_DB_URL) or None,
            root_dir=os.path.abspath(os.path.expanduser(root_dir)),
            data_dir=self.state_dir,
            prices=dict(self.prices) or None,
            default_local_queue=self.default_local_queue,
            default_priority_class=self.default_priority_class,
            user_local_queues=(
                {u: list(q) for u, q in self.user_local_queues.items()}
                if self.user_local_queues
                else None
            ),
            cycle_interval=self.cycle_interval,
            lease_preemption_grace_seconds=self.lease_preemption_grace_seconds,
            lease_priority_class=self.lease_priority_class,
            backend=self.backend,
            upgrade_db=self.upgrade_db,
            kubernetes={"kubeconfig": self.kubeconfig, "context": self.kube_context, "image": self.job_image,
                        "namespaces": dict(self.kube_namespaces), "volcano": self.volcano_gang,
                        "pod_template": dict(self.job_pod_template),
                        "kueue_version": self.kueue_api_version,
                        "pods_ready_timeout": self.kube_pods_ready_timeout,
                        "pods_ready_recovery_timeout": self.kube_pods_ready_recovery_timeout,
                        "requeue_backoff_base": self.kube_requeue_backoff_base,
                        "requeue_backoff_limit": self.kube_requeue_backoff_limit,
                        "job_ttl_seconds": self.kube_job_ttl_seconds,
                        "start_concurrency": self.kube_start_concurrency},
            logger=self.log,
        )

    def _owner_accounts(self):
        """The Accounts mapping when jobs run as their owners (run_jobs_as_owner), else None."""
        import getpass

        from ..backends.accounts import Accounts, run_as_owner_policy

        on, messages = run_as_owner_policy(self.run_jobs_as_owner, self._resolve_mode(), self.backend, os.geteuid(),
                                           getpass.getuser())
        for level, text in messages:
            getattr(self.log, level)("jupyter_gpuqueue: %s", text)
        if not on:
            return None
        self.log.info("jupyter_gpuqueue: jobs run as their owners' OS accounts (os_account_template %r)",
                      self.os_account_template)
        return Accounts(self.os_account_template, dict(self.os_account_map), path=self.owner_job_path)

    _lease_watch = None  # hub-client mode on a GPU lease: lease_release.ServerLeaseWatch
    _activity_reports = None  # hub-client mode on a GPU lease: activity.ActivityReporter

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Start the service once the server's event loop runs (restore, adopt, loop). In
        hub-client mode on a GPU lease: watch it (new kernels without GPUs once it ends) and report
        this server's activity to the queue (idle reclaim: activity.py)."""
        if self.settings.get(FORWARDER_KEY) is not None and self._lease_watch is None:
            from .activity import start_activity_reports
            from .lease_release import start_lease_watch

            self._lease_watch = start_lease_watch(serverapp, self.settings[FORWARDER_KEY], self.log)
            self._activity_reports = start_activity_reports(serverapp, self.settings[FORWARDER_KEY], self.log)
        service = getattr(self, "service", None)
        if service is None or self._service_started:
            return
        await service.start()
        if service.mode != "hub-service":  # there every hub user could read /metrics: gpuqueue/metrics only
            install_global(service)  # the server's /metrics reports this queue (metrics.py)
        self._service_started = True
        if self.freeze_gc_after_start:
            import gc

            gc.collect()
            gc.freeze()
        if self.gil_switch_interval is not None:
            sys.setswitchinterval(self.gil_switch_interval)
        self.log.info("jupyter_gpuqueue: queue service started")

    async def stop_extension(self) -> None:
        """Stop the service's loop and close its ledger; running jobs keep running and are
        adopted on restart. Safe when the service never started (or could not be built)."""
        watch, self._lease_watch = self._lease_watch, None
        if watch is not None:
            watch.stop()
        reports, self._activity_reports = self._activity_reports, None
        if reports is not None:
            reports.stop()
        service, self.service = self.service, None
        self.settings[SERVICE_KEY] = None
        web_app = getattr(self.serverapp, "web_app", None)
        if web_app is not None:
            web_app.settings[SERVICE_KEY] = None  # late requests get 503, not a closed ledger
        was_started, self._service_started = self._service_started, False
        if service is None:
            return
        uninstall_global(service)
        await service.stop()
        if was_started:
            self.log.info("jupyter_gpuqueue: queue service stopped")
