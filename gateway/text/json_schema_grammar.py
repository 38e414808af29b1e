"""JSON Schema → a grammar in the language of docs/grammar.md, for structured outputs (docs/structured-outputs.md).

The grammar's `root` is the JSON value the schema describes, with bounded whitespace before and after it (a thinking
template puts "\n\n" after </think>). What is supported and what is not enforced is listed in
docs/structured-outputs.md; in short:

- type (one or a list), enum, const, properties + required (in the schema's order; required ones always present,
  optional ones may be left out, none twice), additionalProperties, items, prefixItems, minItems / maxItems,
  anyOf / oneOf (as alternatives), allOf (merged), $ref to a JSON pointer inside the schema (recursion allowed),
  string minLength / maxLength and format date / time / date-time / uuid; `{}` or `true` is any JSON value.
- additionalProperties absent on an object that declares properties means only the declared ones (what strict
  structured-output APIs do); on an object that declares none, any members (`{"type": "object"}` is any object).
- Keywords that only describe (title, description, …) are ignored; constraints it cannot enforce (pattern, minimum,
  …) are not enforced, the value still has the right type (ConversionResult.not_enforced names them).
- A schema it cannot make sense of raises SchemaError, whose message names the place (a 400 for the client).
"""
from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass, field

JSON_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")

# Keywords that describe and never constrain: ignored without a note.
ANNOTATIONS = frozenset({
    "title", "description", "examples", "example", "default", "$schema", "$id", "$comment", "$anchor", "strict",
    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "discriminator",
    "$defs", "definitions"})

# Keywords the converter enforces (the rest, other than annotations, are noted as not enforced).
HANDLED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "anyOf", "oneOf", "allOf", "$ref", "minLength", "maxLength", "format"})

MAX_REPEAT = 1000              # the grammar language's largest {m,n}
WS_INDENT = 20                 # at most this many spaces/tabs after a newline between tokens
ROOT_WS = 20                   # at most this many whitespace characters before and after the root value
INTEGER_DIGITS = 16            # digits of an integer part; of a fraction; of an exponent: 16, 16, 3

# Rules any grammar may use, defined on first use (a body may name other rules of this table).
PRIMITIVES = {
    "ws": f'( " " | "\\n" [ \\t]{{0,{WS_INDENT}}} )?',
    "char": r'[^"\\\x00-\x1f] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{4}',
    "string": r'"\"" char* "\""',
    "integer": f'"-"? ( "0" | [1-9] [0-9]{{0,{INTEGER_DIGITS - 1}}} )',
    "number": f'"-"? ( "0" | [1-9] [0-9]{{0,{INTEGER_DIGITS - 1}}} ) ( "." [0-9]{{1,{INTEGER_DIGITS}}} )? '
              r'( [eE] [+\-]? [0-9]{1,3} )?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "member": 'string ws ":" ws value ws',
    "object": r'"{" ws ( member ( "," ws member )* )? "}"',
    "array": r'"[" ws ( value ws ( "," ws value ws )* )? "]"',
    # RFC 3339 (JSON Schema's date, time and date-time formats); time and date-time need their offset.
    "date": r'[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] )',
    "time": r'( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" ( [0-5] [0-9] | "60" ) ( "." [0-9]{1,9} )? '
            r'( "Z" | [+\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )',
    "date-time": 'date "T" time',
    "uuid": r'[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}',
}
FORMATS = ("date", "time", "date-time", "uuid")
TOOL_CALL_OPEN = "<tool_call>"   # gateway/text/output_parser.py's CALL_OPEN


class SchemaError(ValueError):
    """A schema the converter cannot make sense of; the message names where (e.g. `properties.age`)."""


@dataclass
class ConversionResult:
    grammar: str
    not_enforced: list[str] = field(default_factory=list)   # e.g. ["minimum (at properties.age)", "pattern …"]


def literal(text: str) -> str:
    """A grammar literal matching exactly text (every character outside printable ASCII escaped)."""
    out = []
    for ch in text:
        c = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= c < 0x7f:
            out.append(ch)
        else:
            out.append(_escape(c))
    return '"' + "".join(out) + '"'


def _escape(c: int) -> str:
    return f"\\x{c:02x}" if c < 0x80 else f"\\u{c:04x}" if c <= 0xffff else f"\\U{c:08x}"


def _class_char(ch: str) -> str:
    return ch if ch.isascii() and ch.isalnum() else _escape(ord(ch))


def _where(path: str) -> str:
    return path or "the root"


def _at(path: str) -> str:
    """An error message's start: where in the schema (nothing at its root)."""
    return f"{path}: " if path else ""


def hint(path: str, what: str) -> str:
    """A rule name's hint: the schema path's last parts and what the rule is."""
    parts = [p for p in path.replace("[", ".").replace("]", "").split(".") if p not in ("", "properties")]
    return "-".join((parts[-2:] or ["root"]) + [what])


def _repeat(item: str, lo: int, hi: int | None) -> str:
    """item repeated lo..hi times (hi None: no limit); lo and hi at most MAX_REPEAT."""
    if hi is None:
        return f"{item}*" if lo == 0 else f"{item}+" if lo == 1 else f"{item}{{{lo},}}"
    if lo == hi:
        return "" if lo == 0 else item if lo == 1 else f"{item}{{{lo}}}"
    if (lo, hi) == (0, 1):
        return f"{item}?"
    return f"{item}{{{lo},{hi}}}"


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


class _Converter:
    def __init__(self, root_schema):
        self.root_schema = root_schema
        self.rules: dict[str, str | None] = {}     # name -> body (None while reserved), in the order written
        self.by_body: dict[str, str] = {}          # body -> the rule that has it (identical rules shared)
        self.refs: dict[str, str] = {}             # $ref -> its rule
        self.not_enforced: list[str] = []

    # ---- rules ------------------------------------------------------------------------------------------------

    def reserve(self, name_hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_-]+", "-", name_hint).strip("-") or "r"
        name, n = base, 2
        while name in self.rules or name in PRIMITIVES or name == "root":
            name, n = f"{base}-{n}", n + 1
        self.rules[name] = None
        return name

    def define(self, name: str, body: str) -> str:
        self.rules[name] = body
        self.by_body.setdefault(body, name)
        return name

    def rule(self, name_hint: str, body: str) -> str:
        """A rule with this body (an existing one if some rule has it already)."""
        if body in self.by_body:
            return self.by_body[body]
        if re.fullmatch(r"[A-Za-z0-9_-]+", body):   # just a rule name: no new rule
            return body
        return self.define(self.reserve(name_hint), body)

    def prim(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = PRIMITIVES[name]
            for other in re.findall(r"[A-Za-z][A-Za-z0-9_-]*", re.sub(r'"(\\.|[^"\\])*"|\[(\\.|[^\]\\])*\]', " ",
                                                                    PRIMITIVES[name])):
                if other in PRIMITIVES:
                    self.prim(other)
        return name

    def note(self, what: str, path: str) -> None:
        self.not_enforced.append(f"{what} (at {_where(path)})")

    def text(self, root_body: str) -> str:
        lines = [f"root ::= {root_body}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items() if body is not None]
        return "\n".join(lines) + "\n"

    # ---- $ref ---------------------------------------------------------------------------------------------------

    def resolve(self, ref, path: str):
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"{_at(path)}$ref {ref!r} is not supported: only references inside the schema "
                              f"(#/$defs/..., #/definitions/...) are")
        pointer = urllib.parse.unquote(ref[1:])
        node = self.root_schema
        if pointer == "":
            return node
        if not pointer.startswith("/"):
            raise SchemaError(f"{_at(path)}$ref {ref!r} is not supported (anchors are not; use a JSON pointer "
                              f"such as #/$defs/Name)")
        for part in pointer[1:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaError(f"{_at(path)}$ref {ref!r} points to nothing in the schema")
        return node

    def target_or_none(self, ref):
        """What ref points to; None where it points to nothing (visit() says so, naming the place)."""
        try:
            return self.resolve(ref, "")
        except SchemaError:
            return None

    def ref_rule(self, ref: str, path: str) -> str:
        if ref not in self.refs:
            target = self.resolve(ref, path)
            name = self.reserve("ref-" + (ref.rsplit("/", 1)[-1] or "root"))
            self.refs[ref] = name
            self.define(name, self.visit(target, ref.lstrip("#/").replace("/", ".") or "#"))
        return self.refs[ref]

    def check_ref_cycles(self) -> None:
        """A $ref that comes back to itself through $ref / anyOf / oneOf / allOf alone (no object or array in
        between) would be a left-recursive grammar: refused up front."""
        refs = []

        def collect(node):
            if isinstance(node, dict):
                if isinstance(node.get("$ref"), str):
                    refs.append(node["$ref"])
                for v in node.values():
                    collect(v)
            elif isinstance(node, list):
                for v in node:
                    collect(v)
        collect(self.root_schema)
        for ref in dict.fromkeys(refs):
            seen: set[int] = set()
            todo = [self.target_or_none(ref)]
            while todo:
                node = todo.pop()
                if not isinstance(node, dict) or id(node) in seen:
                    continue
                seen.add(id(node))
                if "$ref" in node:
                    if node["$ref"] == ref:
                        raise SchemaError(f"$ref {ref!r} refers back to itself without an object or array in "
                                          f"between, so it describes no finite value")
                    todo.append(self.target_or_none(node["$ref"]))
                for key in ("anyOf", "oneOf", "allOf"):
                    if isinstance(node.get(key), list):
                        todo.extend(node[key])

    # ---- allOf --------------------------------------------------------------------------------------------------

    def flatten(self, schema, path: str, depth: int = 0) -> list[dict]:
        """A schema as the dicts whose keywords all apply ($ref and allOf opened up one level at a time)."""
        if depth > 64:
            raise SchemaError(f"{_at(path)}allOf / $ref nested too deeply")
        if schema is True:
            return [{}]
        if not isinstance(schema, dict):
            raise SchemaError(f"{_at(path)}a schema must be an object or a boolean (got {schema!r})")
        out = []
        rest = {k: v for k, v in schema.items() if k not in ("$ref", "allOf")}
        out.append(rest)
        if "$ref" in schema:
            out += self.flatten(self.resolve(schema["$ref"], path), path, depth + 1)
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list) or not parts:
                raise SchemaError(f"{_at(path)}allOf must be a non-empty list of schemas")
            for i, part in enumerate(parts):
                if part is False:
                    raise SchemaError(f"{_at(f'{path}.allOf[{i}]')}the schema false allows no value")
                out += self.flatten(part, f"{path}.allOf[{i}]", depth + 1)
        return out

    def merge(self, schemas: list[dict], path: str) -> dict:
        """allOf: the schemas' keywords as one schema (properties and required joined, types intersected, the
        tightest bounds kept; a keyword both give differently otherwise: the first one's)."""
        out: dict = {}
        for s in schemas:
            for key, value in s.items():
                if key not in out:
                    out[key] = dict(value) if key == "properties" and isinstance(value, dict) else \
                        list(value) if key == "required" and isinstance(value, list) else value
                elif key == "properties" and isinstance(value, dict):
                    for name, sub in value.items():
                        out["properties"][name] = {"allOf": [out["properties"][name], sub]} \
                            if name in out["properties"] else sub
                elif key == "required" and isinstance(value, list):
                    out["required"] += [r for r in value if r not in out["required"]]
                elif key == "type":
                    a = out["type"] if isinstance(out["type"], list) else [out["type"]]
                    b = value if isinstance(value, list) else [value]
                    both = [t for t in a if t in b] + (["integer"] if "integer" in a and "number" in b
                                                       or "number" in a and "integer" in b else [])
                    if not both:
                        raise SchemaError(f"{_at(path)}allOf asks for types {a} and {b}, which nothing is")
                    out["type"] = list(dict.fromkeys(both))
                elif key == "enum" and isinstance(value, list) and isinstance(out["enum"], list):
                    out["enum"] = [v for v in out["enum"] if any(_same(v, w) for w in value)]
                elif key in ("minLength", "minItems"):
                    out[key] = max(out[key], value)
                elif key in ("maxLength", "maxItems"):
                    out[key] = min(out[key], value)
                elif key == "additionalProperties":
                    if value is False or out[key] is False:
                        out[key] = False
                elif key == "items":
                    out[key] = {"allOf": [out[key], value]}
                elif key in ("anyOf", "oneOf") and key in out and value != out[key]:
                    self.note(f"allOf of several {key}: only the first", path)
                elif key not in ANNOTATIONS and value != out[key]:
                    self.note(f"allOf giving {key} twice: only the first", path)
        return out

    # ---- schemas --------------------------------------------------------------------------------------------------

    def visit(self, schema, path: str) -> str:
        """A grammar item (a rule name or a literal) for the JSON values the schema allows."""
        if schema is True:
            return self.prim("value")
        if schema is False:
            raise SchemaError(f"{_at(path)}the schema false allows no value")
        if not isinstance(schema, dict):
            raise SchemaError(f"{_at(path)}a schema must be an object or a boolean (got {schema!r})")
        for key in schema:
            if key not in HANDLED and key not in ANNOTATIONS:
                self.note(key, path)
        constraining = {k for k in schema if k not in ANNOTATIONS}
        if "$ref" in schema and constraining == {"$ref"}:
            return self.ref_rule(schema["$ref"], path)
        if "$ref" in schema or "allOf" in schema:
            return self.visit(self.merge(self.flatten(schema, path), path), path)
        if "anyOf" in schema or "oneOf" in schema:
            return self.alternatives(schema, path)
        if "const" in schema:
            return literal(_compact(schema["const"]))
        if "enum" in schema:
            return self.enum(schema, path)
        types = schema.get("type")
        if types is None:
            if {"properties", "required", "additionalProperties"} & constraining:
                types = "object"
            elif {"items", "prefixItems", "minItems", "maxItems"} & constraining:
                types = "array"
            elif {"minLength", "maxLength", "format"} & constraining:
                types = "string"
            else:
                return self.prim("value")
        if isinstance(types, list):
            if not types:
                raise SchemaError(f"{_at(path)}type must not be an empty list")
            if len(types) == 1:
                types = types[0]
            else:
                names = [self.visit({**schema, "type": t}, f"{path}.type[{i}]") for i, t in enumerate(types)]
                return self.rule(hint(path, "types"), " | ".join(dict.fromkeys(names)))
        if types not in JSON_TYPES:
            raise SchemaError(f"{_at(path)}type {types!r} is not a JSON type (expected one of "
                              f"{', '.join(JSON_TYPES)})")
        if types == "object":
            return self.object(schema, path)
        if types == "array":
            return self.array(schema, path)
        if types == "string":
            return self.string(schema, path)
        return self.prim(types)

    def alternatives(self, schema: dict, path: str) -> str:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        if "anyOf" in schema and "oneOf" in schema:
            self.note("oneOf next to anyOf", path)
        options = schema[key]
        if not isinstance(options, list) or not options:
            raise SchemaError(f"{_at(path)}{key} must be a non-empty list of schemas")
        siblings = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf") and k not in ANNOTATIONS}
        names = []
        for i, option in enumerate(options):
            where = f"{path}.{key}[{i}]"
            if option is False:
                continue
            if siblings:   # the keywords next to anyOf apply to every option
                option = self.merge([siblings] + self.flatten(option, where), where)
            names.append(self.visit(option, where))
        if not names:
            raise SchemaError(f"{_at(path)}every option of {key} is false, so no value is allowed")
        return self.rule(hint(path, key), " | ".join(dict.fromkeys(names)))

    def enum(self, schema: dict, path: str) -> str:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{_at(path)}enum must be a non-empty list")
        types = schema.get("type")
        if types is not None:
            allowed = types if isinstance(types, list) else [types]
            values = [v for v in values if _json_type(v) in allowed or (_json_type(v) == "integer"
                                                                         and "number" in allowed)]
            if not values:
                raise SchemaError(f"{_at(path)}no value of enum has the type {types}")
        return self.rule(hint(path, "enum"), " | ".join(dict.fromkeys(literal(_compact(v)) for v in values)))

    def string(self, schema: dict, path: str) -> str:
        fmt = schema.get("format")
        if fmt in FORMATS:
            return self.rule(hint(path, fmt), f'"\\"" {self.prim(fmt)} "\\""')
        if fmt is not None:
            self.note(f"format {fmt}", path)
        lo = _count(schema, "minLength", 0, path)
        hi = _count(schema, "maxLength", None, path)
        if hi is not None and hi < lo:
            raise SchemaError(f"{_at(path)}maxLength {hi} is below minLength {lo}")
        if lo > MAX_REPEAT:
            self.note(f"minLength above {MAX_REPEAT}", path)
            lo = MAX_REPEAT
        if hi is not None and hi > MAX_REPEAT:
            self.note(f"maxLength above {MAX_REPEAT}", path)
            hi = None
        if lo == 0 and hi is None:
            return self.prim("string")
        return self.rule(hint(path, "string"), f'"\\"" {_repeat(self.prim("char"), lo, hi)} "\\""')

    def array(self, schema: dict, path: str) -> str:
        prefix = schema.get("prefixItems") or []
        if not isinstance(prefix, list):
            raise SchemaError(f"{_at(path)}prefixItems must be a list of schemas")
        items = schema.get("items", True)
        if isinstance(items, list):      # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        lo = _count(schema, "minItems", 0, path)
        hi = _count(schema, "maxItems", None, path)
        if hi is not None and hi < lo:
            raise SchemaError(f"{_at(path)}maxItems {hi} is below minItems {lo}")
        if items is False:
            if lo > len(prefix):
                raise SchemaError(f"{_at(path)}minItems {lo} needs more items than the {len(prefix)} allowed")
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and hi > MAX_REPEAT + len(prefix):
            self.note(f"maxItems above {MAX_REPEAT}", path)
            hi = None
        if lo > MAX_REPEAT:
            self.note(f"minItems above {MAX_REPEAT}", path)
            lo = MAX_REPEAT
        if hi == 0:
            return self.rule(hint(path, "array"), f'"[" {self.prim("ws")} "]"')
        ws = self.prim("ws")
        elems = [self.visit(p, f"{path}.prefixItems[{i}]") for i, p in enumerate(prefix[:hi])]
        item = self.visit(items, f"{path}.items") if items is not False and (hi is None or hi > len(elems)) else None

        # after(i): the elements from index i on, each after a comma (element 0 is written on its own).
        def after(i: int) -> str:
            if i < len(elems):
                part = _join(f'"," {ws} {elems[i]} {ws}', after(i + 1))
                return part if i < lo else f"( {part} )?"
            if item is None:
                return ""
            more = f'( "," {ws} {item} {ws} )'
            need = max(0, lo - i)
            extra = None if hi is None else hi - i - need
            return _join(_repeat(more, need, need), _repeat(more, 0, extra))
        first = elems[0] if elems else item
        body = _join(first, ws, after(1))
        inside = body if lo >= 1 else f"( {body} )?"
        return self.rule(hint(path, "array"), f'"[" {ws} {inside} "]"')

    def object(self, schema: dict, path: str) -> str:
        props = schema.get("properties") or {}
        if not isinstance(props, dict):
            raise SchemaError(f"{_at(path)}properties must be an object of schemas")
        required = schema.get("required") or []
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError(f"{_at(path)}required must be a list of property names")
        addl = schema.get("additionalProperties")
        if addl is None:
            addl = not props               # declared properties: only those; none declared: any members
        names = list(props) + [r for r in required if r not in props]
        if not names and addl is True:
            return self.prim("object")
        ws = self.prim("ws")
        kvs = []
        for name in names:
            sub = props.get(name, True)
            if sub is False:
                if name in required:
                    raise SchemaError(f"{_at(path)}property {name!r} is required but its schema is false")
                continue
            value = self.visit(sub, f"{path}.properties.{name}" if path else f"properties.{name}")
            kvs.append((name, self.rule(hint(path, f"{name}-kv"),
                                        f'{literal(_compact(name))} {ws} ":" {ws} {value} {ws}'), name in required))
        extra = None
        if addl is not False:
            value = self.visit(addl, f"{path}.additionalProperties")
            key = self.key_not_in([n for n, _, _ in kvs], path)
            extra = self.rule(hint(path, "extra-kv"), f'{key} {ws} ":" {ws} {value} {ws}')
        # rest(i): members i.. after at least one was written (each after a comma); first(i): members i.. when
        # none was written yet, at least one of them (None: nothing can come).
        n = len(kvs)
        extra_rest = f'( "," {ws} {extra} )*' if extra is not None else ""

        def rest(i: int) -> str:
            if i == n:
                return extra_rest
            _, kv, req = kvs[i]
            item = f'"," {ws} {kv}' if req else f'( "," {ws} {kv} )?'
            return self.rule(hint(path, f"rest{i}"), _join(item, rest(i + 1)))

        def first(i: int) -> str | None:
            if i == n:
                return None if extra is None else _join(extra, extra_rest)
            _, kv, req = kvs[i]
            body = _join(kv, rest(i + 1))
            later = None if req else first(i + 1)
            return self.rule(hint(path, f"first{i}"), body if later is None else f"{body} | {later}")
        start = first(0)
        if start is None:
            return self.rule(hint(path, "object"), f'"{{" {ws} "}}"')
        inside = start if any(req for _, _, req in kvs) else f"( {start} )?"
        return self.rule(hint(path, "object"), f'"{{" {ws} {inside} "}}"')

    def key_not_in(self, names: list[str], path: str) -> str:
        """A JSON string that is none of names (names needing escapes are not excluded)."""
        words = [_compact(n)[1:-1] for n in names]
        words = [w for w in words if "\\" not in w]
        if not words:
            return self.prim("string")
        char = self.prim("char")
        trie: dict = {}
        for w in words:
            node = trie
            for ch in w:
                node = node.setdefault(ch, {})
            node[""] = {}                  # a whole word ends here

        def node_rule(node: dict, prefix: str) -> str:
            children = [c for c in node if c]
            alts = [] if "" in node else [r'"\""']
            for c in children:
                alts.append(f"{literal(c)} {node_rule(node[c], prefix + c)}")
            other = "".join(_class_char(c) for c in children)
            alts.append(rf'( [^"\\\x00-\x1f{other}] | "\\" ["\\/bfnrt] | "\\u" [0-9a-fA-F]{{4}} ) {char}* "\""')
            return self.rule(hint(path, f"key{len(prefix)}"), " | ".join(alts))
        return self.rule(hint(path, "key"), f'"\\"" {node_rule(trie, "")}')


def _count(schema: dict, key: str, default, path: str):
    value = schema.get(key, default)
    if value is default:
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaError(f"{_at(path)}{key} must be a whole number >= 0 (got {value!r})")
    return value


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or isinstance(value, float) and value.is_integer():
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "?")


def _same(a, b) -> bool:
    return _compact(a) == _compact(b)


def convert(schema, *, tool_calls: bool = False) -> ConversionResult:
    """The grammar of one JSON value the schema allows (whitespace around it bounded). tool_calls: the answer may
    instead be a tool call (`<tool_call>` and any text after it), so offered tools keep working."""
    if schema is False:
        raise SchemaError("the schema false allows no value")
    if not isinstance(schema, (dict, bool)):
        raise SchemaError(f"a schema must be a JSON object (got {type(schema).__name__})")
    c = _Converter(schema)
    c.check_ref_cycles()
    value = c.visit(schema, "")
    around = f"[ \\t\\n]{{0,{ROOT_WS}}}"
    body = f"{around} {value} {around}"
    if tool_calls:
        body = f"{around} ( {value} {around} | {literal(TOOL_CALL_OPEN)} .* )"
    return ConversionResult(c.text(body), c.not_enforced)


def json_object(*, tool_calls: bool = False) -> ConversionResult:
    """The grammar of any JSON object (`json_object` mode)."""
    return convert({"type": "object"}, tool_calls=tool_calls)
