#!/usr/bin/env bash
# The demo: JupyterLab with the GPU queue embedded, on the demo cluster (two teams, A100 / H100 / L4
# GPUs and MIG slices; see jupyter_gpuqueue/demo/). On a machine with NVIDIA GPUs, the real GPUs are
# discovered through NVML instead (set GPUQUEUE_INVENTORY=jupyter_gpuqueue/demo/inventory.yaml to keep the demo's).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-venv.sh demo
extra=()
if [ "$(id -u)" = "0" ]; then extra+=(--allow-root); fi
# The demo's ledger is upgraded to this version's schema if an older demo made it (a backup is
# kept next to it; a real deployment decides that itself: README, "Upgrades and backups").
exec .venv/bin/jupyter lab --ServerApp.root_dir="$PWD" --GpuQueueApp.upgrade_db=True "${extra[@]}" "$@"
