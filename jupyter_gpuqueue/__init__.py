"""jupyter_gpuqueue: a fair, quota-aware GPU queue with Kueue semantics inside JupyterLab.

Entry points:
- ``_jupyter_server_extension_points``: the jupyter_server extension (``server.app.GpuQueueApp``).
- ``_jupyter_labextension_paths``: the prebuilt JupyterLab extension (built into
  ``jupyter_gpuqueue/labextension`` from the TypeScript in the repository's ``labextension/``).
- ``load_ipython_extension``: ``%load_ext jupyter_gpuqueue`` registers ``%gpujob`` / ``%%gpujob``.
"""

from .version import __version__  # noqa: F401


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "jupyter-gpuqueue"}]


def _jupyter_server_extension_points():
    from .server.app import GpuQueueApp

    return [{"module": "jupyter_gpuqueue", "app": GpuQueueApp}]


def load_ipython_extension(ipython):
    from .magics import load_ipython_extension as _load

    _load(ipython)
