"""The README's *Install* section, followed as written: build the wheel and the sdist from the
repository, install each into a fresh virtualenv without Node.js on the PATH, check both halves with
the README's commands, start JupyterLab and open the GPU Queue panel in Chromium.

The commands come from the README itself: the three fenced blocks after the marker comment naming
this file (build, install, check), run line by line with bash, each line's text before ``  #`` as
the command and, in the *check* block, the text after it as what the output must contain. Nothing is
substituted: the build runs in a copy of the repository's files (what ``git`` tracks or would
track: a clone), so the install lines' ``dist/jupyter_gpuqueue-*`` globs find the files just built.

Two installs, in parallel (pip's cache is the only thing they share with the machine):

- ``oldest``: a virtualenv that already has the oldest JupyterLab and jupyter_server the README
  claims (:data:`OLDEST`), as a user's JupyterLab would be; the README's *wheel* line; pip must not
  upgrade either (the package's bounds allow them).
- ``newest``: an empty virtualenv and the README's *sdist* line: pip builds the wheel from the sdist
  (no Node.js: the sdist carries the production build of the extension) and brings the newest
  JupyterLab and jupyter_server there are, checked against ``pip index versions``.

The ``newest`` one is then removed with the README's uninstall line: neither extension is listed
any more. The wheel is checked for build leftovers (source maps, ``package.json.orig``, ``build_log.json``) and
for its licence files; the version in the metadata must be ``labextension/package.json``'s and
CHANGELOG.md must have it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from readme_build import built_once, readme_blocks, run

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CHROMIUM = os.environ.get("GPUQUEUE_CHROMIUM", "/usr/bin/chromium")
# The oldest versions the README claims: the lower bounds of pyproject.toml's dependencies.
OLDEST = {"jupyterlab": "4.0.0", "jupyter_server": "2.15.0"}
LEFTOVERS = re.compile(r"(\.map|/package\.json\.orig|/build_log\.json)$")

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(1200)]


# --- build once (tests/readme_build.py: the README's build block, shared with the other workers) --


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The README's build block, run in a copy of the repository with this test run's Python and
    Node.js first on the PATH (:func:`readme_build.built_once`); the wheel and the sdist it made, checked."""
    made = built_once(tmp_path_factory)
    source_tree, seconds = Path(made["dir"]), made["seconds"]
    dist = source_tree / "dist"
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())

    version = json.loads((REPO / "labextension" / "package.json").read_text())["version"]
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"jupyter_gpuqueue-{version}.dist-info/METADATA").decode()
        shipped = json.loads(wheel.read(
            f"jupyter_gpuqueue-{version}.data/data/share/jupyter/labextensions/jupyter-gpuqueue/package.json"
        ))
    assert f"\nVersion: {version}\n" in metadata
    assert shipped["version"] == version
    assert [n for n in names if LEFTOVERS.search(n)] == [], "build leftovers in the wheel"
    share = f"jupyter_gpuqueue-{version}.data/data/share/jupyter/labextensions/jupyter-gpuqueue/"
    assert share + "static/third-party-licenses.json" in names  # a production build
    assert share + "install.json" in names
    assert f"jupyter_gpuqueue-{version}.dist-info/licenses/LICENSE" in names
    assert f"jupyter_gpuqueue-{version}.data/data/etc/jupyter/jupyter_server_config.d/jupyter_gpuqueue.json" in names
    with tarfile.open(sdists[0]) as sdist:
        members = sdist.getnames()
    top = f"jupyter_gpuqueue-{version}/"
    for name in ("LICENSE", "CHANGELOG.md", "jupyter_gpuqueue/labextension/static/style.js",
                 "jupyter_gpuqueue/labextension/static/third-party-licenses.json"):
        assert top + name in members, name
    assert not any(m.startswith(top + "labextension/node_modules") for m in members)
    assert re.search(rf"^## {re.escape(version)}\b", (REPO / "CHANGELOG.md").read_text(), re.M)
    return {"dir": source_tree, "version": version, "wheel": wheels[0], "sdist": sdists[0], "seconds": seconds}


# --- install: two fresh virtualenvs, in parallel ----------------------------------------------


def venv_env(venv: Path, home: Path) -> dict:
    """The environment of a user of ``venv``: its ``bin`` alone on the PATH (no Node.js), a home of
    its own (Jupyter's config and data folders, the queue's ledger); pip's cache stays shared."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "GPUQUEUE", "PYTHON", "VIRTUAL_ENV"))}
    env.update({
        "PATH": str(venv / "bin"),
        "HOME": str(home),
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "VIRTUAL_ENV": str(venv),
    })
    assert shutil.which("node", path=env["PATH"]) is None and shutil.which("npm", path=env["PATH"]) is None
    return env


def install(case: str, built: dict, root: Path) -> dict:
    """One fresh virtualenv with the README's install line for ``case``'s artifact."""
    _, lines, _ = readme_blocks()
    suffix = ".whl" if case == "oldest" else ".tar.gz"
    line = [c for c in lines if c.endswith(suffix)]
    assert len(line) == 1, f"the README's install block has no single line for the {suffix} file: {lines}"
    venv, home = root / case / "venv", root / case / "home"
    home.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = venv_env(venv, home)
    started = time.monotonic()
    if case == "oldest":  # the user's JupyterLab, there before ours
        run(f"pip install jupyterlab=={OLDEST['jupyterlab']} jupyter_server=={OLDEST['jupyter_server']}", home, env)
    run(line[0], built["dir"], env)
    return {"venv": venv, "home": home, "env": env, "line": line[0], "seconds": time.monotonic() - started}


@pytest.fixture(scope="module")
def installs(built, tmp_path_factory):
    root = tmp_path_factory.mktemp("installs")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    futures = {case: pool.submit(install, case, built, root) for case in ("oldest", "newest")}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    shutil.rmtree(root, ignore_errors=True)  # two virtualenvs with JupyterLab: about 1 GB


def installed_version(env: dict, package: str) -> str:
    return run(f"python -c 'import importlib.metadata as m; print(m.version(\"{package}\"))'", Path("/"), env).strip()


def newest_on_index(env: dict, package: str) -> str:
    out = run(f"pip index versions {package}", Path("/"), env)
    return re.search(rf"^{re.escape(package)} \(([^)]+)\)", out, re.M | re.I).group(1)


# --- JupyterLab in Chromium -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(inst: dict, log: Path) -> tuple[subprocess.Popen, str]:
    """``jupyter lab`` of the virtualenv, headless on a free port; the process and its lab URL
    once it answers (AssertionError with its log if it exits or stays silent for 180 s)."""
    port, token = free_port(), secrets.token_hex(16)
    root = inst["home"] / "work"
    root.mkdir(exist_ok=True)
    args = ["jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}"]
    if os.getuid() == 0:
        args.append("--allow-root")
    out = open(log, "wb")
    proc = subprocess.Popen(args, cwd=root, env=inst["env"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/lab?token={token}"
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, f"jupyter lab exited {proc.returncode}:\n{log.read_text()[-6000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/gpuqueue/api/queues?token={token}", timeout=10) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        assert time.monotonic() < deadline, f"jupyter lab did not answer in 180 s:\n{log.read_text()[-6000:]}"
        time.sleep(1)


def stop_lab(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


async def open_panel_and_list_queues(url: str, screenshot: Path) -> list[str]:
    """The GPU Queue panel opened as a user would (browserkit.open_panel: sidebar tab, live event
    stream); the LocalQueues its submit form offers."""
    from browserkit import open_panel
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(60000)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            try:
                panel = await open_panel(page, url)
                select = panel.locator("#jp-gpuqueue-localqueue")
                await select.locator("option[value='team-b/team-b-queue']").wait_for(state="attached")
                queues = await select.locator("option").evaluate_all("os => os.map(o => o.value)")
            finally:
                await page.screenshot(path=str(screenshot))
            assert errors == [], errors
            return queues
        finally:
            await browser.close()


@pytest.mark.parametrize("case", ["oldest", "newest"])
def test_install_as_the_readme_says(case, built, installs, tmp_path):
    inst = installs[case].result(timeout=1100)
    env = inst["env"]

    lab, server = installed_version(env, "jupyterlab"), installed_version(env, "jupyter_server")
    if case == "oldest":
        assert (lab, server) == (OLDEST["jupyterlab"], OLDEST["jupyter_server"]), "pip changed the user's JupyterLab"
    else:
        assert (lab, server) == (newest_on_index(env, "jupyterlab"), newest_on_index(env, "jupyter_server"))
    assert installed_version(env, "jupyter_gpuqueue") == built["version"]

    _, _, checks = readme_blocks()
    started = time.monotonic()
    for command, expected in checks:
        out = run(command, inst["home"], env, timeout=300)
        assert expected and expected in out, f"`{command}` does not say {expected!r}:\n{out}"

    checked = time.monotonic()
    proc, url = start_lab(inst, tmp_path / "lab.log")
    answered = time.monotonic()
    try:
        artifacts = REPO / "test-artifacts" / "install"
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / f"{case}-jupyterlab-{lab}.png"
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever runs here
            queues = pool.submit(asyncio.run, open_panel_and_list_queues(url, shot)).result(timeout=300)
        assert {"team-a/team-a-queue", "team-b/team-b-queue"} <= set(queues), queues
    finally:
        stop_lab(proc)

    if case == "newest":  # the README's uninstall line (pip asks "Proceed (Y/n)?": yes)
        (uninstall,) = re.findall(r"\*\*Uninstall\*\*: `([^`]+)`", README.read_text(encoding="utf-8"))
        subprocess.run(["/bin/bash", "-c", uninstall], input="y\n", env=env, cwd=inst["home"], text=True,
                       check=True, timeout=300, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        listed = run("jupyter labextension list; jupyter server extension list", inst["home"], env)
        assert "jupyter-gpuqueue" not in listed and "jupyter_gpuqueue" not in listed, listed
        assert not (inst["venv"] / "etc" / "jupyter" / "jupyter_server_config.d" / "jupyter_gpuqueue.json").exists()
    print(
        f"{case}: JupyterLab {lab}, jupyter_server {server}; build {built['seconds']:.0f} s, "
        f"`{inst['line']}` {inst['seconds']:.0f} s, checks {checked - started:.0f} s, "
        f"server start {answered - checked:.0f} s, panel {time.monotonic() - answered:.0f} s"
    )
