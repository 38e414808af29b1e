"""POST /v1/responses and GET /v1/responses/{id}: validate → ChatJob → a response object or the Responses event
stream (response.created … response.completed / response.incomplete), with the last responses kept in memory for
previous_response_id."""
from __future__ import annotations

import logging
import time
from collections import OrderedDict
from contextlib import aclosing
from dataclasses import dataclass

from aiohttp import web

from gateway.api.chat_job import ChatService, Final, TokenLogprob
from gateway.api.openai_routes import collect_answer, json_answer, logprob_entry
from gateway.api.responses_input import namespaced_tools, output_messages, to_job
from gateway.api.responses_models import ResponsesRequest
from gateway.api.responses_output import OutputItems, new_id, response_object
from gateway.errors import ApiError, BadRequest, ContextTooLong, NotFound, read_json
from gateway.keys import MODEL_NAME, SERVICE, SETTINGS
from gateway.sse import SSEWriter

log = logging.getLogger("gateway.responses")
KEPT_RESPONSES = 64


@dataclass
class Stored:
    body: dict
    conversation: list[dict]      # input and output as chat messages, without instructions


class ResponseStore:
    """The last KEPT_RESPONSES responses, in memory (gone when the gateway stops)."""

    def __init__(self, size: int = KEPT_RESPONSES):
        self.size = size
        self._kept: OrderedDict[str, Stored] = OrderedDict()

    def put(self, body: dict, conversation: list[dict]) -> None:
        self._kept[body["id"]] = Stored(body, conversation)
        self._kept.move_to_end(body["id"])
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def get(self, resp_id: str) -> Stored | None:
        stored = self._kept.get(resp_id)
        if stored is not None:
            self._kept.move_to_end(resp_id)
        return stored


STORE = web.AppKey("responses", ResponseStore)


class _Answer:
    """One request's state: the output items, and the response object at any point."""

    def __init__(self, request: web.Request, req: ResponsesRequest, conversation: list[dict], job_logprobs: bool):
        self.request = request
        self.req = req
        self.conversation = conversation
        self.id = new_id("resp")
        self.created_at = int(time.time())
        self.out = OutputItems(with_logprobs=job_logprobs, namespaced=namespaced_tools(req))

    def add(self, item) -> list[dict]:
        """A delta's stream events; a token's logprobs wait for its text (they ride on its delta)."""
        if isinstance(item, TokenLogprob):
            self.out.add_logprob(logprob_entry(self.request.app[SERVICE], item))
            return []
        return self.out.add(item)

    def body(self, final: Final | None = None) -> dict:
        reasoning = self.out.reasoning
        service: ChatService = self.request.app[SERVICE]
        # The reasoning text tokenized again: the engine does not count reasoning and answer tokens apart.
        reasoning_tokens = len(service.tokenizer.encode(reasoning)) if final and reasoning else 0
        return response_object(self.req, self.id, self.created_at, self.request.app[MODEL_NAME],
                               self.out.items if final else [], final, reasoning_tokens)

    def finish(self, final: Final) -> tuple[list[dict], dict]:
        """Closes the last item (its events, and the response) and keeps the response unless store is false."""
        events = self.out.close("incomplete" if final.finish_reason == "length" else "completed")
        body = self.body(final)
        if self.req.store is not False:
            self.request.app[STORE].put(body, self.conversation + output_messages(body["output"]))
        return events, body


def _history(request: web.Request, req: ResponsesRequest) -> list[dict]:
    if not req.previous_response_id:
        return []
    stored = request.app[STORE].get(req.previous_response_id)
    if stored is None:
        raise BadRequest(f"Previous response with id '{req.previous_response_id}' not found.",
                         param="previous_response_id", code="previous_response_not_found")
    return stored.conversation


async def create(request: web.Request) -> web.StreamResponse:
    req = ResponsesRequest.model_validate(await read_json(request))
    service: ChatService = request.app[SERVICE]
    job, conversation = to_job(req, _history(request, req), request.app[SETTINGS].sampling_defaults)
    answer = _Answer(request, req, conversation, job.logprobs is not None)
    try:
        async with service.with_images(job) as with_images:
            if with_images is not None:
                run = service.run_images(with_images, job.sampling)
                return await (_stream(answer, run) if req.stream else _complete(answer, run))
        async with service.runner.turn() as turn:
            prepared = await service.prepare_async(job)
            run = service.run(turn, prepared, job.sampling)
            return await (_stream(answer, run) if req.stream else _complete(answer, run))
    except ContextTooLong as e:
        e.param = "input"
        raise


async def retrieve(request: web.Request) -> web.Response:
    resp_id = request.match_info["id"]
    stored = request.app[STORE].get(resp_id)
    if stored is None:
        raise NotFound(f"Response with id '{resp_id}' not found.", param="id")
    return json_answer(stored.body)


async def _complete(answer: _Answer, run) -> web.Response:
    final = await collect_answer(answer.request, run, answer.add)
    return json_answer(answer.finish(final)[1])


async def _stream(answer: _Answer, run) -> web.StreamResponse:
    sse = SSEWriter(answer.request, answer.request.app[SETTINGS].keepalive_s)
    sequence = 0

    async def send(event: dict) -> None:
        nonlocal sequence
        await sse.send({**event, "sequence_number": sequence}, event=event["type"])
        sequence += 1

    await sse.open()
    try:
        for kind in ("response.created", "response.in_progress"):
            await send({"type": kind, "response": answer.body()})
        async with aclosing(run) as items:
            async for item in items:
                if isinstance(item, Final):
                    events, body = answer.finish(item)
                    for event in events:
                        await send(event)
                    kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
                    await send({"type": kind, "response": body})
                else:
                    for event in answer.add(item):
                        await send(event)
    except ApiError as e:
        await send({"type": "error", "code": e.code or e.openai_type, "message": e.message, "param": e.param})
    except ConnectionError:
        pass  # the client left; closing the answer sent STOP to the engine
    finally:
        await sse.close()
    return sse.response
