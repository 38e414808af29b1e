"""Converts a tool-call parameter's text to a JSON value by the tool's JSON schema (the vLLM qwen3_coder rules):
string as is; integer/number parsed; boolean only true/false; object/array by json.loads, then ast.literal_eval,
then the raw string; the literal null → None. A value that does not convert stays a string."""
from __future__ import annotations

import ast
import json


def schema_types(schema: dict | None) -> list[str]:
    """The JSON types a parameter schema allows, in order ([] when unknown)."""
    if not isinstance(schema, dict):
        return []
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    types: list[str] = []
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            types += [x for x in schema_types(sub) if x not in types]
    if not types and "enum" in schema:
        values = schema["enum"] or []
        if values and all(isinstance(v, str) for v in values):
            types = ["string"]
    if not types and "properties" in schema:
        types = ["object"]
    return types


def is_string_param(schema: dict | None) -> bool:
    """Whether the value is streamed as a JSON string: the schema says string first, or says nothing."""
    types = [t for t in schema_types(schema) if t != "null"]
    return not types or types[0] == "string"


def convert_value(text: str, schema: dict | None):
    if text == "null":
        return None
    types = [t for t in schema_types(schema) if t != "null"]
    if not types:
        return text
    for t in types:
        if t == "string":
            return text
        if t == "integer":
            try:
                return int(text.strip())
            except ValueError:
                continue
        if t == "number":
            try:
                v = float(text.strip())
            except ValueError:
                continue
            if v != v or v in (float("inf"), float("-inf")):
                continue
            return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() else v
        if t == "boolean":
            s = text.strip().lower()
            if s in ("true", "false"):
                return s == "true"
            continue
        if t in ("object", "array"):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                pass
            try:
                return ast.literal_eval(text.strip())
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    return text
