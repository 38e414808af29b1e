"""POST /v1/messages (also ?beta=true) and /v1/messages/count_tokens: validate → ChatJob → a JSON message or the
Anthropic event stream (message_start, content blocks, message_delta with usage, message_stop; CLIENTS.md §3)."""
from __future__ import annotations

import json
import logging
import secrets
from contextlib import aclosing

from aiohttp import web

from gateway.api.anthropic_models import Block, CountTokensRequest, MessagesRequest
from gateway.api.chat_job import ChatJob, ChatService, Final
from gateway.api.openai_routes import collect_answer, json_answer
from gateway.api.sampling import DEFAULT_FIELDS, gen_keys, with_defaults
from gateway.api.structured_output import answer_grammar, tool_call_grammar
from gateway.errors import ApiError, read_json
from gateway.keys import MODEL_NAME, SERVICE, SETTINGS
from gateway.sse import SSEWriter
from gateway.text.output_parser import Delta

log = logging.getLogger("gateway.anthropic")
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _stop_reason(final: Final) -> str:
    return "stop_sequence" if final.stop_sequence is not None else STOP_REASONS[final.finish_reason]
SIGNATURE = "strata"  # thinking blocks must carry a signature; clients send it back unchanged


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")


def _effort(req: CountTokensRequest) -> str | None:
    effort = req.output_config.effort if req.output_config else None
    if req.thinking is not None:
        if req.thinking.type == "disabled":
            return "none"
        if req.thinking.type == "enabled" and req.thinking.budget_tokens and effort is None:
            b = req.thinking.budget_tokens
            return "low" if b <= 4096 else "medium" if b <= 16384 else "high"
    return effort


def _image_part(source) -> dict:
    """An Anthropic image block as a content part the template renders as a picture (gateway/vision reads source)."""
    return {"type": "image", "source": source if isinstance(source, dict) else {}}


def _tool_content(b: Block):
    """A tool_result's content: text, or text and pictures (an agent's screenshot or image file) as parts."""
    prefix = "Error: " if b.is_error else ""
    if isinstance(b.content, list) and any(isinstance(p, dict) and p.get("type") == "image" for p in b.content):
        parts: list[dict] = [{"type": "text", "text": prefix}] if prefix else []
        for p in b.content:
            if isinstance(p, dict) and p.get("type") == "image":
                parts.append(_image_part(p.get("source")))
            elif isinstance(p, dict) and p.get("type", "text") == "text":
                parts.append({"type": "text", "text": p.get("text", "")})
        return parts
    return prefix + _text(b.content)


def _user_message(blocks: list[Block], out: list[dict]) -> None:
    parts: list[dict] = []
    for b in blocks:
        if b.type == "tool_result":
            out.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": _tool_content(b)})
        elif b.type == "text":
            parts.append({"type": "text", "text": b.text or ""})
        elif b.type in ("image", "document"):
            parts.append(_image_part((b.model_extra or {}).get("source")))
    if parts:
        out.append({"role": "user", "content": parts})


def _assistant_message(blocks: list[Block], out: list[dict]) -> None:
    reasoning, text, calls = "", "", []
    for b in blocks:
        if b.type == "thinking":
            reasoning += b.thinking or ""
        elif b.type == "text":
            text += b.text or ""
        elif b.type == "tool_use":
            calls.append({"id": b.id, "type": "function", "function": {"name": b.name, "arguments": b.input or {}}})
    m: dict = {"role": "assistant", "content": text}
    if reasoning:
        m["reasoning_content"] = reasoning
    if calls:
        m["tool_calls"] = calls
    out.append(m)


def to_job(req: CountTokensRequest, sampling_defaults: dict | None = None) -> ChatJob:
    messages: list[dict] = []
    system = _text([b.model_dump() for b in req.system] if isinstance(req.system, list) else req.system)
    if system:
        messages.append({"role": "system", "content": system})
    for m in req.messages:
        blocks = [Block(type="text", text=m.content)] if isinstance(m.content, str) else m.content
        if m.role == "system":
            messages.append({"role": "system", "content": _text([b.model_dump() for b in blocks])})
        elif m.role == "user":
            _user_message(blocks, messages)
        else:
            _assistant_message(blocks, messages)
    tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                               "parameters": t.input_schema or {"type": "object", "properties": {}}}}
             for t in req.tools or [] if t.input_schema is not None]
    if req.tool_choice and req.tool_choice.get("type") == "none":
        tools = []
    sampling = {}
    if isinstance(req, MessagesRequest):
        # The Messages API has three sampling fields; the server's defaults may set the others too.
        fields = dict.fromkeys(DEFAULT_FIELDS) | dict(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k)
        sampling = gen_keys(**with_defaults(fields, sampling_defaults))
    fmt = req.output_config.format if req.output_config else None
    grammar = answer_grammar(fmt.type if fmt else None, fmt.schema_ if fmt else None, tools=bool(tools),
                             param="output_config.format.schema")
    offered = [t["function"]["name"] for t in tools]
    choice = (req.tool_choice or {}).get("type")
    if choice == "any":
        grammar = tool_call_grammar(offered, offered, "tool_choice")
    elif choice == "tool":
        name = req.tool_choice.get("name")
        grammar = tool_call_grammar([name] if name else [], offered, "tool_choice.name")
    return ChatJob(messages, tools or None, _effort(req), {}, getattr(req, "max_tokens", None), sampling,
                   grammar=grammar)


async def count_tokens(request: web.Request) -> web.Response:
    req = CountTokensRequest.model_validate(await read_json(request))
    service: ChatService = request.app[SERVICE]
    n = await service.count_tokens_async(to_job(req))
    return web.json_response({"input_tokens": n})


async def messages(request: web.Request) -> web.StreamResponse:
    req = MessagesRequest.model_validate(await read_json(request))
    service: ChatService = request.app[SERVICE]
    job = to_job(req, request.app[SETTINGS].sampling_defaults)
    msg_id = "msg_" + secrets.token_hex(12)
    async with service.with_images(job) as with_images:
        if with_images is not None:
            answer = service.run_images(with_images, job.sampling, req.stop_sequences)
            if req.stream:
                return await _stream(request, answer, msg_id, len(with_images.ids))
            return await _complete(request, answer, msg_id)
    async with service.runner.turn() as turn:
        prepared = await service.prepare_async(job)
        answer = service.run(turn, prepared, job.sampling, req.stop_sequences)
        if req.stream:
            return await _stream(request, answer, msg_id, len(prepared.ids))
        return await _complete(request, answer, msg_id)


def _usage(final: Final) -> dict:
    return {"input_tokens": final.prompt_tokens - final.cached_tokens, "output_tokens": final.completion_tokens,
            "cache_read_input_tokens": final.cached_tokens, "cache_creation_input_tokens": 0}


def _tool_use_id(call_id: str) -> str:
    """Anthropic's spelling of a tool call id ("toolu_…"; the parser makes OpenAI's "call_…")."""
    return "toolu_" + call_id.removeprefix("call_")


class _Blocks:
    """Turns deltas into content blocks: a new block whenever the kind changes or a tool call starts."""

    def __init__(self):
        self.blocks: list[dict] = []
        self.kind: str | None = None
        self.tool_json: dict[int, str] = {}

    def add(self, d: Delta) -> list[dict]:
        """The stream events for this delta."""
        events = []
        kind = {"reasoning": "thinking", "content": "text", "tool_start": "tool_use"}.get(d.kind)
        if kind and (kind != self.kind or kind == "tool_use"):
            events += self.close()
            block = {"thinking": {"type": "thinking", "thinking": "", "signature": ""},
                     "text": {"type": "text", "text": ""},
                     "tool_use": {"type": "tool_use", "id": _tool_use_id(d.call_id), "name": d.name, "input": {}}}[kind]
            self.blocks.append(dict(block))
            self.kind = kind
            events.append({"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": block})
        i = len(self.blocks) - 1
        if d.kind == "reasoning":
            self.blocks[i]["thinking"] += d.text
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "thinking_delta", "thinking": d.text}})
        elif d.kind == "content":
            self.blocks[i]["text"] += d.text
            events.append({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": d.text}})
        elif d.kind == "tool_args":
            self.tool_json[i] = self.tool_json.get(i, "") + d.text
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "input_json_delta", "partial_json": d.text}})
        return events

    def close(self) -> list[dict]:
        if self.kind is None:
            return []
        i = len(self.blocks) - 1
        events = []
        if self.kind == "thinking":
            self.blocks[i]["signature"] = SIGNATURE
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "signature_delta", "signature": SIGNATURE}})
        elif self.kind == "tool_use":
            try:
                self.blocks[i]["input"] = json.loads(self.tool_json.get(i) or "{}")
            except json.JSONDecodeError:
                self.blocks[i]["input"] = {}
        self.kind = None
        return events + [{"type": "content_block_stop", "index": i}]


def _message(request: web.Request, msg_id: str, content: list, stop_reason, usage: dict,
             stop_sequence: str | None = None) -> dict:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": request.app[MODEL_NAME],
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage}


async def _complete(request: web.Request, answer, msg_id: str) -> web.Response:
    blocks = _Blocks()
    final = await collect_answer(request, answer, blocks.add)
    blocks.close()
    body = _message(request, msg_id, blocks.blocks, _stop_reason(final), _usage(final), final.stop_sequence)
    return json_answer(body)


async def _stream(request: web.Request, answer, msg_id: str, prompt_tokens: int) -> web.StreamResponse:
    sse = SSEWriter(request, request.app[SETTINGS].keepalive_s)

    async def send(event: dict) -> None:
        await sse.send(event, event=event["type"])

    await sse.open()
    blocks = _Blocks()
    try:
        await send({"type": "message_start", "message": _message(
            request, msg_id, [], None, {"input_tokens": prompt_tokens, "output_tokens": 0,
                                        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0})})
        await send({"type": "ping"})
        async with aclosing(answer) as items:
            async for item in items:
                if isinstance(item, Final):
                    for event in blocks.close():
                        await send(event)
                    await send({"type": "message_delta", "delta": {"stop_reason": _stop_reason(item),
                                                                   "stop_sequence": item.stop_sequence},
                                "usage": _usage(item)})
                    await send({"type": "message_stop"})
                else:
                    for event in blocks.add(item):
                        await send(event)
    except ApiError as e:
        await sse.send(e.anthropic_body(), event="error")
    except ConnectionError:
        pass
    finally:
        await sse.close()
    return sse.response
