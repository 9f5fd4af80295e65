"""Logs: a job's output, from its local log file or, on a cluster, its Pod's log (read off the event
loop). Only the owner may read them."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Optional

from ..backends.base import RunInfo
from ..errors import Forbidden, ValidationError
from .states import FINISHED_STATES

if TYPE_CHECKING:
    from ..backends.base import Backend
    from .live import LiveState


class Logs:
    """Reads jobs' output for their owners.

    Collaborators: ``live`` (LiveState: the workload's record) and the ``backend`` (a cluster
    backend reads Pod logs). Setting: ``log_dir`` (local jobs' log files)."""

    def __init__(self, live: "LiveState", backend: "Backend", *, log_dir: str):
        self.live = live
        self.backend = backend
        self.log_dir = log_dir

    def log_path(self, rec: dict) -> str:
        return os.path.join(self.log_dir, rec["namespace"], f"{rec['name']}-{rec['uid'][:8]}.log")

    def read_log(self, namespace: str, name: str, *, user: str, offset: int = 0, limit: int = 1 << 20) -> dict:
        """The job's output from byte ``offset``, at most ``limit`` bytes (at most 4 MiB):
        ``{"text", "offset", "nextOffset", "eof", "size"}``. Only the owner may read it
        (Forbidden); ValidationError names ``offset`` / ``limit``. A local job's log file is read
        here; a Kubernetes job's Pod log is read from the API server (the backend's
        ``read_log``), which :meth:`read_log_async` does off the event loop."""
        rec, run, offset, limit = self.log_request(namespace, name, user, offset, limit)
        return self.log_answer(rec, offset, *self.read_log_bytes(run, rec["uid"], offset, limit))

    async def read_log_async(self, namespace: str, name: str, *, user: str, offset: int = 0,
                             limit: int = 1 << 20) -> dict:
        """:meth:`read_log` for the REST API: a Pod log is fetched in a worker thread."""
        rec, run, offset, limit = self.log_request(namespace, name, user, offset, limit)
        if run is not None and not run.log_path and getattr(self.backend, "read_log", None) is not None:
            read = await asyncio.get_running_loop().run_in_executor(
                None, self.read_log_bytes, run, rec["uid"], offset, limit)
        else:
            read = self.read_log_bytes(run, rec["uid"], offset, limit)
        return self.log_answer(rec, offset, *read)

    def log_request(self, namespace: str, name: str, user: str, offset: int, limit: int):
        rec = self.live.record(namespace, name)
        if rec["owner"] != user:
            raise Forbidden(f"only the owner may read the logs of {namespace}/{name}", "name")
        if offset < 0:
            raise ValidationError("must be ≥ 0", "offset")
        if limit <= 0:
            raise ValidationError("must be > 0", "limit")
        run = RunInfo.from_json(rec["run"]) if rec.get("run") else None
        return rec, run, offset, min(limit, 4 << 20)

    def read_log_bytes(self, run: Optional[RunInfo], uid: str, offset: int, limit: int) -> tuple[bytes, int, int, bool]:
        """``(data, start, size, more)``: the bytes read from ``start`` (``offset``, or the end
        of a shorter log), the log's size known so far, and whether more is known to follow."""
        if run is None:
            return b"", offset, 0, False
        if run.log_path:
            if not os.path.exists(run.log_path):
                return b"", offset, 0, False
            size = os.path.getsize(run.log_path)
            start = min(offset, size)
            with open(run.log_path, "rb") as f:
                f.seek(start)
                return f.read(limit), start, size, False
        read_remote = getattr(self.backend, "read_log", None)  # a cluster backend: the Pod's log
        if read_remote is None:
            return b"", offset, 0, False
        data, size, more = read_remote(uid, offset, limit)
        return data, (offset if data else min(offset, size)), size, more

    @staticmethod
    def log_answer(rec: dict, offset: int, data: bytes, start: int, size: int, more: bool) -> dict:
        next_offset = start + len(data)
        eof = rec["state"] in FINISHED_STATES and not more and next_offset >= size
        return {"text": data.decode("utf-8", errors="replace"), "offset": offset, "nextOffset": next_offset,
                "eof": eof, "size": size}
