"""Responses request → ChatJob: input items become OpenAI-style chat messages (one assistant message per turn, holding
its reasoning, text and function calls), flat function tools become chat tools, other tool kinds are refused."""
from __future__ import annotations

import logging

from gateway.api.chat_job import ChatJob
from gateway.api.responses_models import InputItem, ResponsesRequest
from gateway.api.sampling import DEFAULT_FIELDS, gen_keys, with_defaults
from gateway.api.structured_output import answer_grammar, tool_call_grammar
from gateway.errors import BadRequest

log = logging.getLogger("gateway.responses")
MESSAGE_ROLES = ("user", "system", "developer", "assistant")


def _text_part(part: dict, where: str) -> str:
    text = part.get("text")
    if not isinstance(text, str):
        raise BadRequest(f"{where}.text must be a string", param=f"{where}.text")
    return text


def _image_part(part: dict, where: str) -> dict:
    """input_image → the chat image part gateway/vision reads (a data: or http(s) URL)."""
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if not isinstance(url, str) or not url:
        what = "file_id (this server has no Files API)" if part.get("file_id") else "no image_url"
        raise BadRequest(f"{where}: input_image has {what}; send the picture as image_url, a data: or http(s) URL",
                         param=where)
    return {"type": "image_url", "image_url": {"url": url}}


def _parts(content: list[dict], where: str) -> list[dict]:
    """Input or output content parts → chat content parts (text and image_url)."""
    out = []
    for j, part in enumerate(content):
        kind = part.get("type")
        at = f"{where}[{j}]"
        if kind in ("input_text", "output_text", "text", "refusal"):
            out.append({"type": "text", "text": part.get("refusal", "") if kind == "refusal" else _text_part(part, at)})
        elif kind in ("input_image", "image_url"):
            out.append(_image_part(part, at))
        else:
            raise BadRequest(f"{at}: content part type {kind!r} is not supported (use input_text or input_image)",
                             param=f"{at}.type")
    return out


def _content(content, where: str):
    """A string stays a string; text-only parts are joined into one string, parts with pictures stay parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = _parts(content, where)
    if any(p["type"] != "text" for p in parts):
        return parts
    return "".join(p["text"] for p in parts)


def _reasoning_text(item: InputItem) -> str:
    """A reasoning item's text: its reasoning_text content if it has any, else its summary."""
    parts = item.content if isinstance(item.content, list) else []
    content = [p.get("text", "") for p in parts if p.get("type") == "reasoning_text"]
    return "\n".join(content) if content else "\n".join(p.get("text", "") for p in item.summary or [])


class _Messages:
    """Collects chat messages; output items of one assistant turn (reasoning, message, function calls) join one
    assistant message, as the chat API would have returned it."""

    def __init__(self):
        self.messages: list[dict] = []
        self._assistant: dict | None = None
        self._reasoning = ""          # a reasoning item waiting for its turn's text or calls

    def _turn(self) -> dict:
        if self._assistant is None:
            self._assistant = {"role": "assistant", "content": ""}
            if self._reasoning:
                self._assistant["reasoning_content"] = self._reasoning
            self._reasoning = ""
            self.messages.append(self._assistant)
        return self._assistant

    def _other(self, message: dict) -> None:
        self._assistant, self._reasoning = None, ""
        self.messages.append(message)

    def add(self, item: InputItem, where: str) -> None:
        kind = item.type or ("message" if item.role else None)
        if kind == "message":
            if item.role not in MESSAGE_ROLES:
                raise BadRequest(f"{where}.role must be one of {', '.join(MESSAGE_ROLES)} (got {item.role!r})",
                                 param=f"{where}.role")
            content = _content(item.content, f"{where}.content")
            if item.role != "assistant":
                self._other({"role": item.role, "content": content})
                return
            turn = self._turn()
            text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
            turn["content"] += text
        elif kind == "function_call":
            if not item.call_id or not item.name:
                raise BadRequest(f"{where}: a function_call item needs call_id and name", param=where)
            args = item.arguments if item.arguments is not None else "{}"
            name = qualified(item.namespace, item.name)
            self._turn().setdefault("tool_calls", []).append(
                {"id": item.call_id, "type": "function", "function": {"name": name, "arguments": args}})
        elif kind == "function_call_output":
            if not item.call_id:
                raise BadRequest(f"{where}: a function_call_output item needs call_id", param=f"{where}.call_id")
            self._other({"role": "tool", "tool_call_id": item.call_id, "content": _content(item.output,
                                                                                          f"{where}.output")})
        elif kind == "reasoning":
            text = _reasoning_text(item)
            if self._assistant is not None:
                if text:
                    turn = self._assistant
                    turn["reasoning_content"] = (turn.get("reasoning_content", "") + "\n" + text).lstrip("\n")
            else:
                self._reasoning = (self._reasoning + "\n" + text).lstrip("\n")
        else:
            raise BadRequest(f"{where}: input item type {kind!r} is not supported (use message, function_call, "
                             f"function_call_output or reasoning)", param=f"{where}.type")


def input_messages(items: str | list[InputItem] | None) -> list[dict]:
    """The request's input (or a stored response's output items) as chat messages."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out = _Messages()
    for i, item in enumerate(items):
        out.add(item, f"input[{i}]")
    return out.messages


def qualified(namespace: str | None, name: str) -> str:
    """The chat tool name of a function inside a namespace tool (`namespace.name`): what the model sees and calls."""
    return f"{namespace}.{name}" if namespace else name


def _function_tool(tool, where: str, namespace: str | None = None) -> dict:
    if not tool.name:
        raise BadRequest(f"{where}: a function tool needs a name", param=f"{where}.name")
    return {"type": "function", "function": {
        "name": qualified(namespace, tool.name), "description": tool.description or "",
        "parameters": tool.parameters or {"type": "object", "properties": {}}}}


def chat_tools(req: ResponsesRequest) -> list[dict]:
    """Function tools, and the functions of namespace tools as `namespace.name`. Hosted tools this server cannot run
    (web_search, file_search, code_interpreter, …; agents such as Codex CLI always offer some) are left out, logged:
    the model never sees them, and the rest of the request works."""
    tools = []
    for i, tool in enumerate(req.tools or []):
        where = f"tools[{i}]"
        if tool.type == "function":
            tools.append(_function_tool(tool, where))
        elif tool.type == "namespace" and tool.name:
            for j, inner in enumerate(tool.tools or []):
                if inner.type == "function":
                    tools.append(_function_tool(inner, f"{where}.tools[{j}]", tool.name))
                else:
                    log.info("%s.tools[%d]: a %r tool is not available on this server; left out", where, j,
                             inner.type)
        else:
            log.info("%s: a %r tool is not available on this server; left out", where, tool.type)
    return [] if req.tool_choice == "none" else tools


def namespaced_tools(req: ResponsesRequest) -> dict[str, tuple[str, str]]:
    """qualified name → (namespace, function name) of every function inside a namespace tool."""
    return {qualified(t.name, inner.name): (t.name, inner.name) for t in req.tools or []
            if t.type == "namespace" and t.name for inner in t.tools or [] if inner.type == "function" and inner.name}


def to_job(req: ResponsesRequest, history: list[dict], sampling_defaults: dict | None = None
           ) -> tuple[ChatJob, list[dict]]:
    """The ChatJob, and the conversation to keep for previous_response_id (without instructions, which the
    reference does not carry over to the next response)."""
    conversation = history + input_messages(req.input)
    if not conversation:
        raise BadRequest("input must not be empty", param="input")
    messages = ([{"role": "system", "content": req.instructions}] if req.instructions else []) + conversation
    fmt = req.text.format if req.text else None
    tools = chat_tools(req)
    grammar = answer_grammar(fmt.type if fmt else None, fmt.schema_ if fmt else None, tools=bool(tools),
                             param="text.format.schema")
    offered = [t["function"]["name"] for t in tools]
    if req.tool_choice == "required":
        grammar = tool_call_grammar(offered, offered, "tool_choice")
    elif isinstance(req.tool_choice, dict) and req.tool_choice.get("type") == "function":
        name = req.tool_choice.get("name")
        grammar = tool_call_grammar([name] if name else [], offered, "tool_choice.name")
    fields = dict.fromkeys(DEFAULT_FIELDS) | dict(temperature=req.temperature, top_p=req.top_p)
    sampling = gen_keys(**with_defaults(fields, sampling_defaults))
    effort = req.reasoning.effort if req.reasoning else None
    # include "message.output_text.logprobs" (or top_logprobs ≥ 1) asks for the answer text's logprobs
    wants_logprobs = "message.output_text.logprobs" in (req.include or []) or bool(req.top_logprobs)
    job = ChatJob(messages, tools or None, effort, {}, req.max_output_tokens, sampling,
                  logprobs=(req.top_logprobs or 0) if wants_logprobs else None, grammar=grammar)
    return job, conversation


def output_messages(output: list[dict]) -> list[dict]:
    """A response's output items as the assistant message they make."""
    return input_messages([InputItem.model_validate(item) for item in output])
