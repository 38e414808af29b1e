"""Builds the aiohttp Application: routes, the auth and error middlewares, app state, and the engine's lifetime
(started with the app, stopped with it)."""
from __future__ import annotations

import asyncio
import hmac
import logging
import os

from aiohttp import web

from gateway.api import anthropic_routes, openai_routes, responses_routes, service_routes
from gateway.api.chat_job import ChatService
from gateway.engine.process import EngineFailed
from gateway.engine.runner import EngineRunner
from gateway.errors import Unauthorized, error_middleware, error_response
from gateway.keys import METRICS, MODEL_NAME, RUNNER, SERVICE, SETTINGS, VISION
from gateway.metrics import Metrics
from gateway.settings import Settings, engine_argv
from gateway.text.chat_template import load_template
from gateway.text.gguf_meta import read_gguf_meta
from gateway.text.tokenizer import load_tokenizer
from gateway.vision.helper import VisionHelper, helper_info, rule_of
from gateway.vision.service import VisionService

log = logging.getLogger("gateway")


def _needs_key(path: str) -> bool:
    return path.startswith("/v1/") or path == "/metrics"


def _key_of(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


@web.middleware
async def auth_middleware(request: web.Request, handler):
    key = request.app[SETTINGS].api_key
    if key and _needs_key(request.path):
        given = _key_of(request)
        if given is None or not hmac.compare_digest(given.encode(), key.encode()):
            return error_response(request, Unauthorized(
                "missing or wrong API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"))
    return await handler(request)


async def _engine_lifetime(app: web.Application):
    runner: EngineRunner = app[RUNNER]
    start = asyncio.create_task(runner.start())
    start.add_done_callback(lambda t: t.cancelled() or t.exception())  # failures are logged by the runner
    vision: VisionService | None = app[VISION]
    vision_start = None
    if vision is not None:
        vision_start = asyncio.create_task(vision.helper.start())
        vision_start.add_done_callback(lambda t: t.cancelled() or t.exception())  # logged; retried per request
    yield
    start.cancel()
    if vision_start is not None:
        vision_start.cancel()
        await vision.helper.close()
    await runner.close()


def build_vision(settings: Settings) -> VisionService | None:
    """The vision helper and the resize rule its model gives (`strata-vision --info`), or None without
    --vision-model. A missing helper or model file stops the gateway at once with a clear message."""
    if not settings.vision_model:
        return None
    info = helper_info(settings.vision_helper, settings.vision_model)
    rule = rule_of(info, settings.image_max_pixels)
    argv = [settings.vision_helper, "--model", settings.vision_model, *settings.vision_args]
    helper = VisionHelper(argv, settings.ready_timeout_s, settings.vision_timeout_s)
    log.info("images on: %s (n_embd %s; pictures resized to multiples of %d, %d..%d pixels)", settings.vision_model,
             info.get("n_embd"), rule.factor, rule.min_pixels, rule.max_pixels)
    # Local picture files only for a server on this PC only: a client elsewhere must not read this PC's files.
    local_files = settings.host in ("127.0.0.1", "localhost", "::1")
    return VisionService(helper, rule, int(info["n_embd"]), settings.vision_tmp, settings.image_max_bytes,
                         settings.image_fetch_timeout_s, local_files=local_files)


def build_app(settings: Settings) -> web.Application:
    if not os.path.exists(settings.model):
        raise SystemExit(f"model file not found: {settings.model}")
    meta = read_gguf_meta(settings.model)
    tokenizer = load_tokenizer(settings.model, meta)
    template = load_template(settings.model, meta.chat_template)
    name = settings.model_name or meta.name or os.path.splitext(os.path.basename(settings.model))[0]
    runner = EngineRunner(engine_argv(settings), settings.silence_timeout_s, settings.ready_timeout_s)
    metrics = Metrics()
    fallback_context = settings.ctx or meta.context_length or 4096
    app = web.Application(middlewares=[error_middleware, auth_middleware], client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app[RUNNER] = runner
    app[METRICS] = metrics
    app[MODEL_NAME] = name
    vision = build_vision(settings)
    if vision is not None and tokenizer.id_of("<|image_pad|>") is None:
        raise SystemExit(f"--vision-model: the model {settings.model} has no <|image_pad|> token in its vocabulary")
    app[VISION] = vision
    app[SERVICE] = ChatService(tokenizer, template, runner, metrics, fallback_context, vision)
    app[responses_routes.STORE] = responses_routes.ResponseStore()
    app.cleanup_ctx.append(_engine_lifetime)
    app.router.add_post("/v1/chat/completions", openai_routes.chat_completions)
    app.router.add_post("/v1/responses", responses_routes.create)
    app.router.add_get("/v1/responses/{id}", responses_routes.retrieve)
    app.router.add_post("/v1/messages", anthropic_routes.messages)
    app.router.add_post("/v1/messages/count_tokens", anthropic_routes.count_tokens)
    app.router.add_get("/v1/models", service_routes.models)
    app.router.add_get("/health", service_routes.health)
    app.router.add_get("/status", service_routes.status)
    app.router.add_get("/metrics", service_routes.metrics)
    app.router.add_route("HEAD", "/", service_routes.head_root)
    app.router.add_get("/", service_routes.index, allow_head=False)
    app.router.add_get("/web/{name:.+}", service_routes.web_file)
    log.info("model %s (%s), %d tokens in the vocabulary, template %d chars", name, settings.model,
             tokenizer.vocab_size, len(template.source))
    return app


__all__ = ["build_app", "EngineFailed"]
