"""The %%gpujob widget and handle say when their job was preempted (issue 15 item 7): a real
preemption on the demo cluster (team-b's development job on all four H100s, then an
experiment-high one), followed by a GpuJob handle on the victim."""

from __future__ import annotations

import asyncio
import html
import re
import sys
import time

from jupyter_gpuqueue.client import GpuQueueClient
from jupyter_gpuqueue.widget import GpuJob, GpuJobWidget, preemption_summary

SUMMARY = re.compile(r"preempted 1× by team-b/urgent \(priority\) · (\$\d+\.\d\d|< \$0\.01) of runs lost")


async def test_the_widget_and_the_handle_show_the_preemption(gpuqueue_env):
    client = GpuQueueClient(gpuqueue_env["GPUQUEUE_URL"], gpuqueue_env["GPUQUEUE_TOKEN"])
    victim = await asyncio.to_thread(client.submit, {
        "name": "victim", "localQueue": "team-b/team-b-queue", "gpus": 4, "flavor": "nvidia-h100",
        "priorityClass": "development", "maxRuntime": "10m",
        "command": [sys.executable, "-c", "import time; time.sleep(60)"]})
    job = GpuJob(client, victim)
    try:
        deadline = time.monotonic() + 30
        while job.state != "Running":
            assert time.monotonic() < deadline, job.info
            await asyncio.sleep(0.2)
        assert "Preempted" not in job.widget.details.value and preemption_summary(job.info) is None
        await asyncio.sleep(0.5)
        await asyncio.to_thread(client.submit, {
            "name": "urgent", "localQueue": "team-b/team-b-queue", "gpus": 1, "flavor": "nvidia-h100",
            "priorityClass": "experiment-high", "maxRuntime": "5m",
            "command": [sys.executable, "-c", "import time; time.sleep(30)"]})
        deadline = time.monotonic() + 30
        while not (job.info.get("preemptions") or {}).get("count"):
            assert time.monotonic() < deadline, job.info
            await asyncio.sleep(0.2)
        summary = job.info["preemptions"]["summary"]
        assert SUMMARY.fullmatch(summary), summary
        # the widget (followed live by the handle's watcher) and the handle's repr say it
        assert "<td>Preempted</td>" in job.widget.details.value.replace(" style='padding-right:1em;opacity:0.75'", "")
        assert html.escape(summary) in job.widget.details.value
        assert summary in repr(job)
        # a fresh widget on the same view too (e.g. after the kernel restarted)
        assert html.escape(summary) in GpuJobWidget(job.info).details.value
    finally:
        for name in ("victim", "urgent"):
            try:
                await asyncio.to_thread(client.cancel, "team-b", name)
            except Exception:
                pass
        job.close()
