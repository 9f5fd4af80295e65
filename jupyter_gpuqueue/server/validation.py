"""Request bodies checked against the served OpenAPI document (``openapi.yaml``).

:func:`check_body` validates a parsed JSON body against one of the document's
``components.schemas`` before the service sees it, so that every request the document declares
invalid (a wrong type, a name that is not a DNS-1123 label, a value out of range) is refused with
400 naming the field path, and nothing is changed. The service still applies its own rules
(unknown LocalQueue, command not found, quota) on top.

OpenAPI 3.0 schemas are JSON Schema draft 4 plus ``nullable``; ``nullable: true`` is translated
to "or null". A body is first checked by a validator compiled to Python code by
``fastjsonschema`` (≈ 2 µs for a SubmitRequest; ``jsonschema`` takes ≈ 50 µs, and a batch of 1,000
submissions is checked item by item); only a body it refuses is checked again by ``jsonschema``,
whose ``best_match`` gives the message and the field path. ``tests/test_validation.py`` checks
that the two agree.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import yaml

from ..errors import ValidationError
from .openapi import openapi_text


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
    doc = yaml.safe_load(openapi_text())
    return _oas30_to_json_schema(copy.deepcopy(doc.get("components", {})))


@functools.lru_cache(maxsize=None)
def _validator(schema_name: str):
    from jsonschema import Draft4Validator

    components = _components()
    if schema_name not in components.get("schemas", {}):
        raise KeyError(f"no schema {schema_name!r} in openapi.yaml")
    return Draft4Validator({"$ref": f"#/components/schemas/{schema_name}", "components": components})


@functools.lru_cache(maxsize=None)
def _fast_validator(schema_name: str):
    """``components.schemas[schema_name]`` compiled by fastjsonschema (defaults not filled in:
    the body is left as sent); None if it cannot compile the schema (then jsonschema alone)."""
    import fastjsonschema

    _validator(schema_name)  # KeyError for an unknown name, as there
    try:
        # draft 4 as OpenAPI 3.0 (exclusiveMinimum is a boolean there, a number in later drafts)
        return fastjsonschema.compile({"$schema": "http://json-schema.org/draft-04/schema#",
                                       "$ref": f"#/components/schemas/{schema_name}",
                                       "components": _components()}, use_default=False)
    except fastjsonschema.JsonSchemaDefinitionException:  # pragma: no cover - a keyword it lacks
        return None


def is_valid(data: Any, schema_name: str) -> bool:
    """Whether ``data`` matches ``components.schemas[schema_name]`` (no message; fast path)."""
    import fastjsonschema

    fast = _fast_validator(schema_name)
    if fast is None:
        return _validator(schema_name).is_valid(data)
    try:
        fast(data)
    except fastjsonschema.JsonSchemaValueException:
        return False
    return True


def _field(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


#: What a field's ``pattern`` asks for, in words (the schema's regular expression is not shown).
PLAIN_PATTERNS = {
    "name": ("is not a valid name: use at most 63 lowercase letters, digits and '-', starting and "
             "ending with a letter or digit (e.g. train-resnet-2)"),
}


def check_body(data: Any, schema_name: str, field_depth: int = 1) -> None:
    """Raise ValidationError (400) when ``data`` does not match ``components.schemas[schema_name]``
    of the served document: ``field`` is the request's field (the first ``field_depth`` parts of
    the path: its top-level key, the form field clients highlight: ``env``; 3 for a batch:
    ``items[2].env``), the message starts with the full path (``env.SEED: 1 is not of type
    'string'``)."""
    from jsonschema.exceptions import best_match

    if is_valid(data, schema_name):
        return
    error = best_match(_validator(schema_name).iter_errors(data))
    if error is None:
        return
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    path = list(error.absolute_path)
    if error.validator == "pattern" and path and path[-1] in PLAIN_PATTERNS:
        # a researcher's words, not the schema's regular expression (issue 34 item 10)
        raise ValidationError(f"{_field(path)}: {error.instance!r} {PLAIN_PATTERNS[path[-1]]}",
                              _field(path[:field_depth]))
    raise ValidationError(f"{_field(path)}: does not match the API's {schema_name} schema: {message}",
                          _field(path[:field_depth]) if path else "body")
