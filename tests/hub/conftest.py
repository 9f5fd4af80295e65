"""Fixtures of the JupyterHub end-to-end tests; the machinery is in hubtools.py (importable:
``from hubtools import start_hub, stop_hub, chp_path, Hub``; re-exported here too)."""

from __future__ import annotations

import pytest

from hubtools import EXAMPLE_CONFIG, Hub, chp_path, free_port, start_hub, stop_hub  # noqa: F401


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A running hub with the example configuration (module scope: started once per module)."""
    if chp_path() is None:
        pytest.skip("configurable-http-proxy (npm) is not installed; scripts/test.sh installs it")
    from jupyter_gpuqueue.inventory import DEMO_INVENTORY_PATH

    # the demo inventory even on a machine with GPUs: the same devices and teams everywhere
    h = start_hub(tmp_path_factory.mktemp("hub"), env={"GPUQUEUE_INVENTORY": str(DEMO_INVENTORY_PATH)})
    yield h
    stop_hub(h)
