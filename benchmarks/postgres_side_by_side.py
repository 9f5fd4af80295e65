"""`bench submit` and `bench drain` on a real PostgreSQL server beside SQLite (issue 16; BENCHMARKS.md,
"PostgreSQL"). Starts a throw-away PostgreSQL cluster with its durable defaults (fsync,
synchronous_commit and full_page_writes on; tests/pgtools.py, as root it runs as the OS user
postgres), then runs each benchmark twice, SQLite first, with the same arguments, and prints the figures of each. Usage:

    .venv/bin/python benchmarks/postgres_side_by_side.py [--n 10000] [--batch 50] [--skip-drain]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import pgtools  # noqa: E402


def run(args: list[str]) -> str:
    """Run one ``jupyter gpuqueue bench`` command; its printed figures."""
    cmd = [sys.executable, "-m", "jupyter_gpuqueue.cli", "bench", *args]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-3000:])
    return res.stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--skip-drain", action="store_true")
    a = p.parse_args()
    reason = pgtools.unavailable_reason()
    if reason:
        print(f"PostgreSQL unavailable: {reason}", file=sys.stderr)
        return 2
    server = pgtools.PostgresServer(durable=True).start()
    rows = []
    try:
        for kind in ("sqlite", "postgresql"):
            extra = [] if kind == "sqlite" else ["--db-url", server.create_database("bench")]
            sub = run(["submit", "--n", str(a.n), "--clients", str(a.clients), "--batch", str(a.batch), *extra])
            rows.append((kind, "submit", sub))
            if not a.skip_drain:
                extra = [] if kind == "sqlite" else ["--db-url", server.create_database("drain")]
                rows.append((kind, "drain", run(["drain", *extra])))
    finally:
        server.stop()
    for kind, what, text in rows:
        print(f"## {what} on {kind}\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
