"""The Littlest JupyterHub's plugin hook specifications, restated for tests (TLJH is not on PyPI).

Source: https://github.com/jupyterhub/the-littlest-jupyterhub, file ``tljh/hooks.py`` (read at
commits 2faf0d3a5f5e3dfd84477ad388a753ea5d6f5179 and ad38fad96afe8096e722279da095a0633b5d2c6b;
the hooks, their names and their arguments are the same in both). This file restates that
interface (hook names, argument names, the ``tljh`` project name; what TLJH does with each hook
is from its ``tljh/installer.py`` and ``tljh/jupyterhub_config.py``) in our own words. pluggy
checks a plugin's hook implementations against these: an unknown hook name, or an argument the
specification does not have, fails ``PluginManager.register`` / ``check_pending``.
"""

import pluggy

hookspec = pluggy.HookspecMarker("tljh")


@hookspec
def tljh_extra_user_conda_packages():
    """Conda packages for the users' environment (installer)."""


@hookspec
def tljh_extra_user_pip_packages():
    """Pip requirements for the users' environment, {prefix}/user (installer)."""


@hookspec
def tljh_extra_hub_pip_packages():
    """Pip requirements for the hub's environment, {prefix}/hub (installer)."""


@hookspec
def tljh_extra_apt_packages():
    """Apt packages, installed before the pip and conda ones (installer)."""


@hookspec
def tljh_custom_jupyterhub_config(c):
    """Change the hub's traitlets config ``c`` (jupyterhub_config.py, after config.yaml is applied)."""


@hookspec
def tljh_config_post_install(config):
    """Change the config.yaml mapping ``config`` in place (installer)."""


@hookspec
def tljh_post_install():
    """Anything, after the installer's other steps and hooks (installer)."""


@hookspec
def tljh_new_user_create(username):
    """Anything, after a new user was added."""
