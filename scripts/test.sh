#!/usr/bin/env bash
# Install everything the tests need (Debian's chromium for the browser tests, the package with its
# test extra in .venv), then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  else
    sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  fi
fi
scripts/setup-venv.sh test
exec .venv/bin/python -m pytest "$@"
