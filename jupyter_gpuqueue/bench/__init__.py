"""Benchmarks of the live service (``jupyter gpuqueue bench ...``, BENCHMARKS.md "The live service").

Everything here drives a *real* server: a ``jupyter server`` process with jupyter_gpuqueue enabled,
token authentication, a SQLite ledger on disk and the local backend's real subprocesses, started by
:mod:`.server` (or an already running one given by URL and token). Nothing is stubbed.

- :mod:`.stream`: the shared job stream of ``shared/reference/slurm.md`` (the same draws as the
  Slurm runs), the 16 × 8 A100 inventory and the team quotas, and the ideal makespans.
- :mod:`.submit`: ``bench submit``: N submissions from C concurrent REST clients.
- :mod:`.drain`: ``bench drain``: the job stream run to completion by the local backend.
- :mod:`.panels`: ``bench panels``: event-stream subscribers and position queries during a drain.

Figures are wall times measured by the benchmark (``time.perf_counter``) or taken from the
server's own timestamps (``createdAt``, ``admittedAt``, ``startedAt``, ``finishedAt``: seconds
since the epoch, same host clock). The benchmarks assert correctness (every submission
acknowledged exactly once, every job succeeded) and report timings; they never assert timings.
"""
