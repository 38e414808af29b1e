"""End to end on the shipped demo model (installer/demo, with its MTP head drafting) behind the real gateway and CPU
engine, driven by the official openai and anthropic SDKs: full tool round trips, streamed and not (the model calls a
tool, the test runs it, the answer carries the tool's value), and thinking per effort. Prompts and expected values
are computed from held-out cases of engine/tools/demo_model (never copied from the model's output)."""
import json
import os
import re

import pytest

from gateway_harness import REPO, Gateway
import strata_testing  # noqa: F401  (puts engine/tools on sys.path for demo_model)
from demo_model import data, facts  # noqa: E402
from demo_model.train import SEED  # noqa: E402

DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")
DEMO_MTP = os.path.join(REPO, "installer", "demo", "strata-demo-mtp.gguf")
HELD_OUT = data.held_out_cases(SEED, 32)


@pytest.fixture(scope="module")
def demo_gateway(engine_bin):
    gw = Gateway(DEMO, engine_bin, "--engine-arg=--mtp", f"--engine-arg={DEMO_MTP}", ctx=4096)
    yield gw
    gw.stop()


def openai_client(gw):
    import openai
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0, timeout=120)


def anthropic_client(gw):
    import anthropic
    return anthropic.Anthropic(base_url=gw.url, api_key="none", max_retries=0, timeout=120)


def held_out_case(kind, effort, tool=None):
    """The first held-out case of a kind and effort (and, for tool calls, of a tool): seeded, so always the same."""
    return next(c for c in HELD_OUT if c.kind == kind and c.effort == effort
                and (tool is None or c.expected["tool_call"]["name"] == tool))


def question(case):
    """(system prompt or None, the user's question): the case's conversation up to its first answer."""
    system = next((m["content"] for m in case.messages if m["role"] == "system"), None)
    return system, next(m["content"] for m in case.messages if m["role"] == "user")


def openai_effort(effort):
    return {"reasoning_effort": effort}


def anthropic_effort(effort):
    return {"thinking": {"type": "disabled"}} if effort == "none" else {"output_config": {"effort": effort}}


def anthropic_tools(tools):
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in tools]


def number_text(value):
    return f"{value:.3f}".rstrip("0").rstrip(".")


def run_tool(name, args):
    """The test's own implementation of the demo tools: (the JSON reply, strings the final answer must contain)."""
    if name == "calculator":
        a, op, b = args["expression"].split()
        a, b = int(a), int(b)
        result = {"+": a + b, "-": a - b, "*": a * b, "/": round(a / b, 3)}[op]
        text = number_text(result) if op == "/" else str(result)
        return json.dumps({"result": text}), [text]
    if name == "convert_units":
        value = number_text(args["value"] * facts.UNITS[(args["from_unit"], args["to_unit"])])
        return json.dumps({"value": value, "unit": args["to_unit"]}), [value, args["to_unit"]]
    assert name == "get_weather", f"the demo model has no tool {name!r}"
    # A made-up weather station: the values depend on the city, so a model that ignores the reply cannot pass.
    seed = sum(map(ord, args["city"]))
    temperature, condition = seed % 30 - 3, facts.CONDITIONS[seed % len(facts.CONDITIONS)]
    unit = args.get("unit", "celsius")
    return (json.dumps({"city": args["city"], "temperature": temperature, "unit": unit, "condition": condition}),
            [str(temperature), condition, args["city"]])


def assert_answer_uses(answer, needed):
    """Every needed text appears in the answer; a number only as a whole number (2 is not found in 12 or 2.5)."""
    missing = [text for text in needed if not re.search(rf"(?<![\d.-]){re.escape(text)}(?![\d]|\.\d)", answer)]
    assert not missing, f"the answer {answer!r} lacks the tool's values {missing}"


# ----------------------------------------------------------------------------------------------------------------
# OpenAI

def openai_first_messages(case):
    system, user = question(case)
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


def test_openai_tool_round_trip(demo_gateway):
    case = held_out_case("tool_call", "none", "calculator")
    expected = case.expected["tool_call"]
    client = openai_client(demo_gateway)
    messages = openai_first_messages(case)
    r = client.chat.completions.create(model="demo", messages=messages, tools=case.tools, max_tokens=200,
                                       **openai_effort(case.effort))
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert not choice.message.content and len(choice.message.tool_calls) == 1, choice.message
    assert not getattr(choice.message, "reasoning_content", None), "effort none must give no reasoning"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == expected["name"]
    assert json.loads(call.function.arguments) == expected["arguments"]

    reply, needed = run_tool(call.function.name, json.loads(call.function.arguments))
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": reply}]
    r2 = client.chat.completions.create(model="demo", messages=messages, tools=case.tools, max_tokens=200,
                                        **openai_effort(case.effort))
    assert r2.choices[0].finish_reason == "stop" and not r2.choices[0].message.tool_calls
    assert_answer_uses(r2.choices[0].message.content, needed)


def openai_stream(client, **request):
    """Streams a chat completion; returns (reasoning, content, {index: tool call}, finish reason, delta order)."""
    reasoning, content, calls, finish, order = "", "", {}, None, []
    for chunk in client.chat.completions.create(model="demo", stream=True, **request):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        if getattr(delta, "reasoning_content", None):
            reasoning += delta.reasoning_content
            order.append("reasoning")
        if delta.content:
            content += delta.content
            order.append("content")
        for part in delta.tool_calls or []:
            slot = calls.setdefault(part.index, {"id": None, "name": "", "arguments": "", "deltas": 0})
            slot["id"] = part.id or slot["id"]
            slot["name"] += (part.function.name or "") if part.function else ""
            slot["arguments"] += (part.function.arguments or "") if part.function else ""
            slot["deltas"] += 1
            order.append("tool_call")
    return reasoning, content, calls, finish, order


def test_openai_streamed_tool_round_trip(demo_gateway):
    case = held_out_case("tool_call", "low", "convert_units")
    expected = case.expected["tool_call"]
    client = openai_client(demo_gateway)
    messages = openai_first_messages(case)
    reasoning, content, calls, finish, order = openai_stream(client, messages=messages, tools=case.tools,
                                                             max_tokens=200, **openai_effort(case.effort))
    assert finish == "tool_calls" and content == "", (finish, content)
    assert reasoning.strip() and order.index("tool_call") > max(i for i, k in enumerate(order) if k == "reasoning")
    assert list(calls) == [0], calls
    call = calls[0]
    assert call["id"].startswith("call_") and call["name"] == expected["name"]
    assert json.loads(call["arguments"]) == expected["arguments"], call

    reply, needed = run_tool(call["name"], json.loads(call["arguments"]))
    messages += [{"role": "assistant", "content": "", "reasoning_content": reasoning,
                  "tool_calls": [{"id": call["id"], "type": "function",
                                  "function": {"name": call["name"], "arguments": call["arguments"]}}]},
                 {"role": "tool", "tool_call_id": call["id"], "content": reply}]
    reasoning2, answer, calls2, finish2, _ = openai_stream(client, messages=messages, tools=case.tools,
                                                           max_tokens=200, **openai_effort(case.effort))
    assert finish2 == "stop" and not calls2 and reasoning2.strip(), (finish2, calls2, reasoning2)
    assert_answer_uses(answer, needed)


# ----------------------------------------------------------------------------------------------------------------
# Anthropic

def anthropic_first_request(case):
    system, user = question(case)
    request = {"messages": [{"role": "user", "content": user}], "tools": anthropic_tools(case.tools),
               "max_tokens": 300, **anthropic_effort(case.effort)}
    return request | ({"system": system} if system else {})


def tool_result_turns(content_blocks, reply):
    """The assistant turn as the SDK returned it, then the user turn carrying the tool's result."""
    use = next(b for b in content_blocks if b.type == "tool_use")
    return [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in content_blocks]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": reply}]}]


def test_anthropic_tool_round_trip(demo_gateway):
    case = held_out_case("tool_call", "medium", "get_weather")
    expected = case.expected["tool_call"]
    client = anthropic_client(demo_gateway)
    request = anthropic_first_request(case)
    msg = client.messages.create(model="demo", **request)
    assert msg.stop_reason == "tool_use", msg
    assert [b.type for b in msg.content] == ["thinking", "tool_use"], msg.content
    assert msg.content[0].thinking.strip(), msg.content
    use = msg.content[1]
    assert use.id.startswith("toolu_") and use.name == expected["name"] and use.input == expected["arguments"]

    reply, needed = run_tool(use.name, use.input)
    request["messages"] += tool_result_turns(msg.content, reply)
    final = client.messages.create(model="demo", **request)
    assert final.stop_reason == "end_turn", final
    assert [b.type for b in final.content] == ["thinking", "text"], final.content
    assert_answer_uses(final.content[1].text, needed)


def anthropic_stream(client, **request):
    """Streams a message; returns (the SDK's event types in order, partial_json pieces, the final message)."""
    events, partial_json = [], []
    with client.messages.stream(model="demo", **request) as stream:
        for event in stream:
            if event.type in ("content_block_start", "content_block_delta", "content_block_stop"):
                kind = event.content_block.type if event.type != "content_block_delta" else event.delta.type
                events.append(f"{event.type}:{kind}")
                if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    partial_json.append(event.delta.partial_json)
        return events, partial_json, stream.get_final_message()


def test_anthropic_streamed_tool_round_trip(demo_gateway):
    case = held_out_case("tool_call", "xhigh", "calculator")
    expected = case.expected["tool_call"]
    client = anthropic_client(demo_gateway)
    request = anthropic_first_request(case)
    events, partial_json, msg = anthropic_stream(client, **request)
    assert msg.stop_reason == "tool_use", msg
    # thinking streams and closes before the tool_use block opens; the input arrives as input_json_delta pieces
    assert events.index("content_block_stop:thinking") < events.index("content_block_start:tool_use"), events
    assert "content_block_delta:thinking_delta" in events and "content_block_start:text" not in events, events
    assert partial_json and json.loads("".join(partial_json)) == expected["arguments"], partial_json
    use = next(b for b in msg.content if b.type == "tool_use")
    assert use.id.startswith("toolu_") and use.name == expected["name"] and use.input == expected["arguments"]

    reply, needed = run_tool(use.name, use.input)
    request["messages"] += tool_result_turns(msg.content, reply)
    events2, _, final = anthropic_stream(client, **request)
    assert final.stop_reason == "end_turn" and "content_block_delta:text_delta" in events2, (final, events2)
    assert_answer_uses("".join(b.text for b in final.content if b.type == "text"), needed)


# ----------------------------------------------------------------------------------------------------------------
# Thinking: on, the reasoning streams first and closes before the answer; off ("none"), there is none at all.
# A held-out copy case: its exact answer is the phrase in the prompt.

@pytest.mark.parametrize("effort", ["medium", "none"])
def test_openai_thinking_follows_effort(demo_gateway, effort):
    case = held_out_case("copy", effort)
    reasoning, content, calls, finish, order = openai_stream(openai_client(demo_gateway),
                                                             messages=openai_first_messages(case),
                                                             max_tokens=200, **openai_effort(effort))
    assert finish == "stop" and not calls and content == case.expected["content"], (finish, content)
    assert "<think>" not in content + reasoning and "</think>" not in content + reasoning
    if effort == "none":
        assert reasoning == "" and "reasoning" not in order
    else:
        first_content = order.index("content")
        assert reasoning.strip() and set(order[:first_content]) == {"reasoning"}, order
        assert "reasoning" not in order[first_content:], order


@pytest.mark.parametrize("effort", ["medium", "none"])
def test_anthropic_thinking_follows_effort(demo_gateway, effort):
    case = held_out_case("copy", effort)
    system, user = question(case)
    request = {"messages": [{"role": "user", "content": user}], "max_tokens": 200, **anthropic_effort(effort)}
    events, _, msg = anthropic_stream(anthropic_client(demo_gateway), **request | ({"system": system} if system else {}))
    assert msg.stop_reason == "end_turn", msg
    text = "".join(b.text for b in msg.content if b.type == "text")
    assert text == case.expected["content"], msg.content
    if effort == "none":
        assert [b.type for b in msg.content] == ["text"], msg.content
        assert not any("thinking" in e for e in events), events
    else:
        assert [b.type for b in msg.content] == ["thinking", "text"], msg.content
        assert msg.content[0].thinking.strip() and "</think>" not in msg.content[0].thinking
        assert events.index("content_block_stop:thinking") < events.index("content_block_start:text"), events


def test_speculation_reported_in_timings(demo_gateway):
    """Greedy requests are drafted by the MTP head: llama.cpp-style timings say how many drafts were accepted."""
    import requests
    _, user = question(held_out_case("copy", "medium"))
    body = {"model": "demo", "messages": [{"role": "user", "content": user}], "max_tokens": 120}
    r = requests.post(demo_gateway.url + "/v1/chat/completions", json=body, timeout=120).json()
    assert r["choices"][0]["finish_reason"] == "stop"
    t = r["timings"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] <= t["draft_n"], t
