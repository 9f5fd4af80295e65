"""Idle notebook GPU reclaim: a notebook lease nobody uses gives its GPUs back, after a warning.

A running lease (kind ``NotebookLease``, backends/lease.py) of a team whose idle policy is on is
**idle** when its server has had no kernel execution and no user activity for
``idleTimeoutSeconds`` and, where NVML answers (``Costs.utilization_sampler``), none of its GPUs
was at or above ``utilizationBelowPercent`` meanwhile. Then:

1. **Warning.** The lease's view gets ``idleDeadline`` (seconds since the epoch: now +
   ``warnSeconds``), persisted in its run record (``run.idle``) so that a restart keeps the same
   deadline; JupyterLab shows a countdown with a "Keep my GPU" button.
2. **Keep.** The owner's ``POST workloads/{ns}/{name}/keep-gpu`` restarts the idle clock, at most
   ``maxKeeps`` times per lease (409 when no warning runs or no keep is left). New activity (a
   kernel execution, terminal input, GPU use) also ends the warning and restarts the clock.
3. **Release.** At the deadline the lease is released through the path of a lease's end
   (``backend.stop`` with no grace; the loop is woken, so the GPUs go to the next workload in the
   same tick): it ends Succeeded with reason ``IdleReclaimed``, and its record keeps
   ``run.idleReclaimed = {"at", "gpuHours", "idleSince", "action"}``. What happens to the
   notebook server is the team policy's ``onIdle`` (:func:`idle_action`): ``"stop"`` (the
   default) — the spawner's lease watch stops the server, as at a lease's end; ``"release"`` —
   the server goes on without its GPUs (the spawner keeps it running; its server extension
   shuts down the kernels that held the GPUs and starts new ones with no device visible:
   server/lease_release.py). ``"release"`` applies only to leases whose spawner said it can
   (``notebookServer.goesOnWithoutGpus`` in the SubmitRequest: local process spawners); a
   KubeSpawner pod cannot give an extended resource back while it runs, so its server stops.

**GPU-hours reclaimed** of one release = the lease's GPU-equivalents (a MIG slice as its share of
the GPU) × the time from the release to the lease's scheduled end (``startedAt`` +
``maxRuntimeSeconds``, its maximum lease time): the GPU time the idle server would have held at
most, now free for other work. A lease without a maximum lease time counts 0. Costs' teams report
(``idleReclaimedGpuHours``) and Prometheus (``gpuqueue_idle_reclaimed_gpu_hours``) sum it from the
ledger (``Ledger.idle_reclaims``).

**Activity** is a kernel executing code, terminal input, or (where NVML answers) GPU use at or
above ``utilizationBelowPercent``. An open JupyterLab tab is not: its polling of the server's REST
API (``/api/kernels``, ``/api/sessions``, ``/api/contents``, the queue panel's own requests) moves
the Hub's ``last_activity`` forward, so a tab forgotten overnight would keep its GPU if that
counted. It comes from two places:

- **The notebook server's own report** (preferred). A server in hub-client mode on a lease runs
  :class:`jupyter_gpuqueue.server.activity.ActivityReporter`: every
  ``$GPUQUEUE_ACTIVITY_INTERVAL`` seconds (30 by default) and at once when a kernel starts
  executing, it sends ``POST workloads/{ns}/{name}/activity`` ``{"busy", "idleSeconds"}``
  (:func:`parse_activity_report`) as the lease's owner. :meth:`IdleReclaim.report` keeps the
  latest per lease: ``busy`` counts as activity *now*; otherwise the last activity is the
  service's receive time minus ``idleSeconds`` (a duration, so that the two machines' clocks need
  not agree). Once a lease's server has reported (``run.idle.serverReports``, kept across
  restarts), only its reports count for it: with none fresher than ``stale_after`` (the server or
  the service restarted, the network broke) nothing is warned or released.
- **The Hub** (the fallback, for servers that never report: KubeSpawner pods without the
  extension, another client's leases): an *activity source* (the seam tests replace), an async
  callable given the owners of the running leases and answering ``{user: last activity}``
  (seconds since the epoch; absent: unknown), or ``{user: {server name: last activity}}`` per
  notebook server ("" the default server; JupyterHub's named servers). :class:`HubActivity` reads
  it from the JupyterHub API (the users' servers' ``last_activity``: jupyterhub-singleuser reports
  kernel executions and *every API request*, open tabs included, every
  ``JUPYTERHUB_ACTIVITY_INTERVAL``, 300 s by default; the service's token needs
  ``read:users:activity`` and ``read:servers``). It is read every ``poll_interval`` seconds off
  the scheduling pass (tornado's AsyncHTTPClient, never blocking the loop). Nothing is warned or
  released while the activity is unknown or older than ``stale_after`` seconds (the hub was
  unreachable, the service just restarted): no lease is reclaimed on stale information. A lease
  that names its notebook server (``notebookServer.name``, hub/lease.py) counts that server's
  activity; one that names none, or whose server the source does not report, counts the most
  recent activity of any of its owner's servers.

**Policy** per team (namespace): ``{"idleTimeoutSeconds": int ≥ minimum_timeout or null (off),
"warnSeconds": int, "maxKeeps": int, "utilizationBelowPercent": number or null (no GPU check),
"onIdle": "stop" | "release"}``,
set by admins (``PUT admin/idle-policy/{namespace}``, audited, stored in the ledger's settings
table under ``idlePolicy/<namespace>``); teams without one follow ``default_policy``
(``c.GpuQueueApp.idle_policy``; off unless set).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Optional
from urllib.parse import quote

from ..errors import Conflict, Forbidden, NotFound, ValidationError
from .states import RUNNING, is_lease

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..ledger import Ledger
    from .billing import Billing
    from .costs import Costs
    from .events import EventHub
    from .live import LiveConfig, LiveState

IDLE_RECLAIMED = "IdleReclaimed"
"""The reason (and ``live.stopping`` marker) of a lease released as idle."""

SETTING_PREFIX = "idlePolicy/"

POLICY_FIELDS = ("idleTimeoutSeconds", "warnSeconds", "maxKeeps", "utilizationBelowPercent", "onIdle")
DEFAULT_POLICY = {"idleTimeoutSeconds": None, "warnSeconds": 600, "maxKeeps": 3, "utilizationBelowPercent": 5,
                  "onIdle": "stop"}
ON_IDLE = ("stop", "release")
"""``onIdle``: stop the notebook server (as at a lease's end), or let it go on without its GPUs."""
MINIMUM_TIMEOUT_SECONDS = 300
REPORT_FIELDS = ("busy", "idleSeconds")

ActivitySource = Callable[[list[str]], Awaitable[dict[str, Any]]]


def _int_field(data: dict, name: str, lo: int, hi: int) -> int:
    v = data[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise ValidationError(f"must be a whole number of {'seconds' if 'Seconds' in name else 'times'}, got {v!r}", name)
    v = int(v)
    if not lo <= v <= hi:
        raise ValidationError(f"must be between {lo} and {hi}, got {v}", name)
    return v


def parse_policy(data: Any, *, base: Optional[dict] = None, minimum_timeout: int = MINIMUM_TIMEOUT_SECONDS) -> dict:
    """A validated policy from ``data`` (a JSON object; fields it leaves out come from ``base``,
    else :data:`DEFAULT_POLICY`). ValidationError names the field and the reason; nothing else is
    accepted."""
    if not isinstance(data, dict):
        raise ValidationError(f"must be a JSON object, got {type(data).__name__}", "body")
    unknown = sorted(set(data) - set(POLICY_FIELDS))
    if unknown:
        raise ValidationError(f"unknown field; expected some of {', '.join(POLICY_FIELDS)}", unknown[0])
    merged = {**DEFAULT_POLICY, **(base or {}), **data}
    out: dict = {}
    if merged["idleTimeoutSeconds"] is None:
        out["idleTimeoutSeconds"] = None
    else:
        out["idleTimeoutSeconds"] = _int_field(merged, "idleTimeoutSeconds", int(minimum_timeout), 30 * 86400)
    out["warnSeconds"] = _int_field(merged, "warnSeconds", 1, 86400)
    out["maxKeeps"] = _int_field(merged, "maxKeeps", 0, 1000)
    u = merged["utilizationBelowPercent"]
    if u is not None:
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not math.isfinite(u) or not 1 <= u <= 100:
            raise ValidationError(f"must be a percentage from 1 to 100, or null (no GPU check), got {u!r}",
                                  "utilizationBelowPercent")
        u = float(u) if not float(u).is_integer() else int(u)
    out["utilizationBelowPercent"] = u
    if merged["onIdle"] not in ON_IDLE:
        raise ValidationError(f"must be 'stop' (the notebook server stops) or 'release' (it goes on without its "
                              f"GPUs), got {merged['onIdle']!r}", "onIdle")
    out["onIdle"] = merged["onIdle"]
    return out


def notebook_server(rec: dict) -> Optional[dict]:
    """The ``notebookServer`` a lease's spawner gave (``{"name", "goesOnWithoutGpus"}``), None when
    it gave none (a lease submitted before servers were named, or by another client)."""
    ns = rec["spec"].get("notebookServer")
    return ns if isinstance(ns, dict) else None


def idle_action(rec: dict, policy: dict) -> str:
    """What an idle release does to ``rec``'s notebook server: the policy's ``onIdle``, except that
    ``"release"`` needs a spawner that can keep the server running without its GPUs
    (``notebookServer.goesOnWithoutGpus``; not KubeSpawner): otherwise ``"stop"``."""
    if policy.get("onIdle") == "release" and (notebook_server(rec) or {}).get("goesOnWithoutGpus"):
        return "release"
    return "stop"


def parse_activity_report(data: Any) -> dict:
    """A notebook server's activity report, validated: ``{"busy": bool, "idleSeconds": number ≥ 0
    or null}``. ``busy``: a kernel of the server is executing code now; ``idleSeconds``: seconds
    since the server's last activity (a kernel's execution ended, terminal input), null when it
    had none since it started. ValidationError names the field and the reason."""
    if not isinstance(data, dict):
        raise ValidationError(f"must be a JSON object, got {type(data).__name__}", "body")
    unknown = sorted(set(data) - set(REPORT_FIELDS))
    if unknown:
        raise ValidationError(f"unknown field; expected {', '.join(REPORT_FIELDS)}", unknown[0])
    if not isinstance(data.get("busy"), bool):
        raise ValidationError(f"must be true or false (a kernel is executing now), got {data.get('busy')!r}", "busy")
    idle = data.get("idleSeconds")
    if idle is not None and (isinstance(idle, bool) or not isinstance(idle, (int, float))
                             or not math.isfinite(idle) or not 0 <= idle <= 366 * 86400):
        raise ValidationError(f"must be seconds from 0 to 31622400 since the last activity, or null (none "
                              f"since the server started), got {idle!r}", "idleSeconds")
    return {"busy": data["busy"], "idleSeconds": None if idle is None else float(idle)}


def parse_timestamp(text: Any) -> Optional[float]:
    """JupyterHub's ISO 8601 time (``2026-11-03T10:00:00.123456Z``) as seconds since the epoch;
    None for None or text that is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class HubActivity:
    """The activity source of the hub service: ``GET {api_url}users/{name}`` for each owner, the
    ``last_activity`` of each of the user's servers (``{server name: seconds since the epoch}``),
    or the user's own ``last_activity`` when the token may not read servers. ``api_url``: ``$JUPYTERHUB_API_URL`` with a trailing ``/``;
    ``token``: the service's ``$JUPYTERHUB_API_TOKEN`` (scopes ``read:users:activity``,
    ``read:servers``). A user the hub does not answer for is left out (unknown)."""

    def __init__(self, api_url: str, token: str, *, timeout: float = 10.0, log: Optional[logging.Logger] = None):
        self.api_url = api_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout
        self.log = log or logging.getLogger("jupyter_gpuqueue")
        self._warned_scope = False

    async def _one(self, user: str) -> Any:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        try:
            resp = await AsyncHTTPClient().fetch(
                f"{self.api_url}users/{quote(user, safe='')}",
                headers={"Authorization": f"token {self.token}", "Accept": "application/json"},
                request_timeout=self.timeout)
        except HTTPClientError as e:
            self.log.warning("gpuqueue: idle reclaim cannot read %s's activity from the hub: %s", user, e)
            return None
        except OSError as e:
            self.log.warning("gpuqueue: idle reclaim cannot reach the hub API at %s: %s", self.api_url, e)
            return None
        model = json.loads(resp.body or b"{}")
        servers = model.get("servers")
        if isinstance(servers, dict) and servers:
            times = {name: parse_timestamp(s.get("last_activity")) for name, s in servers.items()
                     if isinstance(s, dict)}
            times = {name: t for name, t in times.items() if t is not None}
            if times:
                return times
        elif servers is None and not self._warned_scope:
            self._warned_scope = True
            self.log.warning("gpuqueue: the hub does not show users' servers to the queue service; give its "
                             "role the scope read:servers (the user's last activity is used instead)")
        return parse_timestamp(model.get("last_activity"))

    async def __call__(self, users: list[str]) -> dict[str, Any]:
        results = await asyncio.gather(*(self._one(u) for u in users))
        return {u: t for u, t in zip(users, results) if t is not None}


class ServerReports:
    """The notebook servers' own activity reports (:meth:`IdleReclaim.report`), per lease uid:
    ``by_uid[uid] = (a kernel executing, last activity or None, received at)``, seconds by the
    service's clock."""

    def __init__(self):
        self.by_uid: dict[str, tuple[bool, Optional[float], float]] = {}

    def take(self, uid: str, report: dict, now: float) -> tuple[Optional[float], bool]:
        """Keep ``report`` (:func:`parse_activity_report`) received ``now``: (its last activity,
        whether ``busy`` changed or it is the lease's first report)."""
        last = None if report["idleSeconds"] is None else now - report["idleSeconds"]
        before = self.by_uid.get(uid)
        self.by_uid[uid] = (report["busy"], last, now)
        return last, before is None or before[0] != report["busy"]

    def since(self, uid: str, floor: float, now: float, stale_after: float) -> Optional[float]:
        """Since when the lease counts as idle by its server's reports (``now`` while a kernel
        executes; never before ``floor``), None when none is fresher than ``stale_after``."""
        reported = self.by_uid.get(uid)
        if reported is None or now - reported[2] > stale_after:
            return None
        busy, last, _at = reported
        return now if busy else max(floor, last if last is not None else 0.0)

    def keep_only(self, uids: set) -> None:
        """Forget the reports of leases that no longer run."""
        for uid in [u for u in self.by_uid if u not in uids]:
            del self.by_uid[uid]


class IdleReclaim:
    """See the module docstring.

    Collaborators: ``conf`` (clock, prices), ``live`` (records, what is being stopped), the
    ``ledger`` (policies, run records), the ``backend`` (releases the lease), ``billing`` (a
    lease's GPU-equivalents), ``costs`` (whether NVML answers), ``events`` and ``wake``.
    Settings: ``default_policy``, ``minimum_timeout``, ``activity_source`` (None: off; the hub
    service sets :class:`HubActivity`), ``poll_interval`` and ``stale_after`` (seconds). The
    servers' own reports come in through :meth:`report`."""

    def __init__(self, conf: "LiveConfig", live: "LiveState", ledger: "Ledger", backend: "Backend",
                 billing: "Billing", costs: "Costs", events: "EventHub", wake: Callable[[], None],
                 log: logging.Logger):
        self.conf = conf
        self.live = live
        self.ledger = ledger
        self.backend = backend
        self.billing = billing
        self.costs = costs
        self.events = events
        self.wake = wake
        self.log = log
        self.default_policy: dict = dict(DEFAULT_POLICY)
        self.minimum_timeout = MINIMUM_TIMEOUT_SECONDS
        self.activity_source: Optional[ActivitySource] = None
        self.poll_interval = 30.0
        self.stale_after: Optional[float] = None  # None: 3 × poll_interval, at least 90 s
        # user -> (last activity of any server, read at, {server name: last activity})
        self._activity: dict[str, tuple[float, float, dict[str, float]]] = {}
        self._busy: dict[str, tuple[Optional[float], float]] = {}  # uid -> (last busy sample, checked at)
        self.reports = ServerReports()  # the servers' own activity
        self._policies: Optional[dict[str, dict]] = None  # namespace -> stored policy (cache)
        self._refreshing = False
        self._refreshed_mono = -math.inf
        self._checked_at = -math.inf

    # -- policies -----------------------------------------------------------------------------------

    def configure(self, default_policy: Optional[dict] = None, *, minimum_timeout: Optional[int] = None) -> None:
        """The default policy (``c.GpuQueueApp.idle_policy``; validated, ValidationError naming the
        field) and the smallest ``idleTimeoutSeconds`` admins may set."""
        if minimum_timeout is not None:
            if isinstance(minimum_timeout, bool) or not isinstance(minimum_timeout, int) or minimum_timeout < 1:
                raise ValidationError(f"must be a whole number of seconds ≥ 1, got {minimum_timeout!r}",
                                      "idle_timeout_minimum_seconds")
            self.minimum_timeout = minimum_timeout
        if default_policy is not None:
            self.default_policy = parse_policy(default_policy, minimum_timeout=self.minimum_timeout)

    def stored_policies(self) -> dict[str, dict]:
        if self._policies is None:
            rows = self.ledger.settings_with_prefix(SETTING_PREFIX)
            self._policies = {k[len(SETTING_PREFIX):]: {**r["value"], "updatedAt": r["updatedAt"]}
                              for k, r in rows.items() if isinstance(r["value"], dict)}
        return self._policies

    def policy(self, namespace: str) -> dict:
        """The policy in force for ``namespace`` (its stored one, else the default)."""
        stored = self.stored_policies().get(namespace)
        if stored is None:
            return self.default_policy
        return {k: stored.get(k, self.default_policy[k]) for k in POLICY_FIELDS}

    def teams(self) -> list[str]:
        return sorted({lq.namespace for lq in self.conf.config.local_queues.values()})

    def policies_view(self) -> dict:
        """``{"default", "minimumTimeoutSeconds", "teams": [{"namespace", "policy", "stored",
        "updatedAt", "updatedBy"}]}`` (every team of the configuration)."""
        stored = self.stored_policies()
        teams = []
        for ns in sorted(set(self.teams()) | set(stored)):
            s = stored.get(ns)
            teams.append({"namespace": ns, "policy": self.policy(ns), "stored": s is not None,
                          "updatedAt": s.get("updatedAt") if s else None, "updatedBy": s.get("updatedBy") if s else None})
        return {"default": dict(self.default_policy), "minimumTimeoutSeconds": self.minimum_timeout, "teams": teams}

    def _check_team(self, namespace: str) -> None:
        if namespace not in self.teams():
            raise NotFound(f"no team (LocalQueue namespace) {namespace!r}; teams: {', '.join(self.teams())}",
                           "namespace")

    def set_policy(self, namespace: str, data: Any, *, actor: str) -> dict:
        """Admin: validate and store ``namespace``'s policy (audited); answers :meth:`policies_view`.
        NotFound naming ``namespace`` for a namespace that is no team; ValidationError naming the
        field (nothing stored)."""
        self._check_team(namespace)
        policy = parse_policy(data, base=self.default_policy, minimum_timeout=self.minimum_timeout)
        before = self.policy(namespace)
        now = self.conf.clock()
        with self.ledger.transaction():
            self.ledger.put_setting(SETTING_PREFIX + namespace, {**policy, "updatedBy": actor}, at=now)
            self.ledger.add_audit(actor=actor, operation="set-idle-policy", target=f"namespace/{namespace}",
                                  before=before, after=policy, at=now)
        self._policies = None
        self.policy_changed()
        return self.policies_view()

    def delete_policy(self, namespace: str, *, actor: str) -> dict:
        """Admin: forget ``namespace``'s stored policy (the default applies again; audited)."""
        self._check_team(namespace)
        before = self.policy(namespace)
        now = self.conf.clock()
        with self.ledger.transaction():
            if self.ledger.delete_setting(SETTING_PREFIX + namespace):
                self.ledger.add_audit(actor=actor, operation="delete-idle-policy", target=f"namespace/{namespace}",
                                      before=before, after=dict(self.default_policy), at=now)
        self._policies = None
        self.policy_changed()
        return self.policies_view()

    def policy_changed(self) -> None:
        """Re-check the running leases now (a policy turned off ends their warnings)."""
        self._checked_at = -math.inf
        self.wake()

    # -- activity -----------------------------------------------------------------------------------

    def running_leases(self) -> list[dict]:
        out = []
        for uid in self.backend.running():  # O(running), not O(every tracked workload)
            rec = self.live.records.get(uid)
            if rec is not None and rec["state"] == RUNNING and is_lease(rec):
                out.append(rec)
        return out

    async def refresh(self) -> None:
        """Read from the Hub the activity of the owners of the running leases whose team's policy is
        on and whose servers do not report their own."""
        source = self.activity_source
        if source is None:
            return
        self._refreshing = True
        try:
            users = sorted({r["owner"] for r in self.running_leases()  # servers that report: not asked
                            if self.policy(r["namespace"])["idleTimeoutSeconds"] is not None
                            and not self._idle_state(r).get("serverReports")})
            if not users:
                return
            found = await source(users)
        except Exception:  # logged; the leases are not reclaimed on stale information
            self.log.warning("gpuqueue: idle reclaim could not read activity", exc_info=True)
            return
        finally:
            self._refreshing = False
        now = self.conf.clock()
        for user, at in found.items():
            self.note_activity(user, at, now)
        self._checked_at = -math.inf
        self.wake()

    def note_activity(self, user: str, at: Any, read_at: Optional[float] = None) -> None:
        """``user``'s last activity (seconds since the epoch; or ``{server name: seconds}`` per
        notebook server) as read at ``read_at`` (now)."""
        read_at = self.conf.clock() if read_at is None else read_at
        if isinstance(at, dict):
            per_server = {str(k): float(v) for k, v in at.items() if v is not None}
            if per_server:
                self._activity[user] = (max(per_server.values()), read_at, per_server)
        elif at is not None:
            self._activity[user] = (float(at), read_at, {})

    def report(self, namespace: str, name: str, *, user: str, data: Any) -> dict:
        """A notebook server's report of its own activity (:func:`parse_activity_report`) for its
        lease ``namespace/name``, sent as the lease's owner. NotFound; Forbidden (not the owner);
        ValidationError naming the field; Conflict when it is no running notebook lease (the server
        stops reporting then). Nothing is stored on an error. Answers ``{"busy", "lastActivity"}``
        as the service took it (seconds since the epoch by the service's clock, or null)."""
        rec = self.live.record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"workload {namespace}/{name} belongs to {rec['owner']}", "name")
        report = parse_activity_report(data)
        if not is_lease(rec) or rec["state"] != RUNNING or rec["uid"] in self.live.stopping:
            raise Conflict(f"{namespace}/{name} is not a running notebook lease", "name")
        last, changed = self.reports.take(rec["uid"], report, self.conf.clock())
        idle = self._idle_state(rec)
        if not idle.get("serverReports"):  # from now on only this server's reports count for it
            idle["serverReports"] = True
            self._save_idle(rec, idle)
        if changed or idle.get("deadline") is not None:
            self._checked_at = -math.inf  # a warning that this activity ends, ends now
            self.wake()
        return {"busy": report["busy"], "lastActivity": last}

    def _schedule_refresh(self) -> None:
        if self.activity_source is None or self._refreshing:
            return
        mono = time.monotonic()
        if mono - self._refreshed_mono < self.poll_interval:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # a test ticking without a loop calls refresh() itself
        self._refreshed_mono = mono
        self._refreshing = True
        loop.create_task(self.refresh(), name="gpuqueue-idle-activity")

    def _stale_after(self) -> float:
        return self.stale_after if self.stale_after is not None else max(90.0, 3 * self.poll_interval)

    def _busy_since(self, rec: dict, since: float, threshold: Optional[float], now: float) -> Optional[float]:
        """The time of the lease's last NVML sample at or above ``threshold`` % after ``since``
        (None: none, or NVML does not answer); looked up at most once per sampling interval."""
        if threshold is None or self.costs.utilization_sampler is None:
            return None
        uid = rec["uid"]
        cached = self._busy.get(uid)
        if cached is not None and now - cached[1] < self.costs.utilization_interval:
            return cached[0] if cached[0] is not None and cached[0] > since else None
        busy = [s["at"] for s in self.ledger.utilization_samples(uid, limit=2000)
                if s["at"] > since and s["percent"] >= threshold]
        at = max(busy) if busy else None
        self._busy[uid] = (at, now)
        return at

    # -- the pass -----------------------------------------------------------------------------------

    def idle_tick(self, now: float) -> None:
        """Called by the service's tick: schedule an activity read when due; at most once a
        second (and after any change), start, end or act on the warnings."""
        self._schedule_refresh()
        if now - self._checked_at < 1.0:
            return
        self._checked_at = now
        leases = self.running_leases()
        if len(self.reports.by_uid) > len(leases):
            self.reports.keep_only({r["uid"] for r in leases})
        for rec in leases:
            if rec["uid"] in self.live.stopping:
                continue  # being released already (preempted, cancelled, its time is over)
            if (rec.get("run") or {}).get("idleReclaimed"):
                # released before a restart that came before its end was recorded: release it again
                self.live.stopping[rec["uid"]] = IDLE_RECLAIMED
                self.backend.stop(rec["uid"], rec.get("message") or "idle notebook reclaim", 0.0)
                self.wake()
                continue
            self._check(rec, now)

    def _idle_state(self, rec: dict) -> dict:
        return dict((rec.get("run") or {}).get("idle") or {})

    def _save_idle(self, rec: dict, idle: dict, **fields) -> None:
        run = {**(rec.get("run") or {}), "idle": idle}
        self.ledger.update_workload(rec["uid"], run=run, **fields)
        rec["run"] = run
        rec.update(fields)

    def idle_since(self, rec: dict, idle: dict, now: Optional[float] = None) -> Optional[float]:
        """Since when the lease counts as idle by what is known (start, keep, activity; ``now``
        while its server reports a kernel executing), None when its activity is unknown or stale
        (module docstring: the server's reports where it reports, else the Hub's)."""
        now = self.conf.clock() if now is None else now
        floor = max(float(rec.get("started_at") or 0.0), float(idle.get("keptAt") or 0.0))
        if rec["uid"] in self.reports.by_uid or idle.get("serverReports"):
            return self.reports.since(rec["uid"], floor, now, self._stale_after())
        act = self._activity.get(rec["owner"])
        if act is None or now - act[1] > self._stale_after():
            return None
        server = (notebook_server(rec) or {}).get("name")
        last = act[2].get(server, act[0]) if isinstance(server, str) else act[0]
        return max(floor, last)

    def _check(self, rec: dict, now: float) -> None:
        policy = self.policy(rec["namespace"])
        idle = self._idle_state(rec)
        warned = idle.get("deadline") is not None
        timeout = policy["idleTimeoutSeconds"]
        if timeout is None:
            if warned:  # the policy was turned off meanwhile
                self._end_warning(rec, idle)
            return
        since = self.idle_since(rec, idle, now)
        if since is None:
            return  # unknown or stale activity: never warn or release on it
        busy = self._busy_since(rec, since, policy["utilizationBelowPercent"], now) if now - since >= timeout else None
        if busy is not None:
            since = busy
        if warned and (since > float(idle["warnedAt"]) or since >= now):  # since == now: a kernel executes
            self._end_warning(rec, idle)  # activity (or GPU work) after the warning began
            return
        if not warned:
            if now - since >= timeout:
                idle.update(warnedAt=now, deadline=now + policy["warnSeconds"], idleSince=since)
                self._save_idle(rec, idle)
                self.log.info("gpuqueue: notebook lease %s/%s of %s idle since %.0f s: released at %.0f unless kept",
                              rec["namespace"], rec["name"], rec["owner"], now - since, idle["deadline"])
                self.events.emit_workload(rec["uid"])
            return
        if now >= float(idle["deadline"]):
            self.reclaim(rec, now, idle, since)

    def _end_warning(self, rec: dict, idle: dict) -> None:
        for k in ("warnedAt", "deadline", "idleSince"):
            idle.pop(k, None)
        self._save_idle(rec, idle)
        self.events.emit_workload(rec["uid"])

    def gpu_equivalents(self, rec: dict) -> float:
        adm = rec.get("admission")
        if not adm:
            return 0.0
        return sum(self.conf.prices.gpu_equivalent(r, q) for _f, r, q in self.billing.billable_json(adm, rec["spec"]))

    def reclaimed_gpu_hours(self, rec: dict, at: float) -> float:
        """GPU-equivalents × hours from ``at`` to the lease's scheduled end (module docstring)."""
        limit = rec["spec"].get("maxRuntimeSeconds")
        started = rec.get("started_at")
        if not limit or not started:
            return 0.0
        return self.gpu_equivalents(rec) * max(0.0, float(started) + float(limit) - at) / 3600.0

    def reclaim(self, rec: dict, now: float, idle: dict, since: float) -> None:
        """Release the lease now (as at its end); its GPUs go to the next workload in this tick."""
        uid = rec["uid"]
        hours = self.reclaimed_gpu_hours(rec, now)
        minutes = max(0.0, now - since) / 60.0
        action = idle_action(rec, self.policy(rec["namespace"]))
        message = (f"released after {minutes:.0f} min without kernel execution or activity (idle notebook "
                   f"reclaim); {hours:.2f} GPU-hours freed for others")
        if action == "release":
            message += "; the notebook server goes on without GPUs"
        run = {**(rec.get("run") or {}), "idle": idle,
               "idleReclaimed": {"at": now, "gpuHours": round(hours, 6), "idleSince": since, "action": action}}
        self.ledger.update_workload(uid, run=run, message=message)
        rec.update(run=run, message=message)
        self.live.stopping[uid] = IDLE_RECLAIMED
        self.backend.stop(uid, message, 0.0)
        self.log.info("gpuqueue: idle notebook lease %s/%s of %s released (%.2f GPU-hours reclaimed; server: %s)",
                      rec["namespace"], rec["name"], rec["owner"], hours, action)
        self.events.emit_workload(uid)
        self.wake()  # reaped and rescheduled at once: the GPUs go to the next workload now

    # -- the owner's keep ---------------------------------------------------------------------------

    def keep(self, namespace: str, name: str, *, user: str) -> dict:
        """The owner keeps an idle-warned lease: the idle clock restarts (at most ``maxKeeps``
        times). NotFound; Forbidden (not the owner); Conflict when no warning runs or no keep is
        left. Returns the idle fields after the keep."""
        rec = self.live.record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"workload {namespace}/{name} belongs to {rec['owner']}", "name")
        if not is_lease(rec) or rec["state"] != RUNNING or rec["uid"] in self.live.stopping:
            raise Conflict(f"{namespace}/{name} is not a running notebook lease", "name")
        idle = self._idle_state(rec)
        if idle.get("deadline") is None:
            raise Conflict(f"no idle warning is running for {namespace}/{name}", "name")
        policy = self.policy(namespace)
        used = int(idle.get("keepsUsed") or 0)
        if used >= policy["maxKeeps"]:
            raise Conflict(f"no keeps left for {namespace}/{name}: {used} of {policy['maxKeeps']} used", "name")
        now = self.conf.clock()
        for k in ("warnedAt", "deadline", "idleSince"):
            idle.pop(k, None)
        idle.update(keepsUsed=used + 1, keptAt=now)
        self._save_idle(rec, idle)
        self.log.info("gpuqueue: %s kept the GPU of idle lease %s/%s (%d of %d keeps used)",
                      user, namespace, name, used + 1, policy["maxKeeps"])
        self.events.emit_workload(rec["uid"])
        return self.fields(rec)

    # -- the view's fields --------------------------------------------------------------------------

    def fields(self, rec: dict) -> dict:
        """The idle fields of a Workload view (docs/rest-api.md), null where they do not apply:
        ``idleDeadline`` (while a warning runs), ``idleKeepsLeft`` and ``idleAction`` (a running
        lease of a team whose policy is on; ``idleAction``: what the release will do to the
        notebook server, :func:`idle_action`), ``idleSince`` (while a warning runs). A lease
        released as idle keeps ``idleAction`` (what was done) and ``idleSince``."""
        out = {"idleDeadline": None, "idleKeepsLeft": None, "idleAction": None, "idleSince": None}
        if not is_lease(rec):
            return out
        if rec["state"] != RUNNING:
            done = (rec.get("run") or {}).get("idleReclaimed")
            if isinstance(done, dict):
                out.update(idleAction=done.get("action") or "stop", idleSince=done.get("idleSince"))
            return out
        policy = self.policy(rec["namespace"])
        if policy["idleTimeoutSeconds"] is None:
            return out
        idle = self._idle_state(rec)
        out.update(idleDeadline=idle.get("deadline"), idleSince=idle.get("idleSince"),
                   idleKeepsLeft=max(0, policy["maxKeeps"] - int(idle.get("keepsUsed") or 0)),
                   idleAction=idle_action(rec, policy))
        return out

    # -- reports ------------------------------------------------------------------------------------

    def reclaimed_by_team(self, since: Optional[float] = None, until: Optional[float] = None,
                          namespaces: Iterable[str] = ()) -> dict[str, dict]:
        """:func:`ledger.reports.idle_reclaimed_by_team` of the ledger's reclaims in the period."""
        from ..ledger import reports

        return reports.idle_reclaimed_by_team(self.ledger.idle_reclaims(since, until), namespaces)
