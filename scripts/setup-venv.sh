#!/usr/bin/env bash
# Create .venv at the repository root (if missing) and install the package with the given extra.
# Usage: scripts/setup-venv.sh demo|test
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-demo}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# The editable install builds the JupyterLab extension (labextension/) with jlpm from jupyter-builder.
.venv/bin/python -m pip install --quiet "jupyter-builder>=1.2,<2" "hatch-jupyter-builder>=0.9" "hatch-nodejs-version>=0.3.2" hatchling
.venv/bin/python -m pip install --quiet --no-build-isolation -e ".[$extra]"
