#!/usr/bin/env bash
# The single-machine JupyterHub demo with one shared GPU queue, in one command:
#   jupyterhub_config/local/run.sh            (then open http://127.0.0.1:8000, see README.md)
# Installs what is missing (the package in .venv, jupyterhub, configurable-http-proxy from npm
# into .ci-node/), then runs JupyterHub with jupyterhub_config.py. Extra arguments go to jupyterhub.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
if [ ! -x .venv/bin/jupyter-gpuqueue ]; then
  scripts/setup-venv.sh demo
fi
if [ ! -x .venv/bin/jupyterhub ]; then
  .venv/bin/python -m pip install --quiet "jupyterhub>=5"
fi
if ! command -v configurable-http-proxy >/dev/null 2>&1 && [ ! -x .ci-node/node_modules/.bin/configurable-http-proxy ]; then
  npm install --silent --no-audit --no-fund --prefix .ci-node configurable-http-proxy
fi
export PATH="$PWD/.venv/bin:$PWD/.ci-node/node_modules/.bin:$PATH"
# As root, the demo never runs users' code as root: every demo user's server and job runs as one
# unprivileged account (jupyter_gpuqueue/hub/demo_spawner.py), made by scripts/demo-account.sh.
if [ "$(id -u)" = "0" ]; then
  GPUQUEUE_DEMO_ACCOUNT="$(scripts/demo-account.sh)"
  export GPUQUEUE_DEMO_ACCOUNT
  echo "run.sh: running as root; every demo user's notebook server and job runs as the account $GPUQUEUE_DEMO_ACCOUNT" >&2
fi
exec jupyterhub -f "$here/jupyterhub_config.py" "$@"
