#!/usr/bin/env bash
# JupyterHub with the GPU queue on a machine shared by real people, set up as root on a bare Debian
# machine: docs/shared-machine.md walks through each step. Run it again to upgrade (the
# configuration in $GPUQUEUE_ETC is kept).
#
#   sudo jupyterhub_config/shared/setup.sh
#
# Settings (environment, all optional):
#   GPUQUEUE_PACKAGE    what pip installs: jupyter_gpuqueue (PyPI), or a wheel / sdist / source folder
#   GPUQUEUE_PREFIX     the environment every account runs: /opt/jupyter_gpuqueue
#   GPUQUEUE_ETC        the configuration: /etc/jupyterhub
#   GPUQUEUE_HUB_STATE  the hub's and the queue's state (root's only): /var/lib/jupyterhub
#   GPUQUEUE_NO_SYSTEMD=1  do not install and start the systemd unit (print how to start the hub)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PACKAGE="${GPUQUEUE_PACKAGE:-jupyter_gpuqueue}"
PREFIX="${GPUQUEUE_PREFIX:-/opt/jupyter_gpuqueue}"
ETC="${GPUQUEUE_ETC:-/etc/jupyterhub}"
STATE="${GPUQUEUE_HUB_STATE:-/var/lib/jupyterhub}"
if [ "$(id -u)" != "0" ]; then
  echo "setup.sh: run it as root (sudo): the hub starts each user's server as that user" >&2
  exit 1
fi
umask 022

echo "1/6 system packages: Python 3 with venv, Node.js and npm (for JupyterHub's proxy)"
missing=()
/usr/bin/python3 -c "import venv, ensurepip" 2>/dev/null || missing+=(python3 python3-venv)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

echo "2/6 one environment for the hub, the queue and every user's server: $PREFIX (with /usr/bin/python3)"
# Every account must be able to run it: not under /root, and not with a Python that lives there.
[ -x "$PREFIX/bin/python" ] || /usr/bin/python3 -m venv "$PREFIX"
"$PREFIX/bin/python" -m pip install -q --upgrade pip
"$PREFIX/bin/python" -m pip install -q --upgrade "$PACKAGE" "jupyterhub>=5" "jupyterlab>=4.2"
chmod -R a+rX "$PREFIX"

echo "3/6 JupyterHub's proxy: configurable-http-proxy (npm) in $PREFIX/node"
if [ ! -x "$PREFIX/node/node_modules/.bin/configurable-http-proxy" ]; then
  npm install --silent --no-audit --no-fund --prefix "$PREFIX/node" configurable-http-proxy
fi

echo "4/6 configuration: $ETC (teams.yaml and cluster.yaml are kept when present)"
install -d -m 0755 "$ETC"
install -m 0644 "$here/jupyterhub_config.py" "$here/gpuqueue_service_config.py" "$ETC/"
[ -f "$ETC/teams.yaml" ] || install -m 0644 "$here/teams.yaml" "$ETC/teams.yaml"
if [ ! -f "$ETC/cluster.yaml" ]; then
  demo="$("$PREFIX/bin/python" -c 'import jupyter_gpuqueue.demo as d, os; print(os.path.join(os.path.dirname(d.__file__), "cluster.yaml"))')"
  install -m 0644 "$demo" "$ETC/cluster.yaml"
fi

echo "5/6 state: $STATE (root's only: the hub's database and the queue's ledger)"
install -d -m 0700 "$STATE"

echo "6/6 the service"
if [ -d /run/systemd/system ] && [ -z "${GPUQUEUE_NO_SYSTEMD:-}" ]; then
  sed -e "s#@PREFIX@#$PREFIX#g; s#@ETC@#$ETC#g; s#@STATE@#$STATE#g" "$here/jupyterhub.service" \
    > /etc/systemd/system/jupyterhub.service
  systemctl daemon-reload
  systemctl enable --now jupyterhub
  echo "JupyterHub runs: systemctl status jupyterhub"
else
  echo "start JupyterHub with:"
  echo "  GPUQUEUE_HUB_STATE=$STATE $PREFIX/bin/jupyterhub -f $ETC/jupyterhub_config.py"
fi
