"""The package's version, in a module of its own: modules read it without importing the package's
``__init__`` (which imports the server extension lazily).

Its one source is ``labextension/package.json``'s ``"version"``: the build (hatch-nodejs-version,
pyproject.toml ``[tool.hatch.version]``) writes it into the package's metadata, read here, and the
built labextension carries the same package.json."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path


def _version() -> str:
    try:
        return metadata.version("jupyter_gpuqueue")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        package_json = Path(__file__).resolve().parent.parent / "labextension" / "package.json"
        return json.loads(package_json.read_text(encoding="utf-8"))["version"]


__version__ = _version()
