"""``jupyter gpuqueue``: the command line of the GPU queue.

Console script ``jupyter-gpuqueue`` (so ``jupyter gpuqueue ...`` works). Subcommands::

    simulate FILE...          replay Kueue manifests through the engine offline; JSON on stdout
    replay TRACE.csv --config Q.yaml | replay --kueue-perf baseline|large-scale
                              replay a job trace (or Kueue's perf workloads) in simulated time
    submit SCRIPT_OR_COMMAND  queue a job (a .py file runs with the server's Python)
    estimate ...              what a job would cost, without submitting it
    list                      your workloads (--all: everyone's)
    cancel NAME               cancel one of your workloads
    logs NAME                 a job's output (--follow to stream it)
    queues | inventory | prices | info
    export-kueue [--config FILE]  the queue configuration as Kueue YAML (admins; offline from files)
    import-kueue FILE         replace the queue configuration with Kueue YAML (admins)
    upgrade-db [--db-url URL] the ledger's schema to this release's (offline; SQLite backed up first)
    backup FILE [--db-url URL]  a copy of the SQLite ledger (online backup API; pg_dump for PostgreSQL)
    bench submit|drain|panels benchmarks of the live service against a real server (BENCHMARKS.md)

Exit status: 0 on success; 2 on bad input or an error answer from the server (the message, naming
the field, goes to stderr); 1 when ``submit --wait`` ends in Failed or Cancelled; 130 on Ctrl-C.

Modules, by command group:

- ``args``: the parser class, argument types, reading input files (shared by every group, the
  bench's command line and the ``%gpujob`` magics);
- ``jobs``: the commands that talk to a server, and the job options shared with the magics;
- ``text``: how their answers are printed;
- ``offline``: ``simulate``, ``replay``, ``export-kueue``;
- ``database``: ``upgrade-db``, ``backup`` (the ledger, offline);
- ``bench``: ``bench submit | drain | panels`` (``bench/cli.py``);
- ``program``: the parser of all of them, the dispatch, ``main``.

The names below are this package's public interface (the console script, the magics, tests).
"""

from .args import PROG, ArgumentParser, HelpRequested, UsageError, non_negative_int, positive_int  # noqa: F401
from .jobs import (  # noqa: F401
    ARRAY_TASK_ENV,
    MAX_ARRAY_TASKS,
    add_job_arguments,
    array_requests,
    parse_array,
    request_from_args,
)
from .program import COMMANDS, build_parser, main, parse_args, run, split_job_argv  # noqa: F401
from .text import (  # noqa: F401
    TERMINAL_STATES,
    assigned_flavor,
    duration,
    format_table,
    inventory_text,
    money,
    position,
    queues_text,
    requested,
    workload_summary,
    workloads_table,
)
