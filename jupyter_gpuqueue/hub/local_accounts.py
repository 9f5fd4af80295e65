"""Notebook servers on a machine shared by real people: each as its user's own OS account.

:class:`OwnAccountSpawner` is JupyterHub's LocalProcessSpawner (the server runs with the user's
uid, gid and groups, in the user's home) that refuses to start a server as root or as a system
account (below ``UID_MIN`` of /etc/login.defs), by the same rule as the queue's jobs
(backends/accounts.py, :meth:`Accounts.lookup`): no user code runs as root, whatever the
authenticator let in. :class:`QueuedOwnAccountSpawner` adds the queue's spawner mixin (GPU
servers wait in the shared queue as NotebookLease workloads). Used by the shared-machine recipe,
``jupyterhub_config/shared/`` (docs/shared-machine.md).
"""

from __future__ import annotations

from jupyterhub.spawner import LocalProcessSpawner

from ..backends.accounts import Accounts
from ..errors import Forbidden
from .spawner import GpuQueueSpawnerMixin


class OwnAccountSpawner(LocalProcessSpawner):
    """LocalProcessSpawner that never starts a server as root or a system account. ``start``
    raises RuntimeError naming the user and the reason (shown on the spawn page)."""

    def _check_account(self) -> None:
        try:
            Accounts("{username}").lookup(self.user.name)
        except Forbidden as e:
            raise RuntimeError(f"not starting a notebook server: {e}") from None

    async def start(self):
        self._check_account()
        return await super().start()


class QueuedOwnAccountSpawner(GpuQueueSpawnerMixin, OwnAccountSpawner):
    """:class:`OwnAccountSpawner` whose GPU servers wait in the shared GPU queue."""
