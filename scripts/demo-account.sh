#!/usr/bin/env bash
# As root, the demos never run users' code as root: JupyterLab (scripts/demo.sh), and every demo
# user's server and job on the demo hub (jupyterhub_config/local/run.sh) run as one unprivileged
# account instead. This makes it if missing and checks that it can run .venv's Python
# (scripts/setup-venv.sh makes .venv with /usr/bin/python3 for that). Prints the account's name.
# Usage: scripts/demo-account.sh [NAME]   (default $GPUQUEUE_DEMO_ACCOUNT, else gpuqueue-demo)
set -euo pipefail
cd "$(dirname "$0")/.."
account="${1:-${GPUQUEUE_DEMO_ACCOUNT:-gpuqueue-demo}}"
if ! id -u "$account" >/dev/null 2>&1; then
  useradd --system --user-group --create-home --home-dir "/var/lib/$account" --shell /usr/sbin/nologin \
    -c "jupyter_gpuqueue demo account" "$account"
fi
if [ "$(id -u "$account")" = "0" ]; then
  echo "demo-account.sh: $account is root; the demo never runs users' code as root" >&2
  exit 1
fi
if ! runuser -u "$account" -- "$PWD/.venv/bin/python" -c "import jupyter_gpuqueue" >/dev/null 2>&1; then
  echo "demo-account.sh: the demo account $account cannot run $PWD/.venv/bin/python (a folder on its way is" >&2
  echo "closed to other accounts, e.g. a checkout or a Python under /root): clone the repository elsewhere" >&2
  echo "(e.g. /opt or /srv), or remove .venv and run scripts/setup-venv.sh again (it uses /usr/bin/python3)." >&2
  echo "For a machine shared by real users see docs/shared-machine.md." >&2
  exit 1
fi
echo "$account"
