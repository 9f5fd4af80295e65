"""Config of the ``gpuqueue`` hub service under The Littlest JupyterHub: a traitlets config file,
``jupyterhub-singleuser --config=<this file>`` (the command the TLJH plugin gives the hub; not a
module to import). Everything is in :func:`jupyter_gpuqueue.tljh_plugin.configure_service`."""

from jupyter_gpuqueue.tljh_plugin import configure_service

configure_service(get_config())  # noqa: F821 (provided by the config loader)
