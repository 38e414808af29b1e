"""The API-neutral request both APIs produce (ChatJob) and the one path that runs it: render the template, tokenize,
check the context, queue for the engine, and turn its tokens into reasoning / content / tool-call deltas."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import AsyncIterator

from gateway.engine.process import EngineFailed
from gateway.engine.protocol import Done, Err, Progress, Resume, Token, format_gen
from gateway.errors import ApiError, BadRequest, ContextTooLong, EngineUnavailable
from gateway.metrics import Metrics
from gateway.text.chat_template import (ChatTemplate, TemplateError, prepare_messages, prompt_opens_thinking,
                                        thinking_kwargs)
from gateway.text.detokenizer import Detokenizer
from gateway.text.output_parser import THINK_CLOSE, Delta, OutputParser
from gateway.text.stop_sequences import StopSequenceFilter
from gateway.text.tokenizer import TextTokenizer
from gateway.vision.images import PreparedImage, expand_image_pads
from gateway.vision.images import has_images as _has_images

log = logging.getLogger("gateway.chat")
LOOP_GUARD_TOKENS = 256      # one token repeated this many times in a row ends the answer
PROGRESS_LOG_S = 15.0


@dataclass
class ChatJob:
    messages: list[dict]                       # OpenAI-style messages (content: str | parts | None)
    tools: list[dict] | None = None            # OpenAI-style [{"type": "function", "function": {...}}]
    effort: str | None = None                  # none | minimal | low | medium | high | xhigh | max | None
    template_kwargs: dict = field(default_factory=dict)
    max_tokens: int | None = None              # None: the rest of the context
    sampling: dict = field(default_factory=dict)
    stop: list[str] = field(default_factory=list)   # client stop sequences (answer text, not reasoning or tools)
    logprobs: int | None = None                # each token's logprob and this many alternatives (0..20); None: off
    grammar: str | None = None                 # structured outputs: the answer's grammar (docs/grammar.md); None: free


@dataclass
class Prepared:
    prompt: str
    ids: list[int]
    max_new: int
    starts_in_reasoning: bool
    schemas: dict[str, dict]
    images: list[PreparedImage] = field(default_factory=list)
    embeddings_file: str | None = None      # GENI's file: every picture's SVE1 rows, in prompt order
    image_folder: str | None = None         # the request's folder for pictures and embeddings files
    logprobs: int | None = None             # ChatJob.logprobs
    grammar: str | None = None              # ChatJob.grammar
    grammar_after: int | None = None        # the grammar applies after this token (</think>: the prompt opens thinking)


@dataclass
class TokenLogprob:
    """A generated token's log-probability under the model (protocol.md §3, logprobs=N) and its N most likely
    alternatives (id, logprob), best first; yielded before the deltas of its text."""
    id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


@dataclass
class Final:
    finish_reason: str          # stop | length | tool_calls
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    prompt_ms: float
    decode_ms: float
    drafts_offered: int = 0     # MTP drafts verified / accepted (speculation)
    drafts_accepted: int = 0
    stop_sequence: str | None = None   # the client stop sequence that ended the answer
    cache_hits: int = 0         # expert-cache hits and look-ups of the request (DONE; 0 without a GPU cache)
    cache_lookups: int = 0

    def timings(self) -> dict:
        """llama.cpp-style timings."""
        n_prompt = self.prompt_tokens - self.cached_tokens
        return {"cache_n": self.cached_tokens, "prompt_n": n_prompt, "prompt_ms": self.prompt_ms,
                "prompt_per_second": n_prompt * 1000.0 / self.prompt_ms if self.prompt_ms > 0 else 0.0,
                "predicted_n": self.completion_tokens, "predicted_ms": self.decode_ms,
                "predicted_per_second": self.completion_tokens * 1000.0 / self.decode_ms if self.decode_ms > 0
                else 0.0, "draft_n": self.drafts_offered, "draft_n_accepted": self.drafts_accepted}


def has_images(messages: list[dict]) -> bool:
    return _has_images(messages)


class ChatService:
    def __init__(self, tokenizer: TextTokenizer, template: ChatTemplate, runner, metrics: Metrics,
                 fallback_context: int, vision=None):
        self.tokenizer = tokenizer
        self.template = template
        self.runner = runner
        self.metrics = metrics
        self.fallback_context = fallback_context
        self.vision = vision                       # gateway.vision.service.VisionService, or None: text only
        self.image_pad_id = tokenizer.id_of("<|image_pad|>")

    @property
    def images_enabled(self) -> bool:
        """A vision helper is configured and the engine (once started) says it reads images."""
        if self.vision is None:
            return False
        engine = self.runner.engine
        return engine is None or not engine.info or engine.info.get("vision") == "1"

    @property
    def context(self) -> int:
        return self.runner.max_context or self.fallback_context

    def render(self, job: ChatJob) -> str:
        if not job.messages:
            raise BadRequest("messages must not be empty", param="messages")
        if self.vision is None and has_images(job.messages):
            raise BadRequest("this server was started without image support; send text only", param="messages")
        kwargs = dict(job.template_kwargs)
        try:
            kwargs.update(thinking_kwargs(job.effort))
            return self.template.render(prepare_messages(job.messages), tools=job.tools or None,
                                        add_generation_prompt=True, **kwargs)
        except TemplateError as e:
            raise BadRequest(str(e), param="messages") from e

    def count_tokens(self, job: ChatJob, images: list[PreparedImage] | None = None) -> int:
        ids = self.tokenizer.encode(self.render(job))
        if images:
            ids = self._expand(ids, images)
        return len(ids)

    async def count_tokens_async(self, job: ChatJob) -> int:
        """Prompt tokens, each picture counted as its image tokens (sizes only: nothing is encoded)."""
        images = None
        if self.vision is not None and has_images(job.messages):
            self.render(job)                  # the template's refusals first
            images = await self.vision.load(job.messages)
        return await asyncio.get_running_loop().run_in_executor(None, self.count_tokens, job, images)

    def _expand(self, ids: list[int], images: list[PreparedImage]) -> list[int]:
        if self.image_pad_id is None:
            raise BadRequest("this model's vocabulary has no <|image_pad|> token; send text only", param="messages")
        return expand_image_pads(ids, self.image_pad_id, [im.n_tokens for im in images])

    @contextlib.asynccontextmanager
    async def with_images(self, job: ChatJob):
        """For a request with pictures: loads and sizes them, renders and checks the prompt (image tokens counted;
        every 400 comes from here, before a response starts) and yields the Prepared, whose pictures run_images
        encodes; the request's files are removed afterwards. For a text request: yields None."""
        if self.vision is None or not has_images(job.messages):
            yield None
            return
        engine = self.runner.engine
        if engine is not None and engine.info and engine.info.get("vision") != "1":
            raise BadRequest("the engine was started without image support (it does not report vision=1); send "
                             "text only", param="messages")
        self.render(job)                      # the template's refusals before any fetching
        images = await self.vision.load(job.messages)
        prepared = await asyncio.get_running_loop().run_in_executor(None, self.prepare, job, images)
        prepared.image_folder = self.vision.new_request_dir()
        try:
            yield prepared
        finally:
            self.vision.remove(prepared.image_folder)

    async def run_images(self, prepared: Prepared, sampling: dict, stop: list[str] | None = None
                         ) -> AsyncIterator[Delta | Final]:
        """run() for a request with pictures: encodes them into one embeddings file first (a stream is already open,
        so its keep-alive comments flow meanwhile; outside the engine's queue, so the engine serves others), then
        takes its place in the queue. A dead helper raises VisionUnavailable (503 / an error event)."""
        prepared.embeddings_file = await self.vision.embeddings_file(prepared.images, prepared.image_folder)
        async with self.runner.turn() as turn:
            async with aclosing(self.run(turn, prepared, sampling, stop)) as items:
                async for item in items:
                    yield item

    def prepare(self, job: ChatJob, images: list[PreparedImage] | None = None) -> Prepared:
        prompt = self.render(job)
        ids = self.tokenizer.encode(prompt)
        if images:
            ids = self._expand(ids, images)
        room = self.context - len(ids)
        if room < 1:
            raise ContextTooLong(len(ids), 0, self.context)
        if job.max_tokens is not None and job.max_tokens < 1:
            raise BadRequest(f"max_tokens must be at least 1 (got {job.max_tokens})", param="max_tokens")
        # A max_tokens beyond the room left is served up to the end of the context (agents ask for 32K+).
        max_new = room if job.max_tokens is None else min(job.max_tokens, room)
        schemas = {}
        for tool in job.tools or []:
            fn = tool.get("function") or {}
            if fn.get("name"):
                schemas[fn["name"]] = fn.get("parameters") or {}
        opens_thinking = prompt_opens_thinking(prompt)
        grammar_after = None
        if job.grammar is not None and opens_thinking:
            grammar_after = self.tokenizer.id_of(THINK_CLOSE)
            if grammar_after is None:
                # The grammar holds from the first token, so the answer has no reasoning: parse it all as content.
                log.info("structured output: the vocabulary has no %s token, so the answer starts without thinking",
                         THINK_CLOSE)
                opens_thinking = False
        return Prepared(prompt, ids, max_new, opens_thinking, schemas, list(images or []),
                        logprobs=job.logprobs, grammar=job.grammar, grammar_after=grammar_after)

    async def prepare_async(self, job: ChatJob) -> Prepared:
        return await asyncio.get_running_loop().run_in_executor(None, self.prepare, job)

    async def run(self, turn, prepared: Prepared, sampling: dict, stop: list[str] | None = None
                  ) -> AsyncIterator[Delta | TokenLogprob | Final]:
        """Deltas of the answer (with prepared.logprobs, each token's TokenLogprob before them), then one Final.
        Raises ApiError (EngineUnavailable when the engine failed)."""
        stops = StopSequenceFilter(stop)
        line = format_gen(prepared.max_new, prepared.ids, sampling, prepared.embeddings_file, prepared.logprobs,
                          prepared.grammar, prepared.grammar_after)
        if prepared.embeddings_file:
            log.info("GENI: %d picture(s), rows %s, %d prompt tokens, embeddings file %s", len(prepared.images),
                     "+".join(f"{im.nx}x{im.ny}={im.n_tokens}" for im in prepared.images), len(prepared.ids),
                     prepared.embeddings_file)
        parser = OutputParser(prepared.schemas, prepared.starts_in_reasoning)
        detok = Detokenizer(self.tokenizer)
        started = time.monotonic()
        self.metrics.request_started()
        try:
            async with aclosing(self._events(turn, line, parser, detok, stops, prepared, started)) as items:
                async for item in items:
                    yield item
        finally:
            self.metrics.in_flight = max(0, self.metrics.in_flight - 1)

    @staticmethod
    def _stop_filter(stops: StopSequenceFilter, deltas):
        """Content deltas go through the client's stop sequences; the rest passes (nothing after a match)."""
        for d in deltas:
            if stops.matched is not None:
                return
            if d.kind == "content":
                text = stops.push(d.text)
                if text:
                    yield Delta("content", text)
            else:
                yield d

    async def _events(self, turn, line, parser, detok, stops, prepared, started):
        reused, last_token, repeats, loop_guard = 0, None, 0, False
        ended_at = None   # tokens taken when a stop sequence or the loop guard ended the answer (the rest is dropped)
        seen = 0
        last_log = started
        done: Done | None = None
        try:
            async with aclosing(turn.generate(line)) as events:
                async for event in events:
                    if isinstance(event, Token):
                        if ended_at is not None:
                            continue  # generated before the engine read STOP: not part of the answer
                        seen += 1
                        repeats = repeats + 1 if event.id == last_token else 1
                        last_token = event.id
                        if event.id in self.tokenizer.stop_ids:
                            continue
                        if event.logprob is not None:
                            yield TokenLogprob(event.id, event.logprob, event.top)
                        for d in self._stop_filter(stops, parser.feed(detok.push(event.id))):
                            yield d
                        if stops.matched is not None:
                            ended_at = seen
                            turn.stop()   # the engine stops; its DONE (timings) still comes
                            continue
                        if repeats >= LOOP_GUARD_TOKENS:
                            log.warning("loop guard: token %d repeated %d times; ending the answer", event.id,
                                        repeats)
                            loop_guard = True
                            ended_at = seen
                            turn.stop()
                            continue
                    elif isinstance(event, Resume):
                        reused = event.reused
                    elif isinstance(event, Progress):
                        now = time.monotonic()
                        if now - last_log >= PROGRESS_LOG_S:
                            last_log = now
                            log.info("reading the prompt: %d / %d tokens, %.0f tok/s", event.reached, event.total,
                                     event.tokens_per_s)
                    elif isinstance(event, Done):
                        done = event
                    elif isinstance(event, Err):
                        self.metrics.request_failed()
                        if event.message.startswith(("bad grammar", "bad value for grammar")):
                            # The gateway wrote this grammar from the request's schema: a converter bug, not the
                            # client's fault.
                            log.error("the engine refused a grammar: %s", event.message)
                            raise ApiError(f"the engine refused the grammar made from the response format (a bug "
                                           f"in the gateway's JSON schema converter): {event.message}")
                        if event.message.startswith("grammar"):
                            raise BadRequest(f"structured outputs are not available with this model: "
                                             f"{event.message}")
                        if event.message.startswith("engine error: grammar:"):
                            raise ApiError("the answer reached a point where no token of the model's vocabulary fits "
                                           f"the response format's grammar: {event.message}")
                        if event.message.startswith("engine error"):
                            raise ApiError(f"the engine failed: {event.message}")
                        raise BadRequest(f"the engine refused the request: {event.message}")
        except EngineFailed as e:
            self.metrics.request_failed()
            raise EngineUnavailable(f"the engine stopped working: {e}") from e
        if stops.matched is None:
            for d in self._stop_filter(stops, parser.feed(detok.flush())):
                yield d
            for d in self._stop_filter(stops, parser.finish()):
                yield d
            tail = stops.flush()
            if tail:
                yield Delta("content", tail)
        generated = ended_at if ended_at is not None else done.generated if done else \
            self.runner.progress.get("generated", 0)
        if stops.matched is not None:
            finish = "stop"
        elif loop_guard or (done and done.finish == "length"):
            finish = "length"
        elif parser.tool_call_count:
            finish = "tool_calls"
        else:
            finish = "stop"
        final = Final(finish, len(prepared.ids), generated, done.reused if done else reused,
                      done.prompt_ms if done else 0.0, done.decode_ms if done else 0.0,
                      done.drafts_offered if done else 0, done.drafts_accepted if done else 0,
                      stops.matched, done.cache_hits if done else 0, done.cache_lookups if done else 0)
        self.metrics.request_finished(final, time.monotonic() - started)
        yield final
