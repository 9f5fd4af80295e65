#!/usr/bin/env bash
# The demo: JupyterLab with the GPU queue embedded, on the demo cluster (two teams, A100 / H100 / L4
# GPUs and MIG slices; see jupyter_gpuqueue/demo/). On a machine with NVIDIA GPUs, the real GPUs are
# discovered through NVML instead (set GPUQUEUE_INVENTORY=jupyter_gpuqueue/demo/inventory.yaml to keep the demo's).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh demo
# The demo's ledger is upgraded to this version's schema if an older demo made it (a backup is
# kept next to it; a real deployment decides that itself: README, "Upgrades and backups").
if [ "$(id -u)" != "0" ]; then
  exec .venv/bin/jupyter lab --ServerApp.root_dir="$PWD" --GpuQueueApp.upgrade_db=True "$@"
fi
# As root (a container, a fresh VM), JupyterLab and its jobs never run as root: they run as an
# unprivileged demo account (scripts/demo-account.sh), in a copy of examples/ in its home.
account="$(scripts/demo-account.sh)"
home="$(getent passwd "$account" | cut -d: -f6)"
work="$home/gpuqueue-demo"
if [ ! -d "$work" ]; then
  mkdir -p "$work"
  cp -r examples "$work/examples"
  chown -R "$account:" "$work"
fi
echo "demo.sh: running as root; JupyterLab and its jobs run as the account $account in $work" >&2
exec runuser -u "$account" -- env HOME="$home" PATH="$PWD/.venv/bin:/usr/local/bin:/usr/bin:/bin" \
  .venv/bin/jupyter lab --ServerApp.root_dir="$work" --GpuQueueApp.upgrade_db=True "$@"
