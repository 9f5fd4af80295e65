"""Browser fixtures: JupyterLab with the built ``jupyter-gpuqueue`` labextension in headless Chromium.

Builds on tests/conftest.py (``jp_server_config``, ``gpuqueue_config``, ``started``) and adds:

- ``jp_env_jupyter_path``: ``{sys.prefix}/share/jupyter``, so JupyterLab's own assets and the
  installed prebuilt extensions are found (pytest-jupyter's ``jp_environ`` points it at an empty
  tmp folder otherwise, and the extension never activates);
- ``jp_server_config``: also enables the ``jupyterlab`` server extension and puts the repository's
  *build output* ``jupyter_gpuqueue/labextension`` first on ``LabApp.extra_labextensions_path``,
  so the test runs the code just built (``jlpm --cwd labextension build``) even where an
  editable install copied an older build into ``share/jupyter/labextensions``; JupyterLab's
  news notification is switched off;
- ``jp_root_dir``: a server root holding a copy of ``examples/``;
- ``lab_url``: the JupyterLab URL with the server token (binds the HTTP port).

Every test in this folder is marked ``browser`` and skipped, with the reason, when Chromium, the
built extension or Playwright is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("GPUQUEUE_CHROMIUM", "/usr/bin/chromium")
BUILT_EXTENSION = REPO / "jupyter_gpuqueue" / "labextension"
LABEXTENSION_NAME = "jupyter-gpuqueue"


def _skip_reason() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set GPUQUEUE_CHROMIUM)"
    if not (BUILT_EXTENSION / "static" / "style.js").exists():
        return (
            f"the labextension is not built ({BUILT_EXTENSION} is missing): run "
            "`pip install -e .` or `jlpm --cwd labextension install && jlpm --cwd labextension build`"
        )
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright (Python) is not installed: pip install -e '.[test]'"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _skip_reason()
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.browser)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def jp_env_jupyter_path():
    return os.path.join(sys.prefix, "share", "jupyter")


@pytest.fixture
def jp_root_dir(tmp_path):
    root = tmp_path / "root_dir"
    root.mkdir()
    shutil.copytree(REPO / "examples", root / "examples")
    return root


@pytest.fixture
def lab_extensions_dir(tmp_path) -> Path:
    """A folder whose ``jupyter-gpuqueue`` entry is the repository's build output."""
    folder = tmp_path / "labextensions"
    folder.mkdir()
    (folder / LABEXTENSION_NAME).symlink_to(BUILT_EXTENSION, target_is_directory=True)
    return folder


@pytest.fixture
def jp_server_config(jp_server_config, lab_extensions_dir, jp_config_dir):
    config = dict(jp_server_config)
    server = dict(config.get("ServerApp", {}))
    server["jpserver_extensions"] = {
        **server.get("jpserver_extensions", {}),
        "jupyterlab": True,
        "jupyter_gpuqueue": True,
    }
    config["ServerApp"] = server
    lab = dict(config.get("LabApp", {}))
    lab["extra_labextensions_path"] = [str(lab_extensions_dir)]
    # LabApp's default workspaces_dir is computed once, at import: without this, every test's
    # JupyterLab would restore the layout the previous test left (e.g. another sidebar open).
    lab["workspaces_dir"] = str(Path(jp_config_dir) / "lab" / "workspaces")
    config["LabApp"] = lab
    # No "Would you like to get notified about official Jupyter news?" toast over the panel.
    settings = Path(jp_config_dir) / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    return config


@pytest.fixture
def lab_url(started, jp_fetch, jp_http_port, jp_base_url) -> str:
    """``http://127.0.0.1:<port><base_url>lab?token=…`` of the started server."""
    token = started.identity_provider.token
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}lab?token={token}"


@pytest.fixture
def chromium_launch_args() -> dict:
    """Arguments of ``playwright.chromium.launch``: the system Chromium, headless."""
    return {"executable_path": CHROMIUM, "headless": True}


@pytest.fixture(autouse=True)
def _fresh_static_file_cache():
    """jupyter_server's ``FileFindHandler`` caches file lookups by URL path in a class attribute
    (``_static_paths``), across servers: a second JupyterLab started in this process would look up
    ``lab/extensions/jupyter-gpuqueue/static/…`` in the first test's (tmp) labextension folder and
    answer 403, so the panel never loads. Forget them around each test."""
    from jupyter_server.base.handlers import FileFindHandler

    FileFindHandler._static_paths.clear()
    yield
    FileFindHandler._static_paths.clear()
