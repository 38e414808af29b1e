"""gateway/text/json_schema_grammar.py: each schema's grammar, run through the real engine's `strata grammar-check`,
takes valid instances (compact, with spaces, indented, after the "\n\n" a thinking template leaves) as `complete` and
never takes an invalid one; the test's own validator (schema_check.py) agrees on the instances. Bad schemas raise
SchemaError naming the place; constraints the converter cannot enforce are reported, not refused."""
from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from gateway.text.json_schema_grammar import SchemaError, convert, json_object
from schema_check import assert_valid, errors, grammar_check


def spellings(value) -> list[str]:
    """The JSON texts a model may write for a value: compact, default separators, indented, after a blank line
    (characters outside ASCII as themselves: an enum or const string is matched as written, not \\u-escaped)."""
    return [json.dumps(value, separators=(",", ":"), ensure_ascii=False), json.dumps(value, ensure_ascii=False),
            json.dumps(value, indent=2, ensure_ascii=False), "\n\n" + json.dumps(value, ensure_ascii=False) + "\n"]


def check(engine, schema, valid: list, invalid: list[str], tool_calls=False, grammar=None):
    """Every spelling of every valid value is complete; every invalid text is not (rejected, or an unfinished
    prefix); the validator agrees on the values that parse."""
    grammar = grammar or convert(schema, tool_calls=tool_calls).grammar
    texts = [t for v in valid for t in spellings(v)]
    results = grammar_check(engine, grammar, texts + invalid)
    for text, result in zip(texts, results):
        assert result == "complete", f"valid {text!r}: {result}\n{grammar}"
    for text, result in zip(invalid, results[len(texts):]):
        assert result != "complete", f"invalid {text!r} was accepted\n{grammar}"
    for v in valid:
        assert_valid(v, schema)
    return grammar


def test_primitive_types(engine_bin):
    check(engine_bin, {"type": "string"}, ["", "a b", 'quote " and \\ back', "é ü 😀", "tab\tnew\nline"],
          ['"raw\tcontrol"', '"bad \\x escape"', "'single'", '"unterminated', "12"])
    check(engine_bin, {"type": "integer"}, [0, 7, -12, 1234567890123456],
          ["01", "1.5", "+1", "1e3", "12345678901234567", '"1"', "-"])
    check(engine_bin, {"type": "number"}, [0, -0.5, 3.25, 1e21, 1.5e-7, 42],
          ["1.", ".5", "01", "NaN", "Infinity", "1e", "1e+1234", "--1"])
    check(engine_bin, {"type": "boolean"}, [True, False], ["True", "1", "null"])
    check(engine_bin, {"type": "null"}, [None], ["None", "false", '"null"'])
    check(engine_bin, {"type": ["string", "null"]}, ["x", None], ["1", "true"])


def test_whitespace_is_bounded(engine_bin):
    grammar = convert({"type": "object", "properties": {"a": {"type": "integer"}}}).grammar
    ok = ['{"a":1}', '{ "a" : 1 }', '{\n\t"a": 1\n}', " " * 20 + '{"a": 1}' + "\n" * 20]
    bad = ['{' + " " * 2 + '"a": 1}', '{\n' + " " * 21 + '"a": 1}', " " * 21 + '{"a": 1}', '{"a": 1}' + " " * 21]
    assert grammar_check(engine_bin, grammar, ok) == ["complete"] * 4
    assert all(r != "complete" for r in grammar_check(engine_bin, grammar, bad))


def test_string_length_and_formats(engine_bin):
    check(engine_bin, {"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "abcd", "é😀", 'a"\\'],
          ['"a"', '"abcde"', '""'])
    check(engine_bin, {"type": "string", "format": "date"}, ["2024-02-29", "1999-12-31"],
          ['"2024-13-01"', '"2024-1-01"', '"2024-01-32"', '"24-01-01"'])
    check(engine_bin, {"type": "string", "format": "time"}, ["12:30:00Z", "23:59:59.123+02:00"],
          ['"24:00:00Z"', '"12:30Z"', '"12:60:00Z"'])
    check(engine_bin, {"type": "string", "format": "date-time"}, ["2024-05-06T07:08:09Z", "2024-05-06T07:08:09-05:30"],
          ['"2024-05-06 07:08:09Z"', '"2024-05-06"', '"2024-05-06T07:08:09"'])
    check(engine_bin, {"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"],
          ['"123e4567e89b12d3a456426614174000"', '"123e4567-e89b-12d3-a456-42661417400g"'])


def test_enum_and_const(engine_bin):
    check(engine_bin, {"enum": ["red", 2, None, True, "é"]}, ["red", 2, None, True, "é"],
          ['"blue"', "3", "false", '"Red"', '"red '])
    check(engine_bin, {"type": "string", "enum": ["a", 1]}, ["a"], ["1"])
    check(engine_bin, {"const": {"k": [1, "x"]}}, [], ['{"k":[1,"x"]}'[:-1], '{"k":[1]}'])
    assert grammar_check(engine_bin, convert({"const": {"k": [1, "x"]}}).grammar, ['{"k":[1,"x"]}']) == ["complete"]


def test_object_required_optional_in_order(engine_bin):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                               "c": {"type": "boolean"}}, "required": ["a", "c"]}
    check(engine_bin, schema, [{"a": 1, "c": True}, {"a": 1, "b": "x", "c": False}],
          ['{"a": 1}', '{"c": true}', '{"a": 1, "b": "x"}', '{"c": true, "a": 1}', '{"a": 1, "a": 2, "c": true}',
           '{"a": 1, "c": true, "d": 0}', '{"a": 1,, "c": true}', '{"a": 1, "c": true,}', "{}"])
    only_optional = {"type": "object", "properties": {"x": {"type": "null"}, "y": {"type": "null"}}}
    check(engine_bin, only_optional, [{}, {"x": None}, {"y": None}, {"x": None, "y": None}],
          ['{"y": null, "x": null}', '{"x": null, "x": null}', '{,}', '{"z": null}'])


def test_additional_properties(engine_bin):
    open_schema = {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
                   "required": ["a"], "additionalProperties": True}
    check(engine_bin, open_schema, [{"a": 1}, {"a": 1, "ab": 2, "abc": [1, {"x": None}], "": "s", "b": {}}],
          ['{"a": 1, "a": 2}', '{"a": 1, "ab": 2, "ab": 3}', '{"zz": 1}'])
    typed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    check(engine_bin, typed, [{}, {"a": 1, "note": "x"}, {"k": "v"}], ['{"k": 1}', '{"a": "1"}'])
    closed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    check(engine_bin, closed, [{}, {"a": 1}], ['{"b": 1}'])
    # No additionalProperties: only the declared properties; none declared: any object.
    check(engine_bin, {"type": "object", "properties": {"a": {"type": "integer"}}}, [{"a": 1}], ['{"b": 1}'])
    check(engine_bin, {"type": "object"}, [{}, {"any": [1, {"thing": None}], "x": "y"}], ["[]", '"{}"'])
    check(engine_bin, {}, [{}, {"x": 1}], [], grammar=json_object().grammar)
    assert grammar_check(engine_bin, json_object().grammar, ["[1]", "1", '"s"']) == ["rejected at byte 0"] * 3


def test_arrays(engine_bin):
    check(engine_bin, {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
          [[1], [1, 2, 3]], ["[]", "[1, 2, 3, 4]", '[1, "2"]', "[1,]", "[,1]"])
    check(engine_bin, {"type": "array", "items": {"type": "string"}}, [[], ["a", "b"]], ["[1]"])
    check(engine_bin, {"type": "array"}, [[], [1, "a", None, [{}]]], ["{}"])
    tuple_closed = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}
    check(engine_bin, tuple_closed, [[], ["a"], ["a", 1]], ['[1]', '["a", 1, 2]', '["a", "b"]'])
    tuple_open = {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}, "minItems": 2,
                  "maxItems": 4}
    check(engine_bin, tuple_open, [["a", True], ["a", True, False, True]],
          ['["a"]', '["a", true, true, true, true]', '[true, true]', '["a", "b"]'])
    check(engine_bin, {"type": "array", "maxItems": 0}, [[]], ["[1]"])


def test_any_of_one_of_all_of(engine_bin):
    check(engine_bin, {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer"}]}, ["ab", 5],
          ['"abc"', "1.5", "null"])
    one_of = {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                         "required": ["kind", "r"]},
                        {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                         "required": ["kind", "side"]}]}
    check(engine_bin, one_of, [{"kind": "circle", "r": 1.5}, {"kind": "square", "side": 2}],
          ['{"kind": "circle", "side": 2}', '{"kind": "triangle", "r": 1}'])
    all_of = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                        {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}
    check(engine_bin, all_of, [{"a": 1, "b": "x"}], ['{"a": 1}', '{"b": "x"}', '{"a": 1, "b": 2}'])
    # Keywords next to anyOf apply to every option.
    check(engine_bin, {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
          [{"a": 1}, {"b": 2}, {"a": 1, "b": 2}], ["{}"])


def test_refs_and_recursion(engine_bin):
    tree = {"$defs": {"Node": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 2}}, "required": ["name"]}},
        "$ref": "#/$defs/Node"}
    deep = {"name": "a", "kids": [{"name": "b", "kids": [{"name": "c", "kids": []}]}, {"name": "d"}]}
    check(engine_bin, tree, [{"name": "r"}, deep],
          ['{"name": "a", "kids": [{}]}', '{"name": "a", "kids": [{"name": 1}]}',
           '{"name": "a", "kids": [{"name": "b"}, {"name": "c"}, {"name": "d"}]}'])
    linked = {"definitions": {"Cell": {"type": "object", "properties": {
        "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/definitions/Cell"}, {"type": "null"}]}},
        "required": ["v", "next"], "additionalProperties": False}}, "$ref": "#/definitions/Cell"}
    check(engine_bin, linked, [{"v": 1, "next": None}, {"v": 1, "next": {"v": 2, "next": {"v": 3, "next": None}}}],
          ['{"v": 1, "next": {"v": 2}}', '{"v": 1}'])
    to_root = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    check(engine_bin, to_root, [{}, {"child": {"child": {}}}], ['{"child": 1}'])
    escaped = {"$defs": {"a/b": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/a~1b"}}}
    check(engine_bin, escaped, [{"x": 1}], ['{"x": "1"}'])


class Pet(BaseModel):
    kind: str = Field(max_length=10)
    legs: int


class Owner(BaseModel):
    name: str = Field(max_length=20)
    nick: str | None = None
    pets: list[Pet] = Field(max_length=3)
    mood: str = Field(json_schema_extra={"enum": ["happy", "sad"]})


def test_pydantic_schemas_as_the_sdks_send_them(engine_bin):
    """The openai SDK's strict schema and the anthropic SDK's transformed one, of the same model."""
    from anthropic.lib._parse._transform import transform_schema
    from openai.lib._pydantic import to_strict_json_schema
    owner = Owner(name="Ann", pets=[Pet(kind="cat", legs=4)], mood="happy")
    for schema in (Owner.model_json_schema(), to_strict_json_schema(Owner), transform_schema(Owner)):
        value = json.loads(owner.model_dump_json())
        check(engine_bin, schema, [value, {**value, "nick": "A"}],
              ['{"name": "Ann", "pets": [], "mood": "ok"}', '{"name": "Ann"}'])


def test_tool_call_alternative(engine_bin):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    call = "<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>"
    check(engine_bin, schema, [{"a": 1}], ["<tool_cal", "text"], tool_calls=True)
    assert grammar_check(engine_bin, convert(schema, tool_calls=True).grammar, [call, "\n" + call, "<tool_cal"]) \
        == ["complete", "complete", "prefix"]
    assert grammar_check(engine_bin, convert(schema).grammar, [call]) == ["rejected at byte 0"]


@pytest.mark.parametrize("schema,message", [
    ({"$ref": "#/$defs/Missing"}, "points to nothing"),
    ({"$ref": "https://example.com/s.json"}, "only references inside the schema"),
    ({"type": "text"}, "not a JSON type"),
    ({"type": "object", "properties": {"a": {"type": "int"}}}, "properties.a: type 'int'"),
    ({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}, {"type": "null"}]}}, "$ref": "#/$defs/A"}, "refers back"),
    (False, "allows no value"),
    ({"enum": []}, "enum must be a non-empty list"),
    ({"anyOf": []}, "anyOf must be a non-empty list"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "maxLength 2 is below minLength 5"),
    ({"type": "array", "maxItems": -1}, "maxItems must be a whole number"),
    ({"type": "object", "required": "a"}, "required must be a list"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "nothing is"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_schemas_raise(schema, message):
    with pytest.raises(SchemaError, match=message.replace("$", r"\$").replace("(", r"\(")):
        convert(schema)


def test_unenforced_constraints_are_reported_not_refused(engine_bin):
    schema = {"type": "object", "title": "T", "description": "d", "$schema": "x", "strict": True,
              "properties": {"n": {"type": "integer", "minimum": 5, "examples": [7]},
                             "s": {"type": "string", "pattern": "^a", "format": "email"}}, "required": ["n", "s"]}
    result = convert(schema)
    text = "; ".join(result.not_enforced)
    assert "minimum (at properties.n)" in text and "pattern (at properties.s)" in text and "format email" in text
    assert not any(w in text for w in ("title", "description", "examples", "$schema", "strict"))
    # Still the right types: an integer below the minimum passes, a string for n does not.
    assert grammar_check(engine_bin, result.grammar, ['{"n": 1, "s": "b"}', '{"n": "1", "s": "b"}']) == \
        ["complete", "rejected at byte 6"]
    assert errors({"n": 1, "s": "b"}, {"type": "object"}) == []
