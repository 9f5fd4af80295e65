#!/usr/bin/env bash
# Create .venv at the repository root (if missing) and install the package with the given extra.
# The editable install builds the JupyterLab extension (labextension/) through the hatch
# jupyter-builder hook, which brings jlpm in its isolated build environment; Node.js must be on PATH.
# Usage: scripts/setup-venv.sh demo|test
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-demo}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[$extra]"
