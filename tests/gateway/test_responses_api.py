"""POST /v1/responses (and GET /v1/responses/{id}) through the official openai SDK against the real gateway, engine
and tiny real-vocabulary model: string and list input, instructions, the stream's event order, stream = non-stream,
max_output_tokens → incomplete, the answer text's logprobs, function_call items rendered as chat tool calls,
previous_response_id, store false, namespace tools and hosted tools left out, 400s (unknown previous response,
malformed JSON, too long, pictures without vision), a client leaving mid-stream, an error event when the engine dies
mid-stream; the Delta → output item mapping as a unit; a real tool round trip on the demo model. Prompt sizes are
compared with /v1/chat/completions for the same conversation: the one rendering path makes them equal."""
from __future__ import annotations

import json
import os
import signal
import time

import openai
import pytest
import requests

from gateway.api.responses_input import input_messages, to_job
from gateway.api.responses_models import ResponsesRequest
from gateway.api.responses_output import OutputItems
from gateway.text.output_parser import Delta
from gateway_harness import Gateway
from test_demo_model_round_trips import DEMO, DEMO_MTP, assert_answer_uses, held_out_case, question, run_tool
from test_faults import engine_cancels
from test_images import png_url

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city", "strict": False,
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k not in ("type", "strict")}}
              for t in TOOLS]
TEXT_DELTAS = ("response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta")
TEXT_DONES = {"response.output_text.done": "text", "response.reasoning_text.done": "text",
              "response.function_call_arguments.done": "arguments"}


def input_tokens(oai, **request) -> int:
    return oai.responses.create(model="m", max_output_tokens=1, **request).usage.input_tokens


def chat_prompt_tokens(oai, messages, **extra) -> int:
    return oai.chat.completions.create(model="m", messages=messages, max_tokens=1, **extra).usage.prompt_tokens


def item_texts(output) -> list[tuple[str, str]]:
    """(type, text) per output item: reasoning text, message text, or a call's name and arguments."""
    out = []
    for item in output:
        if item.type == "reasoning":
            out.append(("reasoning", "".join(c.text for c in item.content or [])))
        elif item.type == "message":
            out.append(("message", "".join(c.text for c in item.content)))
        else:
            out.append((item.type, f"{item.name} {item.arguments}"))
    return out


def check_events(events):
    """The stream's rules: created and in_progress first, completed / incomplete last, sequence numbers 0, 1, 2 …,
    one item open at a time (added before its deltas, done after them), each done's text the deltas joined, and
    the final response holding the streamed items. Returns the final response."""
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    added, done, text = {}, {}, {}
    for e in events[2:-1]:
        i = e.output_index
        if e.type == "response.output_item.added":
            assert i == len(added) and set(done) == set(added), (e, added, done)   # the previous item is done
            added[i] = e.item
            text[i] = ""
            continue
        assert i in added and i not in done, e
        if e.type == "response.output_item.done":
            assert e.item.id == added[i].id and e.item.status in ("completed", "incomplete")
            done[i] = e.item
            continue
        assert e.item_id == added[i].id, e
        if e.type in TEXT_DELTAS:
            text[i] += e.delta
        elif e.type in TEXT_DONES:
            assert getattr(e, TEXT_DONES[e.type]) == text[i]
    assert set(done) == set(added)
    final = events[-1].response
    assert [o.id for o in final.output] == [done[i].id for i in sorted(done)]
    assert item_texts(final.output) == item_texts([done[i] for i in sorted(done)])
    return final


def stream_events(oai, **request) -> list:
    return list(oai.responses.create(model="m", stream=True, **request))


# ---- the mapping, as units -----------------------------------------------------------------------------------------

def test_output_items_from_deltas():
    """Reasoning, text and two tool calls become four items in order, each with its events."""
    out = OutputItems()
    deltas = [Delta("reasoning", "Think"), Delta("reasoning", "ing."), Delta("content", "Calling."),
              Delta("tool_start", index=0, call_id="call_a", name="get_weather"),
              Delta("tool_args", '{"city": ', index=0), Delta("tool_args", '"Paris"}', index=0),
              Delta("tool_end", index=0),
              Delta("tool_start", index=1, call_id="call_b", name="get_time"), Delta("tool_args", "{}", index=1),
              Delta("tool_end", index=1)]
    events = [e for d in deltas for e in out.add(d)] + out.close()
    kinds = [e["type"].removeprefix("response.") for e in events]
    assert kinds == ["output_item.added", "content_part.added", "reasoning_text.delta", "reasoning_text.delta",
                     "reasoning_text.done", "content_part.done", "output_item.done",
                     "output_item.added", "content_part.added", "output_text.delta", "output_text.done",
                     "content_part.done", "output_item.done",
                     "output_item.added", "function_call_arguments.delta", "function_call_arguments.delta",
                     "function_call_arguments.done", "output_item.done",
                     "output_item.added", "function_call_arguments.delta", "function_call_arguments.done",
                     "output_item.done"]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1, 2, 3]
    reasoning, message, call_a, call_b = out.items
    assert reasoning["id"].startswith("rs_") and reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Thinking."}]
    assert message["id"].startswith("msg_") and message["role"] == "assistant"
    assert message["content"] == [{"type": "output_text", "text": "Calling.", "annotations": []}]
    assert call_a["id"].startswith("fc_") and (call_a["call_id"], call_a["name"]) == ("call_a", "get_weather")
    assert json.loads(call_a["arguments"]) == {"city": "Paris"} and call_b["arguments"] == "{}"
    assert all(i["status"] == "completed" for i in out.items)
    assert out.reasoning == "Thinking."
    # The items played back as input make the chat turn the model produced.
    assert input_messages(ResponsesRequest.model_validate({"input": out.items}).input) == [
        {"role": "assistant", "content": "Calling.", "reasoning_content": "Thinking.", "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": call_a["arguments"]}},
            {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}]


def test_input_items_to_chat_messages():
    req = ResponsesRequest.model_validate({
        "instructions": "Be brief.", "tools": TOOLS, "reasoning": {"effort": "low", "summary": "auto"},
        "max_output_tokens": 7, "temperature": 0.5, "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                         {"type": "input_text", "text": "in Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
            {"role": "developer", "content": "Use Celsius."},
            {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]})
    job, conversation = to_job(req, [{"role": "user", "content": "earlier"}])
    assert job.messages[0] == {"role": "system", "content": "Be brief."} and job.messages[1:] == conversation
    assert conversation == [
        {"role": "user", "content": "earlier"},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Look it up.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "developer", "content": "Use Celsius."},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    assert job.tools == CHAT_TOOLS and job.effort == "low" and job.max_tokens == 7
    assert job.sampling == {"temperature": 0.5}
    # Reasoning after the turn's text joins that turn; reasoning with no turn after it is dropped.
    assert input_messages(ResponsesRequest.model_validate({"input": [
        {"role": "assistant", "content": "A."}, {"type": "reasoning", "summary": [{"type": "summary_text",
                                                                                   "text": "Then call."}]},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "ok"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Lost."}]},
        {"role": "user", "content": "Go on."}]}).input) == [
        {"role": "assistant", "content": "A.", "reasoning_content": "Then call.", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"}, {"role": "user", "content": "Go on."}]
    none = to_job(ResponsesRequest.model_validate({"input": "hi", "tools": TOOLS, "tool_choice": "none"}), [])[0]
    assert none.tools is None


# ---- through the gateway -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("effort", ["none", None])
def test_stream_equals_non_stream(oai, effort):
    """Greedy: the streamed items equal the non-stream ones, and the stream's events are well formed."""
    request = dict(input="Tell me about the sea.", max_output_tokens=16,
                   **({"reasoning": {"effort": effort}} if effort else {}))
    r = oai.responses.create(model="m", **request)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "incomplete"
    assert r.usage.output_tokens == 16 and r.usage.total_tokens == r.usage.input_tokens + 16
    final = check_events(stream_events(oai, **request))
    assert item_texts(final.output) == item_texts(r.output) and item_texts(r.output)
    assert final.usage.input_tokens == r.usage.input_tokens and final.usage.output_tokens == 16
    kinds = [t for t, _ in item_texts(r.output)]
    if effort == "none":
        assert kinds == ["message"] and r.output_text == final.output_text and r.output_text
        assert r.usage.output_tokens_details.reasoning_tokens == 0
    else:                                 # thinking on: the answer starts as reasoning
        assert kinds[0] == "reasoning" and r.output[0].id.startswith("rs_")
        assert r.usage.output_tokens_details.reasoning_tokens > 0


def test_instructions_and_echoed_settings(oai):
    with_instructions = oai.responses.create(model="m", input="Hi", instructions="Answer in French.",
                                             max_output_tokens=1, temperature=0.0, metadata={"k": "v"},
                                             text={"format": {"type": "text"}}, truncation="auto", user="me")
    assert with_instructions.usage.input_tokens == chat_prompt_tokens(
        oai, [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hi"}])
    assert with_instructions.usage.input_tokens > input_tokens(oai, input="Hi")
    assert with_instructions.instructions == "Answer in French." and with_instructions.metadata == {"k": "v"}
    assert with_instructions.max_output_tokens == 1 and with_instructions.store is True


def test_list_input_multi_turn(oai):
    items = [{"role": "developer", "content": "Be kind."},
             {"role": "user", "content": [{"type": "input_text", "text": "Name a colour."}]},
             {"type": "message", "role": "assistant", "status": "completed", "id": "msg_1",
              "content": [{"type": "output_text", "text": "Blue.", "annotations": []}]},
             {"role": "user", "content": "Another one?"}]
    chat = [{"role": "developer", "content": "Be kind."}, {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another one?"}]
    n = input_tokens(oai, input=items)
    assert n == chat_prompt_tokens(oai, chat) and n > input_tokens(oai, input=items[-1:]) + 10
    # A json_schema text.format is echoed back (its grammar holds the answer: test_structured_output.py).
    r = oai.responses.create(model="m", input=items, max_output_tokens=2, text={"format": {
        "type": "json_schema", "name": "c", "schema": {"type": "object"}, "strict": True}})
    assert r.usage.input_tokens == n and r.text.format.type == "json_schema"


def test_max_output_tokens_gives_incomplete(oai):
    r = oai.responses.create(model="m", input="Tell me a story.", max_output_tokens=3, reasoning={"effort": "none"})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output[-1].status == "incomplete"
    events = stream_events(oai, input="Tell me a story.", max_output_tokens=3, reasoning={"effort": "none"})
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_function_call_items_render_as_chat_tool_calls(oai):
    """Two calls and their outputs (after a reasoning item) give the same prompt as the chat API's tool_calls."""
    items = [{"role": "user", "content": "Weather in Paris and Rome?"},
             {"type": "reasoning", "id": "rs_1", "summary": [],
              "content": [{"type": "reasoning_text", "text": "Both cities."}]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
             {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
             {"type": "function_call_output", "call_id": "call_2", "output": "rain, 14 C"}]
    chat = [{"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": None, "reasoning_content": "Both cities.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": '{"city": "Paris"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": '{"city": "Rome"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "rain, 14 C"}]
    n = input_tokens(oai, input=items, tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    assert n == chat_prompt_tokens(oai, chat, tools=CHAT_TOOLS)
    assert n > input_tokens(oai, input=items[:1], tools=TOOLS) + 30
    # tool_choice "none" drops the tools, as chat does.
    assert input_tokens(oai, input=items, tools=TOOLS, tool_choice="none") == chat_prompt_tokens(oai, chat)
    r = oai.responses.create(model="m", input=items, tools=TOOLS, max_output_tokens=1)
    assert r.tools[0].type == "function" and r.tools[0].name == "get_weather"


def test_namespace_tools_and_hosted_tools(oai):
    """What Codex CLI sends: a namespace tool's functions reach the model as `namespace.name` (the prompt of the
    chat API with those names), a call of one comes back with its namespace, and hosted tools this server cannot run
    (web_search) are left out rather than refused."""
    ns = [{"type": "namespace", "name": "agents", "description": "Sub-agents", "tools": [
        {"type": "function", "name": "spawn", "description": "Start one", "parameters": {
            "type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}},
        {"type": "web_search"}]}]
    flat = [{"type": "function", "function": {"name": "agents.spawn", "description": "Start one", "parameters": {
        "type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}}}]
    hi = [{"role": "user", "content": "Hi"}]
    tools = TOOLS + ns + [{"type": "web_search", "external_web_access": False}]
    assert input_tokens(oai, input=hi, tools=tools) == chat_prompt_tokens(oai, hi, tools=CHAT_TOOLS + flat)
    call = {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn",
            "arguments": '{"task": "x"}'}
    chat_call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "agents.spawn", "arguments": '{"task": "x"}'}}]}
    items = hi + [call, {"type": "function_call_output", "call_id": "c1", "output": "started"}]
    chat = hi + [chat_call, {"role": "tool", "tool_call_id": "c1", "content": "started"}]
    assert input_tokens(oai, input=items, tools=tools) == chat_prompt_tokens(oai, chat, tools=CHAT_TOOLS + flat)
    # The model's call of agents.spawn comes back as the namespace's function.
    out = OutputItems(namespaced={"agents.spawn": ("agents", "spawn")})
    for d in (Delta("tool_start", index=0, call_id="c2", name="agents.spawn"), Delta("tool_args", "{}", index=0)):
        out.add(d)
    out.close()
    assert (out.items[0]["namespace"], out.items[0]["name"]) == ("agents", "spawn")


def test_previous_response_id_chains_the_conversation(oai):
    first = oai.responses.create(model="m", input="Name a fruit.", instructions="Be brief.", max_output_tokens=8,
                                 reasoning={"effort": "none"})
    assert first.output_text
    second = oai.responses.create(model="m", input="And a vegetable?", previous_response_id=first.id,
                                  max_output_tokens=4, reasoning={"effort": "none"})
    assert second.previous_response_id == first.id
    # The first input and answer come before the new input; its instructions are not carried over.
    chat = [{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "And a vegetable?"}]
    assert second.usage.input_tokens == chat_prompt_tokens(oai, chat, reasoning_effort="none")
    third = oai.responses.create(model="m", input=[{"role": "user", "content": "A nut?"}],
                                 previous_response_id=second.id, max_output_tokens=1, reasoning={"effort": "none"})
    chat += [{"role": "assistant", "content": second.output_text}, {"role": "user", "content": "A nut?"}]
    assert third.usage.input_tokens == chat_prompt_tokens(oai, chat, reasoning_effort="none")
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m", input="Hi", previous_response_id="resp_nope", max_output_tokens=1)
    assert e.value.body == {"message": "Previous response with id 'resp_nope' not found.",
                            "type": "invalid_request_error", "param": "previous_response_id",
                            "code": "previous_response_not_found"}


def test_store_false_and_retrieve(oai, gateway):
    kept = oai.responses.create(model="m", input="Hi", max_output_tokens=2)
    got = oai.responses.retrieve(kept.id)
    assert got.id == kept.id and item_texts(got.output) == item_texts(kept.output)
    assert got.usage.output_tokens == kept.usage.output_tokens
    streamed = check_events(stream_events(oai, input="Hi", max_output_tokens=2))
    assert oai.responses.retrieve(streamed.id).id == streamed.id
    gone = oai.responses.create(model="m", input="Hi", max_output_tokens=2, store=False)
    assert gone.store is False
    with pytest.raises(openai.NotFoundError, match="not found"):
        oai.responses.retrieve(gone.id)
    with pytest.raises(openai.BadRequestError, match="not found"):
        oai.responses.create(model="m", input="Hi", previous_response_id=gone.id, max_output_tokens=1)
    r = requests.get(gateway.url + "/v1/responses/resp_unknown", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


def test_bad_requests(oai, gateway):
    url = gateway.url + "/v1/responses"
    r = requests.post(url, data=b'{"input": "Hi"', timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = requests.post(url, json={"input": [{"type": "computer_call_output", "call_id": "x"}]}, timeout=30)
    assert r.status_code == 400 and "computer_call_output" in r.json()["error"]["message"]
    r = requests.post(url, json={"input": "Hi", "max_output_tokens": "many"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_output_tokens"
    r = requests.post(url, json={"input": []}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    for stream in (False, True):    # too long: a 400 before any event, nothing cut
        r = requests.post(url, json={"input": "word " * 3000, "max_output_tokens": 4, "stream": stream}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert r.json()["error"]["param"] == "input"
    # Pictures on a gateway without vision: the same 400 as chat.
    r = requests.post(url, json={"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": png_url(32, 32)}, {"type": "input_text", "text": "What is it?"}]}]},
        timeout=30)
    assert r.status_code == 400 and "started without image support" in r.json()["error"]["message"]
    assert oai.responses.create(model="m", input="Hi", max_output_tokens=1).status == "incomplete"


def test_logprobs_of_the_answer_text(oai):
    """include message.output_text.logprobs + top_logprobs: the message's output_text part carries one entry per
    answer token, the stream's deltas carry the same entries, and they equal chat completions' for the same
    conversation (one engine, greedy)."""
    kw = dict(model="m", input="Tell me about the sea", max_output_tokens=6, reasoning={"effort": "none"},
              include=["message.output_text.logprobs"], top_logprobs=2)
    r = oai.responses.create(**kw)
    part = r.output[-1].content[0]
    assert r.output[-1].type == "message" and len(part.logprobs) == r.usage.output_tokens == 6
    assert all(len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token for e in part.logprobs)
    streamed, done = [], None
    for event in oai.responses.create(**kw, stream=True):
        if event.type == "response.output_text.delta":
            streamed += event.logprobs
        elif event.type in ("response.completed", "response.incomplete"):   # incomplete: cut at 6 tokens
            done = event.response
    entries = [(e.token, round(e.logprob, 5)) for e in part.logprobs]
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == entries
    assert [(e.token, round(e.logprob, 5)) for e in done.output[-1].content[0].logprobs] == entries
    chat = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Tell me about the sea"}],
                                       max_tokens=6, reasoning_effort="none", logprobs=True, top_logprobs=2)
    assert [(e.token, round(e.logprob, 5)) for e in chat.choices[0].logprobs.content] == entries
    assert oai.responses.create(**{**kw, "include": None, "top_logprobs": None}).output[-1].content[0].logprobs \
        in (None, [])


def test_client_leaving_mid_stream_stops_the_engine(start_gateway):
    g = start_gateway()
    url = g.url + "/v1/responses"
    r = requests.post(url, json={"input": "Tell me a long story", "max_output_tokens": 1500, "stream": True,
                                 "reasoning": {"effort": "none"}}, stream=True, timeout=60)
    lines = r.iter_lines()
    while b"response.output_text.delta" not in next(lines):
        pass
    r.close()
    t0 = time.time()
    ok = requests.post(url, json={"input": "Hello", "max_output_tokens": 3}, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["output_tokens"] == 3
    assert time.time() - t0 < 10 and engine_cancels(g) == 1
    try:   # a non-stream client that leaves is cancelled too
        requests.post(url, json={"input": "Another long one", "max_output_tokens": 1800}, timeout=0.3)
    except requests.exceptions.ReadTimeout:
        pass
    assert requests.post(url, json={"input": "Hello", "max_output_tokens": 2}, timeout=60).status_code == 200
    assert engine_cancels(g) == 2


def test_engine_killed_mid_stream_gives_an_error_event(start_gateway):
    g = start_gateway()
    pid = g.engine_pid()
    r = requests.post(g.url + "/v1/responses", json={"input": "Go on", "max_output_tokens": 1800, "stream": True,
                                                     "reasoning": {"effort": "none"}}, stream=True, timeout=60)
    lines = r.iter_lines()
    while b"response.output_text.delta" not in next(lines):
        pass
    os.kill(pid, signal.SIGKILL)
    rest = [line for line in lines if line]
    assert rest[-2] == b"event: error"
    error = json.loads(rest[-1][6:])
    assert error["type"] == "error" and error["code"] == "engine_unavailable" and "exited" in error["message"]
    assert isinstance(error["sequence_number"], int)
    again = requests.post(g.url + "/v1/responses", json={"input": "Hello", "max_output_tokens": 2}, timeout=60)
    assert again.status_code == 200 and g.engine_pid() != pid


# ---- a real tool round trip on the demo model --------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo(engine_bin):
    gw = Gateway(DEMO, engine_bin, "--engine-arg=--mtp", f"--engine-arg={DEMO_MTP}", ctx=4096)
    yield openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0, timeout=120)
    gw.stop()


def flat_tools(tools):
    return [{"type": "function", **t["function"]} for t in tools]


def test_demo_tool_round_trip(demo):
    """The model calls a tool (a function_call item), the test runs it, and the answer, streamed through the SDK's
    stream helper after previous_response_id, uses the tool's value."""
    case = held_out_case("tool_call", "none", "calculator")
    expected = case.expected["tool_call"]
    system, user = question(case)
    tools = flat_tools(case.tools)
    r = demo.responses.create(model="demo", instructions=system, input=user, tools=tools, max_output_tokens=200,
                              reasoning={"effort": case.effort})
    assert r.status == "completed" and [o.type for o in r.output] == ["function_call"], r.output
    call = r.output[0]
    assert call.id.startswith("fc_") and call.call_id.startswith("call_") and call.status == "completed"
    assert call.name == expected["name"] and json.loads(call.arguments) == expected["arguments"]
    reply, needed = run_tool(call.name, json.loads(call.arguments))
    with demo.responses.stream(model="demo", instructions=system, previous_response_id=r.id, tools=tools,
                               input=[{"type": "function_call_output", "call_id": call.call_id, "output": reply}],
                               max_output_tokens=200, reasoning={"effort": case.effort}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.status == "completed" and [o.type for o in final.output] == ["message"]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text
    assert_answer_uses(final.output_text, needed)


def test_demo_streamed_call_with_reasoning(demo):
    case = held_out_case("tool_call", "low", "convert_units")
    expected = case.expected["tool_call"]
    system, user = question(case)
    events = list(demo.responses.create(model="demo", instructions=system, input=user, stream=True,
                                        tools=flat_tools(case.tools), max_output_tokens=200,
                                        reasoning={"effort": case.effort}))
    final = check_events(events)
    assert final.status == "completed" and [o.type for o in final.output] == ["reasoning", "function_call"]
    assert final.output[0].content[0].text.strip()
    call = final.output[1]
    assert call.name == expected["name"] and json.loads(call.arguments) == expected["arguments"]
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas and all(e.item_id == call.id for e in deltas)
