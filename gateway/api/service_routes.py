"""GET /health, /status, /metrics, /v1/models; HEAD /; the chat page (GET / and /web/<file> from gateway/web/)."""
from __future__ import annotations

import os
import time

from aiohttp import web

from gateway.errors import NotFound
from gateway.keys import METRICS, MODEL_NAME, RUNNER, SERVICE, SETTINGS, VISION

WEB_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "web")
PLACEHOLDER = ("<!doctype html><html><head><meta charset='utf-8'><title>Strata</title></head><body>"
               "<h1>Strata</h1><p>The chat page is not installed (gateway/web/index.html is missing). "
               "The APIs are at <code>/v1/chat/completions</code> and <code>/v1/messages</code>.</p></body></html>")


async def health(request: web.Request) -> web.Response:
    runner = request.app[RUNNER]
    s = request.app[SETTINGS]
    ok = runner.phase not in ("stopped", "starting")
    body = {
        "status": "ok" if ok else runner.phase, "model": request.app[MODEL_NAME],
        "context": request.app[SERVICE].context, "images": request.app[SERVICE].images_enabled,
        "api_key_required": s.api_key is not None,
        "engine": {"pid": runner.engine.pid if runner.engine else None, "restarts": runner.restarts,
                   "last_failure": runner.last_failure}}
    vision = request.app[VISION]
    if vision is not None:
        h = vision.helper
        body["vision"] = {"state": h.state, "pid": h.pid, "restarts": h.restarts, "last_failure": h.last_failure,
                          "model": s.vision_model, "factor": vision.rule.factor, "min_pixels": vision.rule.min_pixels,
                          "max_pixels": vision.rule.max_pixels, "encoded": vision.encoded,
                          "cache_hits": vision.cache_hits}
    return web.json_response(body)


async def status(request: web.Request) -> web.Response:
    runner = request.app[RUNNER]
    p = dict(runner.progress) if runner.phase in ("reading prompt", "answering", "cancelling") else {}
    body = {"state": runner.phase, "queued": runner.queued}
    vision = request.app[VISION]
    if vision is not None:
        body["vision_state"] = vision.helper.state      # stopped | starting | ready | encoding (a picture)
    if p:
        body["prompt_tokens_done"] = p.get("prompt_done", 0)
        body["prompt_tokens_total"] = p.get("prompt_total", 0)
        body["prompt_tokens_per_second"] = p.get("prompt_tokens_per_s", 0.0)
        body["generated_tokens"] = p.get("generated", 0)
        if p.get("decode_started"):
            dt = time.time() - p["decode_started"]
            body["tokens_per_second"] = round(p.get("generated", 0) / dt, 1) if dt > 0 else 0.0
    return web.json_response(body)


async def metrics(request: web.Request) -> web.Response:
    runner = request.app[RUNNER]
    body = request.app[METRICS].snapshot()
    body.update(state=runner.phase, queued=runner.queued, engine_restarts=runner.restarts,
                engine_info=runner.engine.info if runner.engine else {}, context=request.app[SERVICE].context)
    return web.json_response(body)


async def models(request: web.Request) -> web.Response:
    name = request.app[MODEL_NAME]
    images = request.app[SERVICE].images_enabled
    return web.json_response({"object": "list", "data": [
        {"id": name, "object": "model", "created": 0, "owned_by": "strata",
         "context_length": request.app[SERVICE].context, "images": images,
         "input_modalities": ["text", "image"] if images else ["text"]}]})


async def head_root(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def index(request: web.Request) -> web.Response:
    path = os.path.join(WEB_DIR, "index.html")
    if os.path.exists(path):
        return web.FileResponse(path, headers={"Cache-Control": "no-cache"})
    return web.Response(text=PLACEHOLDER, content_type="text/html")


async def web_file(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    path = os.path.realpath(os.path.join(WEB_DIR, name))
    if not path.startswith(os.path.realpath(WEB_DIR) + os.sep) or not os.path.isfile(path):
        raise NotFound(f"no such file: /web/{name}")
    return web.FileResponse(path, headers={"Cache-Control": "no-cache"})
