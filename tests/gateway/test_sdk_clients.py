"""The official openai and anthropic SDKs against the real gateway + engine + tiny real-vocabulary model: text,
streams, stream helpers, reasoning levels, a tool round trip, count_tokens, 401 and 400 (too long, n above 1)."""
from __future__ import annotations

import anthropic
import openai
import pytest

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def test_openai_non_stream_and_usage(oai):
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}], max_tokens=6)
    assert r.choices[0].finish_reason in ("length", "stop")
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 5
    msg = r.choices[0].message
    assert (msg.content or "") + (msg.model_extra.get("reasoning_content") or "")  # something came back


def test_openai_stream_and_include_usage(oai):
    chunks = list(oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                              stream=True, stream_options={"include_usage": True},
                                              reasoning_effort="none"))
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason in ("length", "stop")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == finals[0].usage.completion_tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text  # thinking off: the answer is content


def test_openai_stream_helper(oai):
    with oai.chat.completions.stream(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                     reasoning_effort="none") as stream:
        kinds = {e.type for e in stream}
        final = stream.current_completion_snapshot  # get_final_completion() raises on finish_reason "length"
    assert "chunk" in kinds and "content.delta" in kinds
    assert final.choices[0].finish_reason in ("length", "stop") and final.choices[0].message.content


def test_reasoning_levels_change_the_prompt(oai):
    def prompt_tokens(**kw):
        r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1, **kw)
        return r.usage.prompt_tokens
    default, high, low, medium, none = (prompt_tokens(), prompt_tokens(reasoning_effort="high"),
                                        prompt_tokens(reasoning_effort="low"),
                                        prompt_tokens(extra_body={"reasoning": {"effort": "medium"}}),
                                        prompt_tokens(reasoning_effort="none"))
    assert default == high > low > medium
    assert none == medium + 2  # no effort line, and an empty closed think block instead of an open one
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert r.choices[0].message.model_extra.get("reasoning_content")  # thinking on: output starts as reasoning
    with pytest.raises(openai.BadRequestError, match="unknown reasoning effort"):
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1,
                                    reasoning_effort="extreme")


def test_openai_tool_round_trip(oai):
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = oai.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=4)
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    short = oai.chat.completions.create(model="m", messages=messages[:1], tools=TOOLS, max_tokens=1)
    assert r.usage.prompt_tokens > short.usage.prompt_tokens + 20  # the call and its result were rendered


def test_openai_errors(oai, start_gateway):
    with pytest.raises(openai.BadRequestError, match="context"):
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 3000}], max_tokens=4)
    g = start_gateway("--api-key", "sekrit")
    bad = openai.OpenAI(base_url=g.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
    good = openai.OpenAI(base_url=g.url + "/v1", api_key="sekrit", max_retries=0)
    assert good.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
    assert anthropic.Anthropic(base_url=g.url, api_key="sekrit", max_retries=0).messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "Hi"}]).input_tokens > 0
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=g.url, api_key="nope", max_retries=0).messages.create(
            model="m", max_tokens=1, messages=[{"role": "user", "content": "Hi"}])


def test_anthropic_non_stream(claude):
    r = claude.messages.create(model="m", max_tokens=6, messages=[{"role": "user", "content": "Hello"}])
    assert r.stop_reason in ("max_tokens", "end_turn") and r.usage.output_tokens >= 1
    assert r.content and r.content[0].type in ("thinking", "text")
    off = claude.messages.create(model="m", max_tokens=4, thinking={"type": "disabled"},
                                 messages=[{"role": "user", "content": "Hello"}])
    assert all(b.type == "text" for b in off.content)


def test_anthropic_stream_helper_and_raw(claude):
    with claude.messages.stream(model="m", max_tokens=6, messages=[{"role": "user", "content": "Hi"}],
                                system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                                extra_body={"output_config": {"effort": "low"}}) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert events[0] == "message_start" and "message_stop" in events
    assert final.usage.output_tokens >= 1 and final.stop_reason in ("max_tokens", "end_turn")
    raw = list(claude.messages.create(model="m", max_tokens=3, stream=True, thinking={"type": "adaptive"},
                                      messages=[{"role": "user", "content": "Hi"}]))
    assert raw[0].type == "message_start" and raw[-1].type == "message_stop"
    assert raw[-2].type == "message_delta" and raw[-2].usage.output_tokens >= 1


def test_anthropic_tool_round_trip_and_mid_system(claude):
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Call it.", "signature": "strata"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "system", "content": "Agent types: none."},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny",
                                              "cache_control": {"type": "ephemeral"}},
                                             {"type": "text", "text": "Thanks, and now?"}]}]
    r = claude.messages.create(model="m", max_tokens=3, tools=tools, messages=messages)
    assert r.stop_reason in ("max_tokens", "end_turn", "tool_use")
    n = claude.messages.count_tokens(model="m", tools=tools, messages=messages).input_tokens
    assert n == r.usage.input_tokens + r.usage.cache_read_input_tokens


def test_anthropic_too_long(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": "word " * 3000}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "context" in e.value.body["error"]["message"]


def test_openai_n_above_one_refused(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1, n=2)
    assert e.value.body["param"] == "n" and "one choice per request" in e.value.body["message"]
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=1, n=1)
    assert len(r.choices) == 1


def test_openai_logprobs(oai):
    """logprobs / top_logprobs: one entry per generated token with the model's log-probability and its best
    alternatives (greedy: the token is the first of them); the stream carries the same entries in order."""
    hi = [{"role": "user", "content": "Tell me about the sea"}]
    kw = dict(model="m", messages=hi, max_tokens=8, logprobs=True, top_logprobs=3, reasoning_effort="none")
    r = oai.chat.completions.create(**kw)
    assert r.choices[0].finish_reason == "length"
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens == 8
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
        assert (e.top_logprobs[0].token, e.top_logprobs[0].logprob) == (e.token, e.logprob)
        assert bytes(e.bytes).decode("utf-8", errors="replace") == e.token
    streamed = []
    for chunk in oai.chat.completions.create(**kw, stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
    assert [(e.token, round(e.logprob, 5)) for e in streamed] == [(e.token, round(e.logprob, 5)) for e in entries]
    assert "".join(e.token for e in entries).endswith(r.choices[0].message.content)
    plain = oai.chat.completions.create(model="m", messages=hi, max_tokens=8, reasoning_effort="none")
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == r.choices[0].message.content
    own = oai.chat.completions.create(model="m", messages=hi, max_tokens=2, logprobs=True, reasoning_effort="none")
    assert [e.top_logprobs for e in own.choices[0].logprobs.content] == [[], []]
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", messages=hi, max_tokens=1, top_logprobs=2)
    assert e.value.body["param"] == "top_logprobs" and "logprobs: true" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", messages=hi, max_tokens=1, logprobs=True, top_logprobs=21)
    assert e.value.body["param"] == "top_logprobs"
