"""The chat template (ours, as embedded in the tiny model's GGUF) rendered the transformers way, with the Qwen3.8
request rules: tools, tool results, thinking on/off, each effort, system folding, content parts, tool arguments."""
from __future__ import annotations

import json

import pytest

from gateway.text.chat_template import (DEFAULT_TEMPLATE_PATH, ChatTemplate, TemplateError, prepare_messages,
                                        prompt_opens_thinking, thinking_kwargs)

XHIGH = "Reasoning effort is set to xhigh."
LOW = "Reasoning effort is set to low."
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string"}, "days": {"type": "integer"}}}}}


@pytest.fixture(scope="module")
def template(realvocab_meta):
    with open(DEFAULT_TEMPLATE_PATH, encoding="utf-8") as f:
        assert realvocab_meta.chat_template == f.read(), "the tiny model embeds gateway/text/templates/qwen3_8.jinja"
    return ChatTemplate(realvocab_meta.chat_template)


def render(template, messages, tools=None, effort=None, **kw):
    return template.render(prepare_messages(messages), tools=tools, **thinking_kwargs(effort), **kw)


def test_plain_turns_and_generation_prompt(template):
    out = render(template, [{"role": "user", "content": "  Hi there  "}])
    assert out == f"<|im_start|>system\n{XHIGH} Please think carefully through the task, validate key assumptions, " \
                  "consider plausible alternatives, and prioritize correctness, consistency, and clarity in the " \
                  "final answer.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert prompt_opens_thinking(out)


def test_efforts(template):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    high = render(template, msgs, effort="high")
    assert high.startswith(f"<|im_start|>system\n{XHIGH}") and "\n\nBe brief.<|im_end|>" in high
    assert render(template, msgs, effort="max") == high == render(template, msgs)
    low = render(template, msgs, effort="low")
    assert low.startswith(f"<|im_start|>system\n{LOW}") and render(template, msgs, effort="minimal") == low
    medium = render(template, msgs, effort="medium")
    assert medium.startswith("<|im_start|>system\nBe brief.<|im_end|>") and "Reasoning effort" not in medium
    off = render(template, msgs, effort="none")
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and "Reasoning effort" not in off
    assert not prompt_opens_thinking(off)
    with pytest.raises(TemplateError, match="unknown reasoning effort"):
        thinking_kwargs("extreme")
    with pytest.raises(TemplateError, match="Unexpected reasoning effort"):
        template.render([{"role": "user", "content": "x"}], reasoning_effort="high")  # the raw template refuses


def test_tools_and_system_prompt(template):
    out = render(template, [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Paris?"}],
                 tools=[TOOL], effort="medium")
    assert out.startswith("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
                          + json.dumps(TOOL) + "\n</tools>\n\nIf you choose to call a function")
    assert "</IMPORTANT>\n\nYou are terse.<|im_end|>\n<|im_start|>user\nParis?<|im_end|>" in out


def test_tool_call_history_and_merged_results(template):
    msgs = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Two calls.",
         "tool_calls": [
             {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                               "arguments": '{"city": "Paris", "days": 2}'}},
             {"id": "call_2", "type": "function", "function": {"name": "get_weather",
                                                               "arguments": {"city": "Rome", "opts": {"a": 1}}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rainy"}]},
    ]
    out = render(template, msgs, tools=[TOOL], effort="medium")
    assert ("<|im_start|>assistant\n<think>\nTwo calls.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>\n"
            "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n"
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=opts>\n"
            '{"a": 1}\n</parameter>\n</function>\n</tool_call><|im_end|>\n') in out
    assert ("<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrainy\n"
            "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n") in out
    with pytest.raises(TemplateError, match=r"messages\[1\].tool_calls\[0\].function.arguments is not valid JSON"):
        prepare_messages([msgs[0], {"role": "assistant", "tool_calls": [
            {"function": {"name": "f", "arguments": "{oops"}}]}])


def test_reasoning_split_from_content_and_null_content(template):
    msgs = [{"role": "user", "content": "a"},
            {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nanswer"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "content": "ok"}]
    out = render(template, msgs, effort="medium")
    assert "<|im_start|>assistant\n<think>\nhmm\n</think>\n\nanswer<|im_end|>" in out
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n</function>" in out


def test_mid_conversation_system_is_folded(template):
    msgs = [{"role": "system", "content": "Rule one."}, {"role": "system", "content": "Rule two."},
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
            {"role": "system", "content": "Reminder: be nice."}, {"role": "user", "content": "Bye"}]
    out = render(template, msgs, effort="medium")
    assert out.startswith("<|im_start|>system\nRule one.\n\nRule two.<|im_end|>")
    assert "<|im_start|>user\nReminder: be nice.<|im_end|>\n<|im_start|>user\nBye<|im_end|>" in out
    with pytest.raises(TemplateError, match="System message must be at the beginning"):
        template.render(msgs)  # the raw template refuses; prepare_messages is what makes it work


def test_content_parts_and_errors(template):
    out = render(template, [{"role": "user", "content": [{"type": "text", "text": "one "},
                                                        {"type": "text", "text": "two"}]}], effort="medium")
    assert "<|im_start|>user\none two<|im_end|>" in out
    with pytest.raises(TemplateError, match="No messages"):
        template.render([])
    with pytest.raises(TemplateError, match="No user query"):
        render(template, [{"role": "system", "content": "x"}])
    with pytest.raises(TemplateError, match="Unexpected message role"):
        template.render([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}])


def test_sandbox_blocks_unsafe_templates():
    evil = ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError):
        evil.render([{"role": "user", "content": "x"}])
    mutating = ChatTemplate("{% set x = messages.append(1) %}{{ messages|length }}")
    with pytest.raises(TemplateError):
        mutating.render([{"role": "user", "content": "x"}])
    assert ChatTemplate("{{ strftime_now('%Y') | length }} {{ {'a': 'é'} | tojson }}").render([]) == '4 {"a": "é"}'
