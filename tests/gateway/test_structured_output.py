"""Structured outputs end to end: the official openai and anthropic SDKs → the real gateway → the real CPU engine on
the shipped demo model. The demo model was trained on chat only and knows no JSON, so every valid answer here is the
grammar's doing. Each answer must parse and validate against its schema (schema_check.py); the SDKs' pydantic parse
paths must give their objects; thinking still comes first; offered tools still work; bad schemas are 400s; an
engine that refuses a grammar gives a 500, not a hang."""
from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import uuid
from typing import Literal

import pytest
from pydantic import BaseModel, Field

import strata_testing  # noqa: F401  (puts engine/tools on sys.path for demo_model)
from demo_model import data  # noqa: E402
from demo_model.train import SEED  # noqa: E402
from gateway.engine.protocol import format_gen
from gateway.text.json_schema_grammar import json_object
from gateway_harness import REPO, Gateway
from schema_check import assert_valid, grammar_check

DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "age": {"type": "integer"},
    "kind": {"enum": ["cat", "dog", "human"]},
    "version": {"const": 2},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    "address": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 10},
        "zip": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, "required": ["city", "zip"]},
    "score": {"type": "number"},
    "born": {"type": "string", "format": "date"},
    "ok": {"type": "boolean"}},
    "required": ["name", "age", "kind", "version", "tags", "address", "score", "born", "ok"],
    "additionalProperties": False}

LINKED = {"$defs": {"Cell": {"type": "object", "properties": {
    "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/Cell"}, {"type": "null"}]}},
    "required": ["v", "next"], "additionalProperties": False}}, "$ref": "#/$defs/Cell"}

SMALL = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 8},
                                          "sure": {"type": "boolean"}}, "required": ["answer", "sure"]}


class Weather(BaseModel):
    city: str = Field(max_length=12)
    celsius: int
    sky: Literal["sunny", "cloudy", "rain"]
    wind: float | None


class Reading(BaseModel):
    """No free strings: the anthropic SDK moves maxLength into the description, so only closed values here."""
    station: Literal["north", "south"]
    day: datetime.date
    id: uuid.UUID
    kelvin: int
    valid: bool


@pytest.fixture(scope="module")
def gateway(engine_bin):
    """The demo model behind the gateway; conftest's oai and claude fixtures (the official SDKs) talk to it."""
    gw = Gateway(DEMO, engine_bin, ctx=4096)
    yield gw
    gw.stop()


def json_schema(schema, name="answer"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def user(text="Tell me about it."):
    return [{"role": "user", "content": text}]


def chat_stream(oai, **request):
    """(reasoning, content, finish_reason) of a streamed chat completion."""
    reasoning, content, finish = "", "", None
    for chunk in oai.chat.completions.create(model="demo", stream=True, **request):
        for choice in chunk.choices:
            delta = choice.delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            content += delta.content or ""
            finish = choice.finish_reason or finish
    return reasoning, content, finish


# ---- chat completions -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("schema", [PERSON, LINKED, SMALL], ids=["nested", "ref-recursion", "small"])
def test_chat_json_schema_stream_and_not(oai, schema):
    request = dict(messages=user("Describe a person."), response_format=json_schema(schema), max_tokens=400,
                   reasoning_effort="none")
    r = oai.chat.completions.create(model="demo", **request)
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    assert_valid(json.loads(choice.message.content), schema)
    reasoning, content, finish = chat_stream(oai, **request)
    assert (reasoning, content, finish) == ("", choice.message.content, "stop")


def test_enum_const_required_are_honoured(oai):
    r = oai.chat.completions.create(model="demo", messages=user(), response_format=json_schema(PERSON),
                                    max_tokens=400, reasoning_effort="none")
    value = json.loads(r.choices[0].message.content)
    assert list(value) == list(PERSON["properties"])          # every required property, in the schema's order
    assert value["kind"] in ("cat", "dog", "human") and value["version"] == 2
    assert len(value["tags"]) <= 3 and all(len(t) <= 6 for t in value["tags"])
    datetime.date.fromisoformat(value["born"])


def test_thinking_comes_first_then_json(oai):
    request = dict(messages=user("What is the weather in Paris?"), response_format=json_schema(SMALL),
                   max_tokens=400, reasoning_effort="low")
    r = oai.chat.completions.create(model="demo", **request)
    message = r.choices[0].message
    assert r.choices[0].finish_reason == "stop"
    assert (message.model_extra or {}).get("reasoning_content"), "the reasoning is free text, before the JSON"
    assert "{" not in message.model_extra["reasoning_content"]
    assert_valid(json.loads(message.content), SMALL)
    assert chat_stream(oai, **request) == (message.model_extra["reasoning_content"], message.content, "stop")


def test_text_format_leaves_the_answer_free(oai):
    free = oai.chat.completions.create(model="demo", messages=user("Hi"), max_tokens=30, reasoning_effort="none")
    text = oai.chat.completions.create(model="demo", messages=user("Hi"), max_tokens=30, reasoning_effort="none",
                                       response_format={"type": "text"})
    assert text.choices[0].message.content == free.choices[0].message.content
    assert not free.choices[0].message.content.lstrip().startswith("{")


def test_json_object_mode(oai, engine_bin):
    """The untrained model never closes a free string, so the answer runs to max_tokens; it is still a prefix of a
    JSON object all the way (and one when it does finish)."""
    grammar = json_object().grammar
    for stream in (False, True):
        request = dict(messages=user("Hi"), response_format={"type": "json_object"}, max_tokens=40,
                       reasoning_effort="none")
        if stream:
            _, content, finish = chat_stream(oai, **request)
        else:
            r = oai.chat.completions.create(model="demo", **request)
            content, finish = r.choices[0].message.content, r.choices[0].finish_reason
        assert content.startswith("{")
        assert grammar_check(engine_bin, grammar, [content]) == ["complete" if finish == "stop" else "prefix"]
        if finish == "stop":
            assert isinstance(json.loads(content), dict)


def test_openai_sdk_parse(oai):
    for parse in (oai.chat.completions.parse, oai.beta.chat.completions.parse):
        r = parse(model="demo", messages=user("Weather in Rome?"), response_format=Weather, max_tokens=300,
                  reasoning_effort="none")
        parsed = r.choices[0].message.parsed
        assert isinstance(parsed, Weather) and len(parsed.city) <= 12
        assert parsed == Weather.model_validate_json(r.choices[0].message.content)
    thinking = oai.chat.completions.parse(model="demo", messages=user("Weather in Rome?"), response_format=Weather,
                                          max_tokens=400, reasoning_effort="low")
    assert isinstance(thinking.choices[0].message.parsed, Weather)
    assert thinking.choices[0].message.model_extra.get("reasoning_content")


def test_tools_still_work_with_a_response_format(oai):
    """A request that offers tools may get a tool call instead of the JSON (the grammar's <tool_call> branch)."""
    case = next(c for c in data.held_out_cases(SEED, 32) if c.kind == "tool_call" and c.effort == "none")
    messages = [m for m in case.messages if m["role"] in ("system", "user")][:2]
    expected = case.expected["tool_call"]
    r = oai.chat.completions.create(model="demo", messages=messages, tools=case.tools, max_tokens=200,
                                    reasoning_effort="none", response_format=json_schema(SMALL))
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == expected["name"] and json.loads(call.function.arguments) == expected["arguments"]
    # tool_choice none: no tools, so the answer is the JSON.
    r = oai.chat.completions.create(model="demo", messages=messages, tools=case.tools, tool_choice="none",
                                    max_tokens=200, reasoning_effort="none", response_format=json_schema(SMALL))
    assert not r.choices[0].message.tool_calls
    assert_valid(json.loads(r.choices[0].message.content), SMALL)


@pytest.mark.parametrize("response_format,message", [
    (json_schema({"$ref": "#/$defs/Nope"}), "response_format.json_schema.schema: $ref '#/$defs/Nope' points to "
                                           "nothing"),
    (json_schema({"type": "object", "properties": {"a": {"type": "str"}}}), "properties.a: type 'str' is not a JSON"),
    (json_schema({"enum": []}), "enum must be a non-empty list"),
    ({"type": "xml"}, "response_format.type"),
    ({"type": "json_schema"}, "needs a json_schema object"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}, "response_format.json_schema.schema"),
])
def test_chat_bad_response_format_is_400(oai, response_format, message):
    import openai
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            oai.chat.completions.create(model="demo", messages=user(), max_tokens=5, stream=stream,
                                        response_format=response_format)
        assert e.value.status_code == 400 and message in e.value.body["message"], e.value.body


# ---- responses ----------------------------------------------------------------------------------------------------

def test_responses_parse_and_stream(oai):
    r = oai.responses.parse(model="demo", input="Weather in Oslo?", text_format=Weather, max_output_tokens=300,
                            reasoning={"effort": "none"})
    assert r.status == "completed" and isinstance(r.output_parsed, Weather)
    assert r.text.format.type == "json_schema" and r.text.format.name == "Weather"
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    events = list(oai.responses.create(model="demo", input="Describe a person.", text={"format": fmt},
                                       max_output_tokens=400, reasoning={"effort": "low"}, stream=True))
    done = events[-1].response
    assert done.status == "completed", done
    assert done.output[0].type == "reasoning" and done.output[-1].type == "message"
    assert_valid(json.loads(done.output_text), PERSON)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == done.output_text


def test_responses_json_object_and_bad_schema(oai, engine_bin):
    import openai
    r = oai.responses.create(model="demo", input="Hi", text={"format": {"type": "json_object"}},
                             max_output_tokens=30, reasoning={"effort": "none"})
    assert r.output_text.startswith("{") and grammar_check(engine_bin, json_object().grammar, [r.output_text]) \
        == ["complete" if r.status == "completed" else "prefix"]
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="demo", input="Hi", max_output_tokens=5, text={"format": {
            "type": "json_schema", "name": "x", "schema": {"type": "object", "required": "a"}}})
    assert "text.format.schema: required must be a list" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="demo", input="Hi", max_output_tokens=5, text={"format": {"type": "yaml"}})
    assert e.value.body["param"] == "text.format.type"


# ---- anthropic messages ------------------------------------------------------------------------------------------

def test_anthropic_sdk_parse(claude):
    r = claude.messages.parse(model="demo", max_tokens=300, messages=user("A reading, please."),
                              output_format=Reading, thinking={"type": "disabled"})
    assert r.stop_reason == "end_turn" and [b.type for b in r.content] == ["text"]
    assert isinstance(r.parsed_output, Reading)
    thinking = claude.messages.parse(model="demo", max_tokens=400, messages=user("A reading, please."),
                                     output_format=Reading, output_config={"effort": "low"})
    assert [b.type for b in thinking.content] == ["thinking", "text"]
    assert isinstance(thinking.parsed_output, Reading)


def test_anthropic_output_config_stream(claude):
    request = dict(model="demo", max_tokens=400, messages=user("Describe a person."),
                   output_config={"format": {"type": "json_schema", "schema": LINKED}}, thinking={"type": "disabled"})
    with claude.messages.stream(**request) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn"
    assert_valid(json.loads(text), LINKED)
    assert claude.messages.create(**request).content[0].text == text


def test_anthropic_bad_schema_is_400(claude):
    import anthropic
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="demo", max_tokens=5, messages=user(), output_config={
            "format": {"type": "json_schema", "schema": {"type": "object", "properties": {"a": {"$ref": "#/x"}}}}})
    body = e.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "output_config.format.schema: properties.a: $ref '#/x' points to nothing" in body["error"]["message"]


# ---- the GEN line and engine refusals ----------------------------------------------------------------------------

def test_gen_line_carries_the_grammar():
    grammar = 'root ::= "é" [a-z]{0,3}\n'
    line = format_gen(5, [1, 2], {"temperature": 0.5}, grammar=grammar, grammar_after=25)
    keys = dict(f.split("=", 1) for f in line.split()[2:-1])
    raw = keys["grammar"]
    assert "=" not in raw and "+" not in raw and "/" not in raw
    assert base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode() == grammar
    assert keys["grammar_after"] == "25" and line.endswith(" 1,2")
    assert "grammar" not in format_gen(5, [1], grammar_after=25)


def test_engine_refusing_a_grammar_is_a_500(engine_bin, monkeypatch):
    """A grammar the engine refuses (a converter bug) ends the request with a 500 naming it, stream or not, and the
    next request runs; here the gateway runs in-process, its converter replaced by one that writes a bad grammar."""
    from aiohttp.test_utils import TestClient, TestServer

    from gateway.api import openai_routes
    from gateway.app import build_app
    from gateway.settings import parse_settings
    monkeypatch.setattr(openai_routes, "answer_grammar",
                        lambda kind, *a, **k: None if kind in (None, "text") else "root ::= undefined-rule\n")

    async def run():
        app = build_app(parse_settings(["--model", DEMO, "--engine", engine_bin, "--ctx", "4096"]))
        async with TestClient(TestServer(app)) as client:
            body = {"model": "demo", "messages": user(), "max_tokens": 5, "response_format": {"type": "json_object"}}
            r = await asyncio.wait_for(client.post("/v1/chat/completions", json=body), 60)
            error = await r.json()
            r2 = await asyncio.wait_for(client.post("/v1/chat/completions", json={**body, "stream": True}), 60)
            streamed = await asyncio.wait_for(r2.text(), 60)
            ok = await client.post("/v1/chat/completions", json={**body, "response_format": {"type": "text"}})
            return r.status, error, r2.status, streamed, ok.status
    status, error, stream_status, streamed, ok = asyncio.run(run())
    assert status == 500 and error["error"]["type"] == "server_error"
    assert "refused the grammar" in error["error"]["message"] and "bad grammar" in error["error"]["message"]
    assert stream_status == 200 and "refused the grammar" in streamed and streamed.rstrip().endswith("[DONE]")
    assert ok == 200


# ---- forced tool calls (tool_choice) ------------------------------------------------------------------------------

def tool_chat_case():
    """A held-out case whose answer, with tools offered, is plain chat: the model calls no tool unless made to."""
    case = next(c for c in data.held_out_cases(SEED, 32) if c.kind == "tool_chat" and c.effort == "none")
    return [m for m in case.messages if m["role"] in ("system", "user")][:2], case.tools


def test_chat_tool_choice_forces_a_call(oai):
    messages, tools = tool_chat_case()
    names = [t["function"]["name"] for t in tools]
    free = oai.chat.completions.create(model="demo", messages=messages, tools=tools, max_tokens=120,
                                       reasoning_effort="none")
    assert free.choices[0].finish_reason == "stop" and not free.choices[0].message.tool_calls   # the model chats
    r = oai.chat.completions.create(model="demo", messages=messages, tools=tools, tool_choice="required",
                                    max_tokens=200, reasoning_effort="none")
    assert r.choices[0].finish_reason == "tool_calls" and r.choices[0].message.tool_calls[0].function.name in names
    for name in names[1:3]:   # a named function, streamed and not
        choice = {"type": "function", "function": {"name": name}}
        r = oai.chat.completions.create(model="demo", messages=messages, tools=tools, tool_choice=choice,
                                        max_tokens=200, reasoning_effort="none")
        assert [c.function.name for c in r.choices[0].message.tool_calls][0] == name
        started = [c.choices[0].delta.tool_calls[0].function.name
                   for c in oai.chat.completions.create(model="demo", messages=messages, tools=tools,
                                                        tool_choice=choice, max_tokens=200, reasoning_effort="none",
                                                        stream=True)
                   if c.choices and c.choices[0].delta.tool_calls and c.choices[0].delta.tool_calls[0].function.name]
        assert started[0] == name


def test_tool_choice_with_thinking(oai):
    messages, tools = tool_chat_case()
    r = oai.chat.completions.create(model="demo", messages=messages, tools=tools, tool_choice="required",
                                    max_tokens=400, reasoning_effort="low")
    msg = r.choices[0].message
    assert (msg.model_extra or {}).get("reasoning_content") and msg.tool_calls, msg


def test_tool_choice_naming_an_unknown_tool_is_400(oai, claude):
    import anthropic
    import openai
    messages, tools = tool_chat_case()
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="demo", messages=messages, tools=tools, max_tokens=20,
                                    tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "'nope' is not among the request's tools" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="demo", messages=messages, max_tokens=20, tool_choice="required")
    assert "offers no tools" in str(e.value)
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="demo", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
                               tools=[{"name": "a", "input_schema": {"type": "object"}}],
                               tool_choice={"type": "tool", "name": "b"})
    assert "'b' is not among" in str(e.value)


def test_anthropic_tool_choice(claude):
    messages, tools = tool_chat_case()
    atools = [{"name": t["function"]["name"], "description": t["function"]["description"],
               "input_schema": t["function"]["parameters"]} for t in tools]
    user_text = next(m["content"] for m in messages if m["role"] == "user")
    r = claude.messages.create(model="demo", max_tokens=200, messages=[{"role": "user", "content": user_text}],
                               tools=atools, tool_choice={"type": "any"}, thinking={"type": "disabled"})
    assert r.stop_reason == "tool_use" and any(b.type == "tool_use" for b in r.content)
    name = atools[2]["name"]
    r = claude.messages.create(model="demo", max_tokens=200, messages=[{"role": "user", "content": user_text}],
                               tools=atools, tool_choice={"type": "tool", "name": name}, thinking={"type": "disabled"})
    assert [b.name for b in r.content if b.type == "tool_use"][0] == name


def test_responses_tool_choice(oai):
    messages, tools = tool_chat_case()
    user_text = next(m["content"] for m in messages if m["role"] == "user")
    rtools = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
               "parameters": t["function"]["parameters"]} for t in tools]
    r = oai.responses.create(model="demo", input=user_text, tools=rtools, tool_choice="required",
                             reasoning={"effort": "none"}, max_output_tokens=200)
    assert any(item.type == "function_call" for item in r.output)
    name = rtools[3]["name"]
    r = oai.responses.create(model="demo", input=user_text, tools=rtools, reasoning={"effort": "none"},
                             tool_choice={"type": "function", "name": name}, max_output_tokens=200)
    assert [item.name for item in r.output if item.type == "function_call"][0] == name
