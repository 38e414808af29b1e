"""POST /v1/chat/completions: validate → ChatJob → a JSON answer or chat.completion.chunk events (CLIENTS.md §3)."""
from __future__ import annotations

import json
import logging
import secrets
import time
from contextlib import aclosing

from aiohttp import web

from gateway.api.chat_job import ChatJob, ChatService, Final, TokenLogprob
from gateway.api.openai_models import ChatCompletionRequest
from gateway.api.sampling import gen_keys, with_defaults
from gateway.api.structured_output import answer_grammar, tool_call_grammar
from gateway.errors import ApiError, BadRequest, read_json
from gateway.keys import MODEL_NAME, SERVICE, SETTINGS
from gateway.sse import SSEWriter
from gateway.text.output_parser import Delta, ParsedOutput

log = logging.getLogger("gateway.openai")


def to_job(req: ChatCompletionRequest, sampling_defaults: dict | None = None) -> ChatJob:
    if req.n is not None and req.n > 1:
        raise BadRequest("n must be 1: this server generates one choice per request", param="n")
    if req.top_logprobs and not req.logprobs:
        raise BadRequest("top_logprobs needs logprobs: true", param="top_logprobs")
    messages = [m.model_dump(exclude_none=True) for m in req.messages]
    tools = [t.model_dump(exclude_none=True) for t in req.tools or []]
    kwargs = dict(req.chat_template_kwargs or {})
    effort = req.reasoning_effort or (req.reasoning.effort if req.reasoning else None)
    kw_effort = kwargs.pop("reasoning_effort", None)   # null = not given (not the effort "none")
    if effort is None and kw_effort is not None:
        effort = str(kw_effort)
    if effort is None and kwargs.get("enable_thinking") is False:
        effort = "none"
    kwargs.pop("enable_thinking", None)
    if req.tool_choice == "none":
        tools = []
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    sampling = gen_keys(**with_defaults(dict(
        temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, min_p=req.min_p,
        repeat_penalty=req.repetition_penalty, frequency_penalty=req.frequency_penalty,
        presence_penalty=req.presence_penalty, seed=req.seed), sampling_defaults))
    fmt = req.response_format
    grammar = answer_grammar(fmt.type if fmt else None, fmt.json_schema.schema_ if fmt and fmt.json_schema else None,
                             tools=bool(tools), param="response_format.json_schema.schema")
    offered = [t["function"]["name"] for t in tools if isinstance(t.get("function"), dict)]
    if req.tool_choice == "required":
        grammar = tool_call_grammar(offered, offered, "tool_choice")
    elif isinstance(req.tool_choice, dict) and req.tool_choice.get("type") == "function":
        name = (req.tool_choice.get("function") or {}).get("name")
        grammar = tool_call_grammar([name] if name else [], offered, "tool_choice.function.name")
    return ChatJob(messages, tools or None, effort, kwargs, max_tokens, sampling,
                   logprobs=(req.top_logprobs or 0) if req.logprobs else None, grammar=grammar)


def usage(final: Final) -> dict:
    return {"prompt_tokens": final.prompt_tokens, "completion_tokens": final.completion_tokens,
            "total_tokens": final.prompt_tokens + final.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": final.cached_tokens}}


def delta_fields(d: Delta) -> dict:
    if d.kind == "reasoning":
        return {"reasoning_content": d.text}
    if d.kind == "content":
        return {"content": d.text}
    if d.kind == "tool_start":
        return {"tool_calls": [{"index": d.index, "id": d.call_id, "type": "function",
                                "function": {"name": d.name, "arguments": ""}}]}
    if d.kind == "tool_args":
        return {"tool_calls": [{"index": d.index, "function": {"arguments": d.text}}]}
    return {}


def logprob_entry(service: ChatService, item: TokenLogprob) -> dict:
    """OpenAI's logprobs.content entry of one token: its text, logprob, UTF-8 bytes and the alternatives."""
    def piece(token_id: int, logprob: float) -> dict:
        raw = service.tokenizer.token_piece(token_id)
        return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}
    return {**piece(item.id, item.logprob), "top_logprobs": [piece(i, lp) for i, lp in item.top]}


def json_answer(body: dict) -> web.Response:
    """A non-stream answer's JSON (text as UTF-8, not \\u escapes), for the three APIs."""
    return web.json_response(body, dumps=lambda o: json.dumps(o, ensure_ascii=False))


def check_connected(request: web.Request) -> None:
    if request.transport is None or request.transport.is_closing():
        raise ConnectionResetError("the client closed the connection")


async def collect_answer(request: web.Request, answer, add) -> Final:
    """Non-stream responses: feeds every delta of the answer to add(), returns its Final; a closed client ends it."""
    final = None
    async with aclosing(answer) as items:
        async for item in items:
            check_connected(request)
            if isinstance(item, Final):
                final = item
            else:
                add(item)
    return final


async def chat_completions(request: web.Request) -> web.StreamResponse:
    req = ChatCompletionRequest.model_validate(await read_json(request))
    service: ChatService = request.app[SERVICE]
    job = to_job(req, request.app[SETTINGS].sampling_defaults)
    stop = [req.stop] if isinstance(req.stop, str) else req.stop
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    async with service.with_images(job) as with_images:
        if with_images is not None:
            answer = service.run_images(with_images, job.sampling, stop)
            return await (_stream(request, answer, include_usage) if req.stream
                          else _complete(request, answer, job.logprobs is not None))
    async with service.runner.turn() as turn:
        prepared = await service.prepare_async(job)
        answer = service.run(turn, prepared, job.sampling, stop)
        if req.stream:
            return await _stream(request, answer, include_usage)
        return await _complete(request, answer, job.logprobs is not None)


def _envelope(request: web.Request, kind: str) -> dict:
    return {"id": "chatcmpl-" + secrets.token_hex(12), "object": kind, "created": int(time.time()),
            "model": request.app[MODEL_NAME], "system_fingerprint": "strata"}


async def _complete(request: web.Request, answer, with_logprobs: bool) -> web.Response:
    out = ParsedOutput()
    service: ChatService = request.app[SERVICE]
    entries: list[dict] = []

    def add(item) -> None:
        if isinstance(item, TokenLogprob):
            entries.append(logprob_entry(service, item))
        else:
            out.add(item)
    final = await collect_answer(request, answer, add)
    message: dict = {"role": "assistant", "content": out.content or (None if out.tool_calls else "")}
    if out.reasoning:
        message["reasoning_content"] = out.reasoning
    if out.tool_calls:
        message["tool_calls"] = [{"id": c.call_id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for c in out.tool_calls]
    body = _envelope(request, "chat.completion")
    logprobs = {"content": entries, "refusal": None} if with_logprobs else None
    body["choices"] = [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": final.finish_reason}]
    body["usage"] = usage(final)
    body["timings"] = final.timings()
    return json_answer(body)


async def _stream(request: web.Request, answer, include_usage: bool) -> web.StreamResponse:
    sse = SSEWriter(request, request.app[SETTINGS].keepalive_s)
    env = _envelope(request, "chat.completion.chunk")
    service: ChatService = request.app[SERVICE]
    pending: list[dict] = []   # logprobs of tokens whose text has not gone out yet: they ride on the next chunk

    def chunk(delta: dict, finish: str | None = None) -> dict:
        logprobs = None
        if pending:
            logprobs = {"content": pending[:], "refusal": None}
            pending.clear()
        return {**env, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}

    await sse.open()
    try:
        await sse.send(chunk({"role": "assistant", "content": ""}))
        async with aclosing(answer) as items:
            async for item in items:
                if isinstance(item, TokenLogprob):
                    pending.append(logprob_entry(service, item))
                elif isinstance(item, Final):
                    if pending:
                        await sse.send(chunk({}))
                    last = chunk({}, item.finish_reason)
                    last["usage"] = usage(item)
                    last["timings"] = item.timings()
                    await sse.send(last)
                    if include_usage:
                        await sse.send({**env, "choices": [], "usage": usage(item)})
                else:
                    fields = delta_fields(item)
                    if fields:
                        await sse.send(chunk(fields))
        await sse.send("[DONE]")
    except ApiError as e:
        await sse.send(e.openai_body())
        await sse.send("[DONE]")
    except ConnectionError:
        pass  # the client left; closing the answer sent STOP to the engine
    finally:
        await sse.close()
    return sse.response
