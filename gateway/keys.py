"""Typed application keys (aiohttp AppKey) shared by the app and the routes."""
from __future__ import annotations

from aiohttp import web

from gateway.metrics import Metrics
from gateway.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
SERVICE = web.AppKey("service", object)       # gateway.api.chat_job.ChatService
RUNNER = web.AppKey("runner", object)         # gateway.engine.runner.EngineRunner
METRICS = web.AppKey("metrics", Metrics)
MODEL_NAME = web.AppKey("model_name", str)
VISION = web.AppKey("vision", object)         # gateway.vision.service.VisionService, or None (text only)
