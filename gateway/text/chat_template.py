"""The chat template rendered the way transformers renders it (sandboxed jinja2, trim/lstrip blocks, tojson,
raise_exception, strftime_now), plus the Qwen3.8 request rules of CLIENTS.md §2 applied to messages beforehand."""
from __future__ import annotations

import json
import os
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEFAULT_TEMPLATE_PATH = os.path.join(os.path.dirname(__file__), "templates", "qwen3_8.jinja")

# Effort words clients send → the template's reasoning_effort values; "none" turns thinking off.
EFFORT_TO_TEMPLATE = {"minimal": "low", "low": "low", "medium": "medium", "high": "xhigh", "xhigh": "xhigh",
                      "max": "xhigh"}


class TemplateError(ValueError):
    """The template refused the conversation (raise_exception) or failed to render; a 400 for the client."""


def _raise_exception(message):
    raise TemplateError(str(message))


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


class ChatTemplate:
    def __init__(self, source: str):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self.source = source
        self._template = env.from_string(source)

    @classmethod
    def from_file(cls, path: str) -> "ChatTemplate":
        with open(path, encoding="utf-8") as f:
            return cls(f.read())

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True,
               **kwargs) -> str:
        try:
            return self._template.render(messages=messages, tools=tools or None,
                                         add_generation_prompt=add_generation_prompt, **kwargs)
        except TemplateError:
            raise
        except (jinja2.TemplateError, TypeError, ValueError, AttributeError, KeyError) as e:
            raise TemplateError(f"the chat template failed on this conversation: {e}") from e


def load_template(model_path: str, gguf_template: str | None) -> ChatTemplate:
    """The GGUF's template; else chat_template.jinja next to the model; else Strata's Qwen3.8 template."""
    if gguf_template:
        return ChatTemplate(gguf_template)
    beside = os.path.join(os.path.dirname(os.path.abspath(model_path)), "chat_template.jinja")
    return ChatTemplate.from_file(beside if os.path.exists(beside) else DEFAULT_TEMPLATE_PATH)


def _text_of(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def prepare_messages(messages: list[dict]) -> list[dict]:
    """Applies the Qwen3.8 rules before rendering: tool-call arguments parsed to mappings, leading system messages
    joined into one, a system message later in the conversation turned into a user-side note (the template only
    accepts a leading one; a note keeps the earlier prompt unchanged, so the engine's prefix reuse still works)."""
    out: list[dict] = []
    for i, message in enumerate(messages):
        m = dict(message)
        role = m.get("role")
        if role in ("system", "developer"):
            text = _text_of(m.get("content"))
            if all(o["role"] == "system" for o in out):
                if out:
                    out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + text}
                else:
                    out.append({"role": "system", "content": text})
                continue
            m = {"role": "user", "content": text}
        if role == "assistant" and m.get("tool_calls"):
            m["tool_calls"] = [_call_with_mapping(c, i, j) for j, c in enumerate(m["tool_calls"])]
        out.append(m)
    return out


def _call_with_mapping(call: dict, i: int, j: int) -> dict:
    call = dict(call)
    function = dict(call.get("function") or {})
    args = function.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise TemplateError(f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON: {e}") from e
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise TemplateError(f"messages[{i}].tool_calls[{j}].function.arguments must be a JSON object")
    function["arguments"] = args
    call["function"] = function
    return call


def thinking_kwargs(effort: str | None) -> dict:
    """Template variables for an effort word (None: the template's default, which is its highest)."""
    if effort is None:
        return {}
    effort = effort.lower()
    if effort in ("none", "disabled", "off"):
        return {"enable_thinking": False}
    if effort not in EFFORT_TO_TEMPLATE:
        raise TemplateError(f"unknown reasoning effort {effort!r} (expected none, minimal, low, medium, high, "
                            f"xhigh or max)")
    return {"enable_thinking": True, "reasoning_effort": EFFORT_TO_TEMPLATE[effort]}


def prompt_opens_thinking(prompt: str) -> bool:
    """Whether the rendered prompt ends inside an open think block, so the output starts with reasoning."""
    tail = prompt.rstrip()
    return tail.endswith("<think>")
