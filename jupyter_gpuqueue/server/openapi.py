"""The OpenAPI 3 document of the REST API (``openapi.yaml``, shipped with the package).

Read by the handlers (``GET /gpuqueue/api/openapi.json|yaml``) and by ``validation`` (request
bodies are checked against its ``components.schemas``); a module of its own so that neither
imports the other.
"""

from __future__ import annotations

import functools
import json
import os

import yaml

OPENAPI_PATH = os.path.join(os.path.dirname(__file__), "openapi.yaml")


@functools.lru_cache(maxsize=1)
def openapi_text() -> str:
    """The OpenAPI 3 document (YAML text) shipped with the package."""
    with open(OPENAPI_PATH, encoding="utf-8") as f:
        return f.read()


@functools.lru_cache(maxsize=1)
def openapi_json() -> str:
    """The OpenAPI 3 document as JSON text."""
    return json.dumps(yaml.safe_load(openapi_text()))
