"""Test helpers for structured outputs (importable by name, like gateway_harness): a JSON Schema validator of the
subset gateway/text/json_schema_grammar.py supports (written here from the JSON Schema spec: jsonschema is not
installed), and `strata grammar-check` on a grammar and texts."""
from __future__ import annotations

import datetime
import os
import re
import subprocess
import tempfile
import uuid

TYPES = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
         "null": lambda v: v is None, "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
         "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
         "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
         or (isinstance(v, float) and v.is_integer())}
TIME = r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|z|[+-]([01]\d|2[0-3]):[0-5]\d)"


def _format_ok(fmt: str, s: str) -> bool:
    try:
        if fmt == "date":
            return bool(re.fullmatch(r"\d{4}-\d\d-\d\d", s)) and bool(datetime.date.fromisoformat(s))
        if fmt == "time":
            return bool(re.fullmatch(TIME, s))
        if fmt == "date-time":
            date, sep, time = s.partition("T") if "T" in s else s.partition("t")
            return bool(sep) and _format_ok("date", date) and _format_ok("time", time)
        if fmt == "uuid":
            return bool(re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", s)) and bool(uuid.UUID(s))
    except ValueError:
        return False
    return True        # formats the converter does not enforce are not checked either


def errors(value, schema, root=None, path="$") -> list[str]:
    """Where value breaks schema (empty: valid)."""
    root = schema if root is None else root
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: false schema"]
    out: list[str] = []
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#").split("/")[1:]:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        out += errors(value, node, root, path)
    for sub in schema.get("allOf", []):
        out += errors(value, sub, root, path)
    if "anyOf" in schema and not any(not errors(value, s, root, path) for s in schema["anyOf"]):
        out.append(f"{path}: matches no anyOf option")
    if "oneOf" in schema and sum(not errors(value, s, root, path) for s in schema["oneOf"]) != 1:
        out.append(f"{path}: does not match exactly one oneOf option")
    if "const" in schema and not _equal(value, schema["const"]):
        out.append(f"{path}: {value!r} is not the const {schema['const']!r}")
    if "enum" in schema and not any(_equal(value, e) for e in schema["enum"]):
        out.append(f"{path}: {value!r} is not in enum {schema['enum']!r}")
    types = schema.get("type")
    if types is not None:
        types = types if isinstance(types, list) else [types]
        if not any(TYPES[t](value) for t in types):
            return out + [f"{path}: {value!r} is not of type {types}"]
    if isinstance(value, str):
        n = len(value)
        if n < schema.get("minLength", 0) or n > schema.get("maxLength", n):
            out.append(f"{path}: length {n} outside minLength/maxLength")
        if "format" in schema and not _format_ok(schema["format"], value):
            out.append(f"{path}: {value!r} is not a {schema['format']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                out.append(f"{path}: required property {name!r} missing")
        for name, v in value.items():
            if name in props:
                out += errors(v, props[name], root, f"{path}.{name}")
            elif "additionalProperties" in schema:
                out += errors(v, schema["additionalProperties"], root, f"{path}.{name}")
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            out.append(f"{path}: {len(value)} items outside minItems/maxItems")
        for i, v in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items", True)
            out += errors(v, sub, root, f"{path}[{i}]")
    return out


def _equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def assert_valid(value, schema) -> None:
    problems = errors(value, schema)
    assert not problems, f"{value!r} breaks its schema: {problems}"


def grammar_check(engine: str, grammar: str, texts: list[str]) -> list[str]:
    """`strata grammar-check` of each text: "complete", "prefix" or "rejected at byte N"."""
    with tempfile.TemporaryDirectory() as d:
        gpath = os.path.join(d, "g.gbnf")
        with open(gpath, "w", encoding="utf-8") as f:
            f.write(grammar)
        paths = []
        for i, text in enumerate(texts):
            paths.append(os.path.join(d, f"t{i}.txt"))
            with open(paths[-1], "wb") as f:
                f.write(text.encode("utf-8"))
        r = subprocess.run([engine, "grammar-check", gpath, *paths], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"grammar-check failed ({r.returncode}): {r.stderr}{r.stdout}\n{grammar}"
        results = {}
        for line in r.stdout.splitlines():
            path, _, result = line.rpartition(": ")
            results[path] = result.strip()
        return [results[p] for p in paths]
