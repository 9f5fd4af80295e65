"""Teams: which LocalQueues a user may submit to (``user_local_queues``, JupyterHub groups mapped to
LocalQueues with ``use_group_teams``), their default LocalQueue, and whose workloads they see
(``viewer``; the rule is :mod:`.visibility`'s)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from ..errors import Forbidden, ValidationError
from .visibility import VISIBILITY_MODES, Viewer

if TYPE_CHECKING:
    from .live import LiveConfig


class Teams:
    """Maps users to the LocalQueues they may submit to.

    Collaborators: ``conf`` (LiveConfig: the LocalQueues in force) and ``log``. Settings:
    ``user_local_queues`` (user -> ["namespace/name"], None: everyone may use every LocalQueue) and
    ``default_local_queue``, both as the service was built with them."""

    def __init__(self, conf: "LiveConfig", log: logging.Logger, *,
                 user_local_queues: Optional[dict[str, list[str]]] = None,
                 default_local_queue: Optional[str] = None):
        self.conf = conf
        self.log = log
        self.user_local_queues = user_local_queues
        self.default_local_queue_name = default_local_queue

    group_local_queues: Optional[dict[str, list[str]]] = None

    visibility = "team"
    """``team``: a user sees their own and their teams' workloads (:mod:`.visibility`); ``all``:
    every workload (``c.GpuQueueApp.workload_visibility``)."""

    groups_of: Optional[Callable[[str], Iterable[str]]] = None

    no_team_hint = "ask an admin to add you to a team of the GPU queue"  # no configuration names

    def use_group_teams(
        self,
        group_local_queues: dict[str, list[str]],
        groups_of: Callable[[str], Iterable[str]],
        *,
        hint: Optional[str] = None,
    ) -> None:
        """Map groups (e.g. JupyterHub groups) to LocalQueues: a user may submit to the LocalQueues
        of every group they are in (plus ``user_local_queues[user]``), the first being the default.

        ``group_local_queues``: group name -> ["namespace/name", ...]. ``groups_of(user)`` -> the
        user's group names (plain data; called on the event-loop thread, must not block). ``hint``:
        what a user in no mapped group should do, appended to the 403. Raises ValidationError
        (field ``group_local_queues[<group>]``) for a malformed mapping; a LocalQueue that is not
        (yet) configured is only logged, since the configuration can change live."""
        checked: dict[str, list[str]] = {}
        if not isinstance(group_local_queues, dict):
            raise ValidationError("must map group names to lists of LocalQueues", "group_local_queues")
        for group, queues in group_local_queues.items():
            field = f"group_local_queues[{group!r}]"
            if isinstance(queues, str) or not isinstance(queues, (list, tuple)):
                raise ValidationError("must be a list of 'namespace/name' LocalQueues", field)
            for q in queues:
                if not isinstance(q, str) or q.count("/") != 1 or "" in q.split("/"):
                    raise ValidationError(f"{q!r} is not 'namespace/name' of a LocalQueue", field)
                if q not in self.conf.config.local_queues:
                    self.log.warning("%s: LocalQueue %s is not configured (yet)", field, q)
            checked[str(group)] = list(queues)
        self.group_local_queues = checked
        self.groups_of = groups_of
        if hint:
            self.no_team_hint = hint

    def allowed_local_queues(self, user: str) -> list[str]:
        if self.user_local_queues is None and self.group_local_queues is None:
            return sorted(self.conf.config.local_queues)
        keys = list((self.user_local_queues or {}).get(user, []))
        if self.group_local_queues is not None and self.groups_of is not None:
            for group in self.groups_of(user):
                keys.extend(self.group_local_queues.get(group, []))
        return [lq for lq in dict.fromkeys(keys) if lq in self.conf.config.local_queues]

    def set_visibility(self, mode: str) -> None:
        """``team`` or ``all`` (see :attr:`visibility`); ValidationError (field ``workload_visibility``)."""
        if mode not in VISIBILITY_MODES:
            raise ValidationError(f"must be one of {', '.join(VISIBILITY_MODES)}, got {mode!r}", "workload_visibility")
        self.visibility = mode

    def viewer(self, user: str) -> Viewer:
        """What ``user`` (not a queue admin: admins see everything) sees: every workload where the
        visibility is ``all`` or no team mapping is configured, else their teams' (the namespaces of
        the LocalQueues they may submit to) and their own."""
        if self.visibility == "all" or (self.user_local_queues is None and self.group_local_queues is None):
            return Viewer(user)
        return Viewer(user, frozenset(lq.split("/", 1)[0] for lq in self.allowed_local_queues(user)))

    def default_local_queue(self, user: str) -> Optional[str]:
        allowed = self.allowed_local_queues(user)
        if self.default_local_queue_name in allowed:
            return self.default_local_queue_name
        return allowed[0] if allowed else None

    def resolve_local_queue(self, value, user: str) -> tuple[str, str]:
        if value in (None, ""):
            value = self.default_local_queue(user)
            if value is None:
                raise Forbidden(
                    f"user {user} is not a member of any team (no LocalQueue): {self.no_team_hint}", "localQueue"
                )
        if not isinstance(value, str) or value.count("/") != 1:
            raise ValidationError("must be 'namespace/name' of a LocalQueue", "localQueue")
        if value not in self.conf.config.local_queues:
            raise ValidationError(f"unknown LocalQueue {value}", "localQueue")
        if value not in self.allowed_local_queues(user):
            hint = "" if self.allowed_local_queues(user) else f": {self.no_team_hint}"
            raise Forbidden(f"user {user} may not submit to LocalQueue {value}{hint}", "localQueue")
        ns, name = value.split("/")
        return ns, name
