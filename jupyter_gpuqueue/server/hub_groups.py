"""Teams from JupyterHub groups: the groups of each user, as the Hub reports them.

Every token the Hub accepts may read its owner's own name and groups (JupyterHub's "identify"
scopes ``read:users:name!user`` and ``read:users:groups!user``), so the Hub user model that
jupyter_server's JupyterHub identity provider resolves for each request
(``current_user.hub_user``) always carries ``"groups"``: a list of group names. The service
remembers the latest list per user; :class:`~jupyter_gpuqueue.service.QueueService` maps it to
LocalQueues with ``c.GpuQueueApp.group_local_queues``.

Freshness: the identity provider caches a token's user model for ``HubAuth.cache_max_age``
(300 s by default), so a group change on the Hub takes effect within that time.
"""

from __future__ import annotations

from typing import Any


class HubGroups:
    """User name -> sorted JupyterHub group names, learnt from Hub user models.

    Callable: ``groups(user)`` returns the groups last seen for ``user`` (``[]`` for a user not
    seen yet, who then has no team). Used on the event-loop thread only."""

    def __init__(self) -> None:
        self._groups: dict[str, list[str]] = {}

    def remember(self, hub_user: Any) -> None:
        """Record ``hub_user["groups"]`` for ``hub_user["name"]``; a model without a name or
        without a ``"groups"`` list (a service's model, an old Hub) changes nothing."""
        if not isinstance(hub_user, dict):
            return
        name = hub_user.get("name")
        groups = hub_user.get("groups")
        if not name or not isinstance(groups, list):
            return
        self._groups[str(name)] = sorted(str(g) for g in groups)

    def __call__(self, user: str) -> list[str]:
        return list(self._groups.get(user, ()))
