#!/usr/bin/env bash
# Create .venv at the repository root (if missing) and install the package with the given extra.
# The editable install builds the JupyterLab extension (labextension/) through the hatch
# jupyter-builder hook, which brings jlpm in its isolated build environment; Node.js must be on PATH.
# Usage: scripts/setup-venv.sh demo|test
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-demo}"
# A Python every account can run: on a shared machine users' notebook servers and jobs run as their
# own accounts (jupyterhub_config/, docs/security.md), which cannot run one under /root (pyenv's,
# say). Debian's /usr/bin/python3 when it has venv, else python3 on PATH; $PYTHON chooses.
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import venv, ensurepip" 2>/dev/null; then
  python=/usr/bin/python3
else
  python="${PYTHON:-python3}"
fi
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
export PATH="$PWD/.venv/bin:$PATH"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[$extra]"
