"""Request bodies checked against the served OpenAPI document (``openapi.yaml``).

:func:`check_body` validates a parsed JSON body against one of the document's
``components.schemas`` before the service sees it, so that every request the document declares
invalid (a wrong type, a name that is not a DNS-1123 label, a value out of range) is refused with
400 naming the field path, and nothing is changed. The service still applies its own rules
(unknown LocalQueue, command not found, quota) on top.

OpenAPI 3.0 schemas are JSON Schema draft 4 plus ``nullable``; ``nullable: true`` is translated
to "or null". Uses ``jsonschema`` (a dependency of jupyter_server through jupyter_events).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import yaml

from ..errors import ValidationError


def _oas30_to_json_schema(node: Any) -> Any:
    """A copy of an OpenAPI 3.0 schema tree with ``nullable: true`` as JSON Schema."""
    if isinstance(node, list):
        return [_oas30_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _oas30_to_json_schema(v) for k, v in node.items() if k not in ("nullable", "example")}
    if node.get("nullable") is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = list(out["enum"]) + [None]
        else:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


@functools.lru_cache(maxsize=1)
def _components() -> dict:
    from .handlers import openapi_text

    doc = yaml.safe_load(openapi_text())
    return _oas30_to_json_schema(copy.deepcopy(doc.get("components", {})))


@functools.lru_cache(maxsize=None)
def _validator(schema_name: str):
    from jsonschema import Draft4Validator

    components = _components()
    if schema_name not in components.get("schemas", {}):
        raise KeyError(f"no schema {schema_name!r} in openapi.yaml")
    return Draft4Validator({"$ref": f"#/components/schemas/{schema_name}", "components": components})


def _field(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


def check_body(data: Any, schema_name: str) -> None:
    """Raise ValidationError (400) when ``data`` does not match ``components.schemas[schema_name]``
    of the served document: ``field`` is the request's field (its top-level key, the form field
    clients highlight: ``env``), the message starts with the full path (``env.SEED: 1 is not of
    type 'string'``)."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(schema_name).iter_errors(data))
    if error is None:
        return
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    path = list(error.absolute_path)
    raise ValidationError(f"{_field(path)}: does not match the API's {schema_name} schema: {message}",
                          str(path[0]) if path else "body")
