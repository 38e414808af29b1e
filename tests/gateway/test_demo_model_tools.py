"""End to end with a model that really emits tool calls: the shipped demo model (installer/demo) behind the real
gateway and engine, driven by the official openai and anthropic SDKs. A full tool round trip in both APIs,
streamed and not, with the MTP head drafting (speculation must not change the answer)."""
import json
import os

import pytest

from gateway_harness import REPO, Gateway

DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")
DEMO_MTP = os.path.join(REPO, "installer", "demo", "strata-demo-mtp.gguf")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "description": "The city name, e.g. Paris"},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
               "required": ["city"]}}}


@pytest.fixture(scope="module")
def demo_gateway(engine_bin):
    gw = Gateway(DEMO, engine_bin, f"--engine-arg=--mtp", f"--engine-arg={DEMO_MTP}", ctx=4096)
    yield gw
    gw.stop()


def openai_client(gw):
    import openai
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_openai_tool_round_trip(demo_gateway):
    client = openai_client(demo_gateway)
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    r = client.chat.completions.create(model="demo", messages=messages, tools=[WEATHER], max_tokens=200)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "condition": "sunny"})}]
    r2 = client.chat.completions.create(model="demo", messages=messages, tools=[WEATHER], max_tokens=200)
    answer = r2.choices[0].message.content
    assert r2.choices[0].finish_reason == "stop"
    assert "21" in answer and "sunny" in answer.lower(), answer


def test_openai_streamed_tool_call(demo_gateway):
    client = openai_client(demo_gateway)
    with client.chat.completions.stream(model="demo", tools=[WEATHER], max_tokens=200,
                                        messages=[{"role": "user", "content": "Weather in Tokyo?"}]) as stream:
        done_args = [e.arguments for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = stream.get_final_completion()
    assert done_args and json.loads(done_args[0]) == {"city": "Tokyo"}
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.choices[0].message.reasoning_content if hasattr(final.choices[0].message, "reasoning_content") else True


def test_anthropic_tool_round_trip(demo_gateway):
    import anthropic
    client = anthropic.Anthropic(base_url=demo_gateway.url, api_key="none", max_retries=0, timeout=120)
    tools = [{"name": "get_weather", "description": WEATHER["function"]["description"],
              "input_schema": WEATHER["function"]["parameters"]}]
    messages = [{"role": "user", "content": "What's the weather in Berlin?"}]
    with client.messages.stream(model="demo", max_tokens=300, tools=tools, messages=messages) as stream:
        msg = stream.get_final_message()
    assert msg.stop_reason == "tool_use", msg
    kinds = [b.type for b in msg.content]
    assert kinds[0] == "thinking" and "tool_use" in kinds, kinds
    use = next(b for b in msg.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Berlin"}
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": json.dumps({"temperature": 12, "condition": "rainy"})}]}]
    final = client.messages.create(model="demo", max_tokens=300, tools=tools, messages=messages)
    text = "".join(b.text for b in final.content if b.type == "text")
    assert final.stop_reason == "end_turn" and "12" in text and "rain" in text.lower(), final.content


def test_speculation_reported_in_timings(demo_gateway):
    """Greedy requests are drafted by the MTP head: llama.cpp-style timings say how many drafts were accepted."""
    import requests
    body = {"model": "demo", "messages": [{"role": "user", "content": "What is 17 plus 25?"}], "max_tokens": 120}
    r = requests.post(demo_gateway.url + "/v1/chat/completions", json=body, timeout=120).json()
    assert r["choices"][0]["finish_reason"] == "stop"
    t = r["timings"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] <= t["draft_n"], t
