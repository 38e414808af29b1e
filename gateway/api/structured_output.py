"""Structured outputs: an API's format setting (chat response_format, Responses text.format, Anthropic
output_config.format) → the grammar the engine holds the answer to (gateway/text/json_schema_grammar.py,
docs/structured-outputs.md)."""
from __future__ import annotations

import logging

from gateway.errors import BadRequest
from gateway.text.json_schema_grammar import SchemaError, convert, json_object, literal
from gateway.text.output_parser import CALL_OPEN, FUNC_OPEN

log = logging.getLogger("gateway.structured")
MAX_GRAMMAR_BYTES = 1 << 20    # the engine's limit on a grammar's text (engine/src/serve/protocol.cpp)


def answer_grammar(kind: str | None, schema, *, tools: bool, param: str) -> str | None:
    """kind: text | json_object | json_schema (None: text, no grammar); schema: json_schema's schema (None: any JSON
    value); tools: the request offers tools, so the answer may be a tool call instead of the JSON; param: where the
    format is in the request, named by the 400 a bad schema gets."""
    if kind in (None, "text"):
        return None
    try:
        result = json_object(tool_calls=tools) if kind == "json_object" else \
            convert(True if schema is None else schema, tool_calls=tools)
    except SchemaError as e:
        raise BadRequest(f"{param}: {e}", param=param) from None
    except RecursionError:
        raise BadRequest(f"{param}: the schema is nested too deeply", param=param) from None
    if len(result.grammar.encode("utf-8")) > MAX_GRAMMAR_BYTES:
        raise BadRequest(f"{param}: the schema is too large (its grammar has {len(result.grammar)} characters, the "
                         f"engine takes {MAX_GRAMMAR_BYTES} bytes)", param=param)
    if result.not_enforced:
        log.info("%s: not enforced (the value still has the right type): %s", param, "; ".join(result.not_enforced))
    return result.grammar


def tool_call_grammar(choice_names: list[str], offered: list[str], param: str) -> str:
    """The grammar of an answer that must call a tool (OpenAI tool_choice "required" or a named function, Anthropic
    {"type": "any"} or {"type": "tool"}): after bounded whitespace, `<tool_call>` and `<function=NAME>` with NAME one
    of choice_names, then the call's parameters and anything after it free (the output parser reads them; further
    calls may follow). A named tool the request does not offer is a 400."""
    for name in choice_names:
        if name not in offered:
            raise BadRequest(f"{param}: the tool {name!r} is not among the request's tools "
                             f"({', '.join(offered) or 'none'})", param=param)
    if not choice_names:
        raise BadRequest(f"{param}: a tool call is required but the request offers no tools", param=param)
    names = " | ".join(literal(n) for n in choice_names)
    return (f"root ::= [ \\t\\n]{{0,20}} {literal(CALL_OPEN)} [ \\t\\n]{{0,4}} {literal(FUNC_OPEN)} ( {names} ) "
            f'">" .*\n')
