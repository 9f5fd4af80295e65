"""The version has one source, labextension/package.json: the installed package's metadata and
``__version__`` are read from it (an editable install made before a version change fails here:
reinstall), and CHANGELOG.md has a section for it. The build itself is tested, from the README, in
tests/browser/test_install.py."""

import json
import re
from importlib import metadata
from pathlib import Path

import pytest

import jupyter_gpuqueue

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

REPO = Path(__file__).resolve().parents[1]
VERSION = json.loads((REPO / "labextension" / "package.json").read_text(encoding="utf-8"))["version"]


def test_version_comes_from_package_json():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["hatch"]["version"] == {"source": "nodejs", "path": "labextension/package.json"}
    assert metadata.version("jupyter_gpuqueue") == VERSION
    assert jupyter_gpuqueue.__version__ == VERSION


def test_changelog_and_license():
    assert re.search(rf"^## {re.escape(VERSION)}\b", (REPO / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    license_text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("BSD 3-Clause License") and "jupyter_gpuqueue contributors" in license_text
