"""Maximum run time per team: a cap admins set on ``maxRuntimeSeconds`` (issue 34, item 10).

Kueue bounds a workload's run with its own ``maximumExecutionTimeSeconds`` and has no per-queue
cap; a shared GPU pool needs one all the same (a 999-day job was accepted, its preview
$19,420.56). So each team (a LocalQueue's namespace) may have a cap, in seconds:

- the default of every team comes from ``c.GpuQueueApp.max_runtime_caps`` (``{"team-a": 86400,
  "*": 604800}``; ``"*"`` is every team without its own entry; none: no cap);
- an admin's cap (``PUT admin/runtime-caps/{namespace}`` ``{"maxRuntimeSeconds": 86400}``, or
  ``null`` for no cap) is stored in the ledger's settings (key ``runtime-cap:{namespace}``),
  audited, and wins over the configured one; ``DELETE`` drops it.

A submission (form, manifest, notebook lease) of that team asking for more is refused with 400
naming its field (``maxRuntimeSeconds``, ``maxRuntime``, or the manifest's) and the cap, and
changes nothing; one asking for none gets the default run time, at most the cap. The cap applies
to new submissions: workloads already queued or running keep the maximum they were accepted with.
Lease extensions (service/lease_extension.py) may not take a lease past it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from ..errors import NotFound, ValidationError
from .states import MAX_RUNTIME_LIMIT

SETTING_PREFIX = "runtime-cap:"
EVERY_TEAM = "*"


def parse_cap(value: Any, field: str = "maxRuntimeSeconds") -> Optional[int]:
    """A cap in whole seconds (1 .. MAX_RUNTIME_LIMIT), or None for no cap. ValidationError
    naming ``field`` for anything else (booleans, fractions, strings, ≤ 0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValidationError(f"must be a whole number of seconds or null (no cap), got {value!r}", field)
    if value != int(value) or not 1 <= value <= MAX_RUNTIME_LIMIT:
        raise ValidationError(f"must be a whole number of seconds from 1 to {MAX_RUNTIME_LIMIT}, got {value!r}",
                              field)
    return int(value)


def human(seconds: int) -> str:
    """``604800`` → "7 d", ``90000`` → "1 d 1 h", ``5400`` → "1 h 30 min", ``45`` → "45 s"."""
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{d} d" if d else "", f"{h} h" if h else "", f"{m} min" if m else "", f"{s} s" if s and not d else ""]
    return " ".join(p for p in parts if p) or "0 s"


class RuntimeCaps:
    """The cap in force per team, and its admin API.

    Collaborators: the ``ledger`` (stored caps, audit), ``teams`` (a callable answering the
    teams of the configuration), ``clock`` (seconds since the epoch)."""

    def __init__(self, ledger, teams: Callable[[], Iterable[str]], clock: Callable[[], float]):
        self.ledger = ledger
        self.teams = teams
        self.clock = clock
        self.configured: dict[str, int] = {}
        self._stored: Optional[dict[str, dict]] = None

    def configure(self, caps: dict) -> None:
        """``c.GpuQueueApp.max_runtime_caps``: ``{namespace or "*": seconds}``. ValidationError
        naming ``max_runtime_caps[key]``."""
        if not isinstance(caps, dict):
            raise ValidationError("must be a dict of namespace (or \"*\") to seconds", "max_runtime_caps")
        out = {}
        for key, value in caps.items():
            cap = parse_cap(value, f"max_runtime_caps[{key!r}]")
            if cap is not None:
                out[str(key)] = cap
        self.configured = out

    def stored(self) -> dict[str, dict]:
        if self._stored is None:
            rows = self.ledger.settings_with_prefix(SETTING_PREFIX)
            self._stored = {k[len(SETTING_PREFIX):]: {**r["value"], "updatedAt": r["updatedAt"]}
                            for k, r in rows.items() if isinstance(r["value"], dict)}
        return self._stored

    def configured_cap(self, namespace: str) -> Optional[int]:
        return self.configured.get(namespace, self.configured.get(EVERY_TEAM))

    def cap(self, namespace: str) -> Optional[int]:
        """The cap of ``namespace`` in seconds (the admin's, else the configured one), None for none."""
        s = self.stored().get(namespace)
        if s is not None:
            return s.get("maxRuntimeSeconds")
        return self.configured_cap(namespace)

    def check(self, namespace: str, seconds: int, field: str, given: Any = None) -> None:
        """ValidationError naming ``field`` when ``seconds`` is above the cap of ``namespace``."""
        cap = self.cap(namespace)
        if cap is not None and seconds > cap:
            asked = given if isinstance(given, str) and given.strip() else human(seconds)
            raise ValidationError(
                f"must be at most {human(cap)} ({cap} s), the maximum run time an admin set for team "
                f"{namespace}; got {asked} ({seconds} s)", field)

    # -- admin --------------------------------------------------------------------------------------

    def view(self) -> dict:
        """``{"teams": [{"namespace", "maxRuntimeSeconds" (null: no cap), "configuredSeconds",
        "stored", "updatedAt", "updatedBy"}]}`` for every team of the configuration."""
        stored = self.stored()
        teams = []
        for ns in sorted(set(self.teams()) | set(stored)):
            s = stored.get(ns)
            teams.append({"namespace": ns, "maxRuntimeSeconds": self.cap(ns),
                          "configuredSeconds": self.configured_cap(ns), "stored": s is not None,
                          "updatedAt": s.get("updatedAt") if s else None,
                          "updatedBy": s.get("updatedBy") if s else None})
        return {"teams": teams}

    def _check_team(self, namespace: str) -> None:
        teams = sorted(self.teams())
        if namespace not in teams:
            raise NotFound(f"no team (LocalQueue namespace) {namespace!r}; teams: {', '.join(teams)}", "namespace")

    def set_cap(self, namespace: str, data: Any, *, actor: str) -> dict:
        """Admin: store ``namespace``'s cap from ``{"maxRuntimeSeconds": seconds | null}``
        (audited); answers :meth:`view`. NotFound naming ``namespace``; ValidationError naming
        the field (nothing stored)."""
        self._check_team(namespace)
        if not isinstance(data, dict):
            raise ValidationError("the request body must be a JSON object", "body")
        extra = sorted(set(data) - {"maxRuntimeSeconds"})
        if extra:
            raise ValidationError("unknown field; send {\"maxRuntimeSeconds\": seconds or null}", extra[0])
        if "maxRuntimeSeconds" not in data:
            raise ValidationError("required (whole seconds, or null for no cap)", "maxRuntimeSeconds")
        cap = parse_cap(data["maxRuntimeSeconds"])
        before = self.cap(namespace)
        now = self.clock()
        with self.ledger.transaction():
            self.ledger.put_setting(SETTING_PREFIX + namespace, {"maxRuntimeSeconds": cap, "updatedBy": actor}, at=now)
            self.ledger.add_audit(actor=actor, operation="set-runtime-cap", target=f"namespace/{namespace}",
                                  before={"maxRuntimeSeconds": before}, after={"maxRuntimeSeconds": cap}, at=now)
        self._stored = None
        return self.view()

    def delete_cap(self, namespace: str, *, actor: str) -> dict:
        """Admin: forget ``namespace``'s stored cap (the configured one applies again; audited)."""
        self._check_team(namespace)
        before = self.cap(namespace)
        now = self.clock()
        with self.ledger.transaction():
            if self.ledger.delete_setting(SETTING_PREFIX + namespace):
                self.ledger.add_audit(actor=actor, operation="delete-runtime-cap", target=f"namespace/{namespace}",
                                      before={"maxRuntimeSeconds": before},
                                      after={"maxRuntimeSeconds": self.configured_cap(namespace)}, at=now)
        self._stored = None
        return self.view()


__all__ = ["RuntimeCaps", "parse_cap", "human", "SETTING_PREFIX"]
