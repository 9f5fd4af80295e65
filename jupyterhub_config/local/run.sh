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
exec jupyterhub -f "$here/jupyterhub_config.py" "$@"
