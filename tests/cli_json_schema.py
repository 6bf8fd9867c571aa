"""The JSON schemas of ``docs/cli-json.md`` and a small validator for them.

The schemas are read from the document itself (the first ```json block
under each ``## name`` heading; ``## Shared definitions`` holds ``$defs``), so
the tests that validate the CLI's output against them keep the document
honest. ``jsonschema`` is not a dependency: this validator covers the subset
the document uses (``type``, ``enum``, ``properties``, ``required``,
``additionalProperties``, ``patternProperties``, ``items``, ``anyOf``,
``$ref`` to ``#/$defs/...``) and refuses any other keyword, so a schema
cannot silently mean less than it says.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli-json.md"
DEFS_SECTION = "Shared definitions"
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
ID_KEYS = "^[0-9]+$"

_KEYWORDS = {"type", "enum", "properties", "required", "additionalProperties", "patternProperties", "items",
             "anyOf", "$ref", "$defs"}
_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def load(doc: Path = DOC) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(section name -> schema, ``$defs``) from the document."""
    text = doc.read_text(encoding="utf-8")
    schemas: Dict[str, Any] = {}
    defs: Dict[str, Any] = {}
    for m in re.finditer(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        name, body = m.group(1).strip(), m.group(2)
        block = re.search(r"^```json\n(.*?)^```", body, re.M | re.S)
        if block is None:
            continue
        schema = json.loads(block.group(1))
        if name == DEFS_SECTION:
            defs = schema["$defs"]
        else:
            schemas[name] = schema
    return schemas, defs


def validate(value: Any, schema: Dict[str, Any], defs: Dict[str, Any], path: str = "$") -> List[str]:
    """Every way ``value`` breaks ``schema`` (empty: valid)."""
    unknown = set(schema) - _KEYWORDS
    if unknown:
        return [f"{path}: schema uses unsupported keywords {sorted(unknown)}"]
    if "$ref" in schema:
        ref = schema["$ref"]
        name = ref[len("#/$defs/"):] if ref.startswith("#/$defs/") else None
        if name is None or name not in defs:
            return [f"{path}: unknown $ref {ref}"]
        return validate(value, defs[name], defs, path)
    if "anyOf" in schema:
        branches = [validate(value, s, defs, path) for s in schema["anyOf"]]
        if all(branches):
            return [f"{path}: matches no anyOf branch: " + " | ".join("; ".join(b) for b in branches)]
        return []
    errors: List[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            return [f"{path}: expected {' or '.join(types)}, got {type(value).__name__} {value!r}"[:300]]
    if "enum" in schema and not any(type(value) is type(e) and value == e for e in schema["enum"]):
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing {key!r}")
        for key, item in value.items():
            if key in props:
                errors += validate(item, props[key], defs, f"{path}.{key}")
                continue
            matched = [p for p in patterns if re.search(p, key)]
            for p in matched:
                errors += validate(item, patterns[p], defs, f"{path}[{key!r}]")
            if not matched and schema.get("additionalProperties", True) is False:
                errors.append(f"{path}: unexpected key {key!r}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], defs, f"{path}[{i}]")
    return errors


def conventions(schema: Any, path: str = "$") -> List[str]:
    """Where ``schema`` breaks the document's rules: every object lists all
    its properties as required and allows nothing else, property names are
    snake_case, maps are keyed by ids only."""
    out: List[str] = []
    if isinstance(schema, dict):
        if "properties" in schema:
            props = schema["properties"]
            if set(schema.get("required", [])) != set(props):
                out.append(f"{path}: required {sorted(schema.get('required', []))} != properties {sorted(props)}")
            if schema.get("additionalProperties") is not False:
                out.append(f"{path}: objects must say additionalProperties: false")
            out += [f"{path}: property {k!r} is not snake_case" for k in props if not SNAKE.match(k)]
        if "patternProperties" in schema:
            if set(schema["patternProperties"]) != {ID_KEYS}:
                out.append(f"{path}: maps must be keyed by ids ({ID_KEYS})")
            if schema.get("additionalProperties") is not False:
                out.append(f"{path}: maps must say additionalProperties: false")
        if schema.get("type") == "object" and "properties" not in schema and "patternProperties" not in schema:
            out.append(f"{path}: an object without properties or patternProperties")
        for k, v in schema.items():
            if k in ("properties", "patternProperties", "$defs"):
                for name, sub in v.items():
                    out += conventions(sub, f"{path}.{name}")
            elif k == "items":
                out += conventions(v, f"{path}[]")
            elif k == "anyOf":
                for i, sub in enumerate(v):
                    out += conventions(sub, f"{path}|{i}")
    return out


def json_keys(value: Any, path: str = "$") -> List[str]:
    """Keys of ``value`` (recursively) that are neither snake_case nor ids."""
    out: List[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if not (SNAKE.match(k) or re.match(ID_KEYS, k)):
                out.append(f"{path}: {k!r}")
            out += json_keys(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += json_keys(v, f"{path}[{i}]")
    return out
