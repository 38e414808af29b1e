"""How request fields become what the engine and the template see, through the real gateway on the real engine and
the tiny real-vocabulary model: sampling fields as GEN keys (seeded sampling, top_k / top_p / min_p / penalties,
the top_k cap), chat_template_kwargs' reasoning_effort / enable_thinking, Anthropic thinking budgets and
thinking disabled, tool_choice none on both APIs, /v1/messages?beta=true (Claude Code), the loop guard, and SSE
keep-alive comments while a long prompt is read. Expected prompt sizes are the template's own rendering, tokenized."""
from __future__ import annotations

import json
import re
import time

import anthropic
import openai
import pytest
import requests

from gateway.api import anthropic_routes, openai_routes
from gateway.api.anthropic_models import MessagesRequest
from gateway.api.chat_job import LOOP_GUARD_TOKENS
from gateway.api.openai_models import ChatCompletionRequest
from gateway.engine.protocol import ProtocolError, Token, format_gen, parse_line
from gateway.text.chat_template import ChatTemplate, prepare_messages, thinking_kwargs

HI = [{"role": "user", "content": "Hi"}]
ASK = [{"role": "user", "content": "Tell me something."}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "description": "Weather for a city", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.fixture(scope="module")
def expected_tokens(realvocab_meta, tokenizer):
    """expected_tokens(messages, effort=None, tools=None) -> the prompt's token count as the template renders it."""
    template = ChatTemplate(realvocab_meta.chat_template)

    def count(messages, effort=None, tools=None) -> int:
        prompt = template.render(prepare_messages(messages), tools=tools, add_generation_prompt=True,
                                 **thinking_kwargs(effort))
        return len(tokenizer.encode(prompt))
    return count


def answer(oai, messages=ASK, max_tokens=24, **kw):
    """(reasoning + content, prompt_tokens, completion) of a non-stream chat completion."""
    r = oai.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens, **kw)
    msg = r.choices[0].message
    return (msg.model_extra.get("reasoning_content") or "") + (msg.content or ""), r.usage.prompt_tokens, r


# ---- 1. sampling fields → GEN keys ---------------------------------------------------------------------------

def gen_line(job) -> str:
    return format_gen(10, [1, 2], job.sampling)


def test_sampling_fields_become_gen_keys():
    """The GEN line both APIs' requests produce: neutral values left out, top_k capped at the engine's 64."""
    req = ChatCompletionRequest.model_validate({
        "messages": HI, "temperature": 0.7, "top_k": 200, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1,
        "frequency_penalty": 0.5, "presence_penalty": -0.25, "seed": 42})
    assert gen_line(openai_routes.to_job(req)) == (
        "GEN 10 temperature=0.7 top_p=0.9 top_k=64 min_p=0.05 repeat_penalty=1.1 frequency_penalty=0.5 "
        "presence_penalty=-0.25 seed=42 1,2")
    neutral = ChatCompletionRequest.model_validate({
        "messages": HI, "temperature": 0, "top_k": 0, "top_p": 1.0, "min_p": 0, "repetition_penalty": 1.0,
        "frequency_penalty": 0, "presence_penalty": 0})
    assert gen_line(openai_routes.to_job(neutral)) == "GEN 10 1,2"      # greedy, nothing to send
    assert gen_line(openai_routes.to_job(ChatCompletionRequest.model_validate(
        {"messages": HI, "temperature": 0, "seed": 7}))) == "GEN 10 seed=7 1,2"
    msg = MessagesRequest.model_validate({"model": "m", "max_tokens": 5, "messages": HI, "temperature": 1.2,
                                          "top_k": 99, "top_p": 0.5})
    assert gen_line(anthropic_routes.to_job(msg)) == "GEN 10 temperature=1.2 top_p=0.5 top_k=64 1,2"


def test_logprobs_fields_become_the_gen_key_and_t_lines_parse():
    """logprobs / top_logprobs → GEN's logprobs=N (after the sampling keys); the T lines it brings back parse."""
    def line(**fields) -> str:
        job = openai_routes.to_job(ChatCompletionRequest.model_validate({"messages": HI, **fields}))
        return format_gen(10, [1, 2], job.sampling, logprobs=job.logprobs)
    assert line() == "GEN 10 1,2"
    assert line(logprobs=True) == "GEN 10 logprobs=0 1,2"
    assert line(logprobs=True, top_logprobs=5, temperature=0.5) == "GEN 10 temperature=0.5 logprobs=5 1,2"
    assert line(logprobs=False, top_logprobs=0) == "GEN 10 1,2"
    assert parse_line("T 7") == Token(7)
    assert parse_line("T 7 -0.125") == Token(7, -0.125)
    assert parse_line("T 7 -0.125 7:-0.125,3:-2.5") == Token(7, -0.125, ((7, -0.125), (3, -2.5)))
    for bad in ("T 7 x", "T 7 -0.1 7-0.1", "T 7 -0.1 a:b", "T 7 -0.1 7:-0.1 9"):
        with pytest.raises(ProtocolError):
            parse_line(bad)


def test_seeded_sampling_and_filters_on_the_engine(oai):
    greedy, _, _ = answer(oai)
    sampled, _, _ = answer(oai, temperature=1.0, seed=1)
    assert answer(oai, temperature=1.0, seed=1)[0] == sampled != greedy   # the seed reproduces a sampled answer
    assert answer(oai, temperature=1.0, seed=2)[0] != sampled
    assert answer(oai, temperature=0, seed=3)[0] == greedy                  # temperature 0: greedy, seed or not
    hot = answer(oai, temperature=2.0, seed=1)[0]
    assert hot not in (greedy, sampled)
    # Each filter reaches the engine: at its tightest only the best token is left, so the answer is greedy.
    assert answer(oai, temperature=2.0, seed=1, extra_body={"top_k": 1})[0] == greedy
    assert answer(oai, temperature=2.0, seed=1, top_p=1e-6)[0] == greedy
    assert answer(oai, temperature=2.0, seed=1, extra_body={"min_p": 1.0})[0] == greedy
    two = answer(oai, temperature=2.0, seed=1, extra_body={"top_k": 2})[0]
    assert two not in (greedy, hot)
    assert answer(oai, temperature=2.0, seed=1, top_p=0.5)[0] not in (greedy, hot)
    assert answer(oai, temperature=2.0, seed=1, top_p=1.0)[0] == hot        # top_p 1 is no filter: left out
    # top_k above the engine's 64 is capped (the engine would refuse it), the same as the engine's default 64.
    assert answer(oai, temperature=2.0, seed=1, extra_body={"top_k": 200})[0] == hot
    assert answer(oai, temperature=2.0, seed=1, extra_body={"top_k": 64})[0] == hot
    # Penalties apply to greedy answers too; 1.0 is neutral.
    assert answer(oai, extra_body={"repetition_penalty": 1.0})[0] == greedy
    assert answer(oai, extra_body={"repetition_penalty": 0.01})[0] != greedy


def test_anthropic_sampling_fields_on_the_engine(claude):
    def text(**fields):   # this SDK has no sampling parameters any more; the gateway still reads them
        r = claude.messages.create(model="m", max_tokens=24, messages=ASK, extra_body=fields)
        return "".join(getattr(b, "text", "") + getattr(b, "thinking", "") for b in r.content)
    greedy, hot = text(), text(temperature=2.0)
    assert hot != greedy
    assert text(temperature=2.0, top_k=1) == greedy and text(temperature=2.0, top_p=1e-6) == greedy


# ---- 2. chat_template_kwargs ---------------------------------------------------------------------------------

def test_chat_template_kwargs_set_the_thinking_effort(oai, expected_tokens):
    def run(**kw):
        return answer(oai, messages=HI, max_tokens=4, **kw)
    efforts = {e: expected_tokens(HI, e) for e in (None, "low", "medium", "none")}
    assert len(set(efforts.values())) == 4, efforts       # each effort renders differently
    text, n, _ = run()
    assert n == efforts[None]
    for effort in ("low", "medium"):
        kw_text, kw_n, _ = run(extra_body={"chat_template_kwargs": {"reasoning_effort": effort}})
        assert kw_n == efforts[effort]
        assert kw_text == run(reasoning_effort=effort)[0]                  # the same prompt, the same answer
    assert run(extra_body={"chat_template_kwargs": {"reasoning_effort": "high"}})[1] == efforts[None]
    assert run(extra_body={"chat_template_kwargs": {"enable_thinking": True}})[1] == efforts[None]
    assert run(extra_body={"chat_template_kwargs": {"reasoning_effort": None}})[1] == efforts[None]   # null = unset
    # enable_thinking false: the effort "none" (an empty closed think block), the answer is content only.
    off_text, off_n, off = run(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off_n == efforts["none"]
    assert off.choices[0].message.content and not off.choices[0].message.model_extra.get("reasoning_content")
    assert off_text == run(reasoning_effort="none")[0]
    # The request's own reasoning_effort wins over the kwargs; an unknown effort is the client's error.
    assert run(reasoning_effort="low", extra_body={"chat_template_kwargs": {"reasoning_effort": "high"}})[1] \
        == efforts["low"]
    with pytest.raises(openai.BadRequestError, match="unknown reasoning effort 'bogus'"):
        run(extra_body={"chat_template_kwargs": {"reasoning_effort": "bogus"}})


# ---- 3. Anthropic thinking -----------------------------------------------------------------------------------

@pytest.mark.parametrize("thinking,output_config,effort", [
    (None, None, None),
    ({"type": "enabled", "budget_tokens": 1024}, None, "low"),
    ({"type": "enabled", "budget_tokens": 4096}, None, "low"),
    ({"type": "enabled", "budget_tokens": 4097}, None, "medium"),
    ({"type": "enabled", "budget_tokens": 16384}, None, "medium"),
    ({"type": "enabled", "budget_tokens": 16385}, None, "high"),
    ({"type": "enabled", "budget_tokens": 32000}, {"effort": "low"}, "low"),   # an explicit effort wins
    ({"type": "adaptive"}, None, None),
    ({"type": "disabled"}, None, "none"),
    ({"type": "disabled"}, {"effort": "low"}, "none"),                        # disabled wins
])
def test_anthropic_thinking_sets_the_effort(claude, expected_tokens, thinking, output_config, effort):
    kw = {}
    if thinking:
        kw["thinking"] = thinking
    if output_config:
        kw["extra_body"] = {"output_config": output_config}
    want = expected_tokens(HI, effort)
    assert claude.messages.count_tokens(model="m", messages=HI, **kw).input_tokens == want
    r = claude.messages.create(model="m", max_tokens=3, messages=HI, **kw)
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == want
    # Thinking on: the prompt opens a think block, so the answer starts as a thinking block; off: text only.
    assert [b.type for b in r.content][:1] == (["text"] if effort == "none" else ["thinking"])


def test_effort_levels_are_distinct(expected_tokens):
    """The parametrized cases above only tell efforts apart if the template renders each differently."""
    counts = [expected_tokens(HI, e) for e in ("low", "medium", "high", "none")]
    assert len(set(counts)) == 4 and expected_tokens(HI, "high") == expected_tokens(HI), counts


# ---- 4. tool_choice none -------------------------------------------------------------------------------------

def test_tool_choice_none_drops_the_tools(oai, claude, expected_tokens):
    bare, with_tools = expected_tokens(HI), expected_tokens(HI, tools=TOOLS)
    assert with_tools > bare + 50
    plain_text, plain_n, _ = answer(oai, messages=HI, max_tokens=4)
    assert plain_n == bare
    assert answer(oai, messages=HI, max_tokens=4, tools=TOOLS)[1] == with_tools
    assert answer(oai, messages=HI, max_tokens=4, tools=TOOLS, tool_choice="auto")[1] == with_tools
    none_text, none_n, _ = answer(oai, messages=HI, max_tokens=4, tools=TOOLS, tool_choice="none")
    assert none_n == bare and none_text == plain_text
    # Anthropic's {"type": "none"}, in count_tokens and in messages.
    assert claude.messages.count_tokens(model="m", messages=HI, tools=ANTHROPIC_TOOLS).input_tokens > bare + 50
    assert claude.messages.count_tokens(model="m", messages=HI, tools=ANTHROPIC_TOOLS,
                                        tool_choice={"type": "none"}).input_tokens == bare
    r = claude.messages.create(model="m", max_tokens=3, messages=HI, tools=ANTHROPIC_TOOLS,
                               tool_choice={"type": "none"})
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == bare


# ---- 5. /v1/messages?beta=true -------------------------------------------------------------------------------

def test_beta_messages_route(gateway, claude):
    """Claude Code posts to /v1/messages?beta=true (this SDK's beta resource no longer adds the query, so the client
    sends it by default_query); the answer, the counts and the stream are those of /v1/messages."""
    urls = []
    http = anthropic.DefaultHttpxClient(event_hooks={"request": [lambda request: urls.append(str(request.url))]})
    beta = anthropic.Anthropic(base_url=gateway.url, api_key="unused", max_retries=0, timeout=60, http_client=http,
                               default_query={"beta": "true"})
    ask = dict(model="m", max_tokens=8, messages=ASK, thinking={"type": "disabled"})
    plain = claude.messages.create(**ask)
    b = beta.beta.messages.create(**ask)
    assert urls == [gateway.url + "/v1/messages?beta=true"]          # what Claude Code sends
    assert b.content[0].type == "text" and b.content[0].text == plain.content[0].text and b.content[0].text
    assert b.stop_reason == plain.stop_reason == "max_tokens" and b.usage.output_tokens == 8
    assert beta.beta.messages.count_tokens(model="m", messages=ASK).input_tokens == \
        claude.messages.count_tokens(model="m", messages=ASK).input_tokens
    assert urls[-1] == gateway.url + "/v1/messages/count_tokens?beta=true"
    with beta.beta.messages.stream(**ask) as stream:
        events = [e.type for e in stream]
        final = stream.get_final_message()
    assert urls[-1] == gateway.url + "/v1/messages?beta=true"
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert final.content[0].text == plain.content[0].text
    http.close()


# ---- 6. loop guard -------------------------------------------------------------------------------------------

def test_loop_guard_ends_a_repeating_answer(gateway, oai):
    """A negative frequency penalty makes the tiny model repeat one token; the guard ends the answer at 256 in a row
    (the engine is stopped: its request ends in "cancel"), reported as finish_reason length."""
    before = gateway.read_log()
    r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=400, reasoning_effort="none",
                                    frequency_penalty=-2.0)
    assert r.choices[0].finish_reason == "length"
    assert LOOP_GUARD_TOKENS <= r.usage.completion_tokens < 400
    # The same request without the penalty runs to max_tokens; it waits for the cancelled request's DONE.
    ok = oai.chat.completions.create(model="m", messages=ASK, max_tokens=300, reasoning_effort="none")
    assert ok.usage.completion_tokens == 300 and ok.choices[0].finish_reason == "length"
    time.sleep(0.2)   # the engine's request lines arrive on its stderr
    new = gateway.read_log()[len(before):]
    guard = re.search(r"loop guard: token (\d+) repeated (\d+) times", new)
    assert guard and int(guard.group(2)) == LOOP_GUARD_TOKENS, new
    stopped = re.search(r"serve: request: prompt \d+ \(reused \d+\) in \d+ ms, (\d+) tokens in \d+ ms, cancel", new)
    assert stopped, new     # the engine may have made a token or two more before it read the STOP
    assert r.usage.completion_tokens <= int(stopped.group(1)) < r.usage.completion_tokens + 8
    assert re.search(r", 300 tokens in \d+ ms, length", new), new
    # Streamed, the last chunk's timings come from the engine's DONE (read after the STOP), not zeros.
    stream = requests.post(gateway.url + "/v1/chat/completions", stream=True, timeout=120, json={
        "messages": ASK, "max_tokens": 400, "reasoning_effort": "none", "frequency_penalty": -2.0, "stream": True})
    chunks = [json.loads(line[5:]) for line in stream.iter_lines() if line.startswith(b"data:") and
              line != b"data: [DONE]"]
    timings = next(c["timings"] for c in reversed(chunks) if c.get("timings"))
    assert timings["predicted_ms"] > 0 and timings["prompt_ms"] > 0, timings
    assert timings["predicted_n"] == r.usage.completion_tokens, timings


# ---- 7. keep-alive comments while a long prompt is read -------------------------------------------------------

def read_sse(response):
    """[(seconds since the request, line)] of a raw SSE stream, blank lines left out."""
    t0 = time.monotonic()
    return [(time.monotonic() - t0, line.decode()) for line in response.iter_lines() if line]


def test_keepalive_comments_while_the_prompt_is_read(start_gateway):
    # One token per prompt chunk: 15000 tokens take the tiny engine 1.2-5 s here (1.26 s seen on a quiet machine);
    # the gateway's --keepalive is 0.4 s here, so even the fastest run has several keep-alive periods of silence.
    keepalive = 0.4
    g = start_gateway("--engine-arg=--chunk", "--engine-arg=1", "--keepalive", str(keepalive), ctx=16384)
    body = {"model": "m", "messages": [{"role": "user", "content": "hello " * 15000}], "max_tokens": 3,
            "stream": True, "reasoning_effort": "none"}
    lines = read_sse(requests.post(g.url + "/v1/chat/completions", json=body, stream=True, timeout=120))
    assert lines[0][1].startswith("data: ") and json.loads(lines[0][1][6:])["choices"][0]["delta"]["role"]
    comments = [(t, l) for t, l in lines if l.startswith(":")]
    assert comments and all(l == ": keep-alive" for _, l in comments), lines
    first_delta = next(i for i, (_, l) in enumerate(lines)
                       if l.startswith("data: {") and json.loads(l[6:])["choices"]
                       and json.loads(l[6:])["choices"][0]["delta"].get("content"))
    assert all(lines.index(c) < first_delta for c in comments)          # all of them while the prompt was read
    final = json.loads(next(l for _, l in lines if '"finish_reason":"length"' in l)[6:])
    prompt_s = final["timings"]["prompt_ms"] / 1000
    assert prompt_s > 2 * keepalive, f"the prompt took only {prompt_s:.2f} s: too short to need a keep-alive"
    assert comments[0][0] >= 0.9 * keepalive                            # not at once: after a period of silence
    assert len(comments) <= prompt_s / keepalive + 1                    # about one a period, not more
    # The Anthropic stream (Claude Code's route): comments between ping and the first content block.
    body = {"model": "m", "max_tokens": 3, "stream": True, "thinking": {"type": "disabled"},
            "messages": [{"role": "user", "content": "world " * 15000}]}
    lines = [l for _, l in read_sse(requests.post(g.url + "/v1/messages?beta=true", json=body, stream=True,
                                                  timeout=120))]
    assert lines[:4] == ["event: message_start", lines[1], "event: ping", 'data: {"type":"ping"}']
    start = lines.index("event: content_block_start")
    assert ": keep-alive" in lines[4:start] and ": keep-alive" not in lines[start:]
    assert lines[-2:] == ["event: message_stop", 'data: {"type":"message_stop"}']
