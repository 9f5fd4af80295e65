"""One coroutine of an object, run as an asyncio task beside the server: started once, cancelled
at stop, a failure logged (never raised into the event loop). Used by the server's lease watch
(lease_release.py) and its activity reporter (activity.py)."""

from __future__ import annotations

import asyncio
from typing import Optional


class BackgroundLoop:
    """Subclasses define ``async run()``, ``log`` and ``failure_message``; ``_ended()`` runs when
    the loop ends or is stopped (may run twice: keep it idempotent)."""

    failure_message = "jupyter_gpuqueue: a background task failed"
    _task: Optional[asyncio.Task] = None

    async def run(self) -> None:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def _ended(self) -> None:
        """Called when the loop ends, fails or is stopped."""

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run_logged())

    async def _run_logged(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # pragma: no cover - logged; the server goes on
            self.log.exception(self.failure_message)
        finally:
            self._ended()

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        self._ended()
