"""Command line + environment → frozen Settings."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Settings:
    model: str
    engine: str
    engine_args: tuple[str, ...]
    host: str
    port: int
    api_key: str | None
    ctx: int | None
    model_name: str
    silence_timeout_s: float
    ready_timeout_s: float
    keepalive_s: float
    max_body_bytes: int
    log_level: str


def default_engine() -> str:
    for path in (os.path.join(REPO, "build", "engine", "strata"), os.path.join(REPO, "build", "strata")):
        if os.path.exists(path):
            return path
    return os.path.join(REPO, "build", "engine", "strata")


def parse_settings(argv: list[str] | None = None) -> Settings:
    ap = argparse.ArgumentParser(prog="python -m gateway", description="Strata's OpenAI/Anthropic gateway")
    ap.add_argument("--model", required=True, help="the model's GGUF file (first shard)")
    ap.add_argument("--engine", default=None, help="the strata binary (default: build/engine/strata)")
    ap.add_argument("--engine-arg", action="append", default=[], help="an extra argument for `strata --serve`")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this PC only)")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--api-key", default=None, help="require this key (default: $STRATA_API_KEY, else none)")
    ap.add_argument("--ctx", type=int, default=None, help="context length for the engine (tokens)")
    ap.add_argument("--model-name", default=None, help="the model id the API reports (default: from the GGUF)")
    ap.add_argument("--engine-timeout", type=float, default=300.0,
                    help="seconds of engine silence during a request before it is killed and restarted")
    ap.add_argument("--ready-timeout", type=float, default=900.0, help="seconds the engine may take to load")
    ap.add_argument("--keepalive", type=float, default=10.0, help="seconds between SSE keep-alive comments")
    ap.add_argument("--max-body-mb", type=float, default=64.0, help="largest request body accepted (MB)")
    ap.add_argument("--log-level", default="info")
    a = ap.parse_args(argv)
    if a.port < 0 or a.port > 65535:
        ap.error(f"--port {a.port} is not a port number")
    if a.ctx is not None and a.ctx < 16:
        ap.error(f"--ctx {a.ctx} is too small")
    return Settings(model=a.model, engine=a.engine or default_engine(), engine_args=tuple(a.engine_arg),
                    host=a.host, port=a.port, api_key=a.api_key or os.environ.get("STRATA_API_KEY") or None,
                    ctx=a.ctx, model_name=a.model_name or "", silence_timeout_s=a.engine_timeout,
                    ready_timeout_s=a.ready_timeout, keepalive_s=a.keepalive,
                    max_body_bytes=int(a.max_body_mb * 1024 * 1024), log_level=a.log_level)


def engine_argv(s: Settings) -> list[str]:
    argv = [s.engine, "--serve", "--model", s.model]
    if s.ctx:
        argv += ["--ctx", str(s.ctx)]
    return argv + list(s.engine_args)
