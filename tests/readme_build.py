"""The README's *Install* build block (``pip install build``, ``python -m build``) run once per test
run, in a copy of the files a clone of the repository has, and shared by pytest-xdist's workers:
the first test to ask builds under a lock, the others wait for it and get the same files.

tests/browser/test_install.py checks the wheel and the sdist and installs each as a user would;
tests/hub/test_shared_machine.py installs the wheel as an admin would (setup.sh's
``GPUQUEUE_PACKAGE``). Before, each built its own (two production builds of the extension per run,
the second one in the checkout itself, emptying the extension's build output under the browser
tests of the other workers for the length of the build).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKER = "<!-- tests/browser/test_install.py runs the next three blocks as they are written -->"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def readme_blocks() -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The *build*, *install* and *check* blocks after :data:`MARKER`: command lines, and for
    *check* ``(command, what its output must contain)``."""
    text = README.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, f"README.md must hold the marker {MARKER!r} once"
    after = text.split(MARKER, 1)[1]
    blocks = re.findall(r"^```bash\n(.*?)^```", after, flags=re.M | re.S)[:3]
    assert len(blocks) == 3, "three ```bash blocks must follow the marker"

    def lines(block):
        return [line for line in block.splitlines() if line.strip()]

    def split(line):
        command, _, comment = line.partition("  #")
        return command.strip(), comment.strip()

    build = [split(line)[0] for line in lines(blocks[0])]
    install = [split(line)[0] for line in lines(blocks[1])]
    check = [split(line) for line in lines(blocks[2])]
    return build, install, check


def run(command: str, cwd: Path, env: dict, timeout: float = 600) -> str:
    """``bash -c command``; its output (stdout and stderr, ANSI colours removed). AssertionError
    with the output if it fails."""
    proc = subprocess.run(
        ["/bin/bash", "-c", command], cwd=cwd, env=env, timeout=timeout,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    out = ANSI.sub("", proc.stdout)
    assert proc.returncode == 0, f"`{command}` exited {proc.returncode} in {cwd}:\n{out[-6000:]}"
    return out


def _copy_of_the_repository(tree: Path) -> None:
    """The files a clone has (tracked, or new and not ignored), copied to ``tree``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, stdout=subprocess.PIPE,
    ).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():  # a deleted file still listed: skip it
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    assert not (tree / "jupyter_gpuqueue" / "labextension").exists()  # no build output copied


def built_once(tmp_path_factory) -> dict:
    """``{"dir": the copy (its dist/ holds the wheel and the sdist), "seconds": the build's time}``:
    the README's build block, run with this test run's Python and Node.js first on the PATH, once
    for all workers of the run. Skips (with the reason) where there is no git checkout or no Node.js;
    AssertionError with the output where the build fails (each asking worker tries it itself)."""
    if not shutil.which("git") or not (REPO / ".git").exists():
        pytest.skip("needs the repository's git checkout (git ls-files)")
    if not shutil.which("node"):
        pytest.skip("building the JupyterLab extension needs Node.js on the PATH")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    record = base / "readme-build.json"
    with open(base / "readme-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if this one fails
        if record.exists():
            return json.loads(record.read_text())
        tree = base / "readme-build" / "jupyter_gpuqueue"
        shutil.rmtree(tree.parent, ignore_errors=True)  # what a failed try left
        _copy_of_the_repository(tree)
        build, _, _ = readme_blocks()
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        started = time.monotonic()
        for command in build:
            run(command, tree, env, timeout=900)
        seconds = time.monotonic() - started
        shutil.rmtree(tree / "labextension" / "node_modules", ignore_errors=True)  # hundreds of MB
        built = {"dir": str(tree), "seconds": seconds}
        record.write_text(json.dumps(built))
        return built
