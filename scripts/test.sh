#!/usr/bin/env bash
# Install everything the tests need (Debian's chromium for the browser tests, the package with its
# test extra in .venv, configurable-http-proxy for the JupyterHub tests), then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  else
    sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  fi
fi
# PostgreSQL for the ledger's tests on PostgreSQL (tests/pgtools.py starts a throw-away server)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
  else
    sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql
  fi
fi
# configurable-http-proxy (npm) for the JupyterHub end-to-end tests (tests/hub/), kept in .ci-node/;
# beside the virtualenv's set-up (it needs only npm)
chp=
if [ ! -x .ci-node/node_modules/.bin/configurable-http-proxy ]; then
  npm install --silent --no-audit --no-fund --prefix .ci-node configurable-http-proxy &
  chp=$!
fi
scripts/setup-venv.sh test
# Bytecode ahead of the run, while jlpm works below. Where PYTHONDONTWRITEBYTECODE is set (as in CI's
# image), pytest rewrote the asserts of all 119 test modules in each of the six workers (9 of their 15
# CPU seconds of collection), and every server, hub and job process compiled the modules of the package
# that had no .pyc. pytest reads its cached rewrite even when it may not write one: one collection
# without the variable writes them (tests/**/__pycache__, git-ignored), compileall the package's.
# Two collections side by side, of half the test folders each (one took 11.6 s on one core).
collect() { env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest --collect-only -q -p no:xdist \
  -p no:cacheprovider "$@" >/dev/null 2>&1 || true; }
half=(tests/browser tests/hub tests/k8s tests/engine)
(collect "${half[@]}"; .venv/bin/python -m compileall -q jupyter_gpuqueue tests >/dev/null 2>&1 || true) &
bytecode=$!
collect "${half[@]/#/--ignore=}" tests &
bytecode2=$!
# axe-core (a devDependency of labextension/) for the browser tests' accessibility checks: the
# editable install runs `jlpm install` only when it rebuilds the extension
if [ ! -f labextension/node_modules/axe-core/axe.min.js ]; then
  (cd labextension && ../.venv/bin/jlpm install)
fi
export PATH="$PWD/.ci-node/node_modules/.bin:$PATH"
wait "$bytecode" "$bytecode2"
[ -z "$chp" ] || wait "$chp"
# Six pytest-xdist workers by default, each taking whole test files (their hubs, control planes
# and servers are per module; tests/xdist_schedule.py: the longest files first, tests/k8s/real as
# one unit). A test file alone waits on its processes (servers, hubs, browsers, jobs) most of the
# time, so it takes several to keep two cores busy: with six, both are busy from the first minute to
# the last (/proc/stat sampled every 2 s: 98-99 % busy, no I/O wait; BENCHMARKS.md, "Test suite
# time"), and four were slower (pytest 11 min 30 s against 10 min 24 s), eight too (11 min 28 s).
# GPUQUEUE_TEST_WORKERS=0: one process.
exec .venv/bin/python -m pytest -n "${GPUQUEUE_TEST_WORKERS:-6}" --dist loadfile "$@"
