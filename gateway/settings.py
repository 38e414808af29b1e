"""Command line + environment → frozen Settings."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

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
    vision_model: str | None = None           # the vision tower's GGUF: images on (strata-vision + engine --vision)
    vision_helper: str = ""                   # the strata-vision binary
    vision_args: tuple[str, ...] = ()
    vision_tmp: str | None = None             # where pictures (PPM) and embeddings files are written
    vision_timeout_s: float = 600.0           # the most one picture may take in the helper
    image_max_bytes: int = 20 * 1024 * 1024   # the largest picture accepted (base64 decoded, or fetched)
    image_fetch_timeout_s: float = 20.0
    image_max_pixels: int | None = None       # a lower max_pixels than the vision model's (None: the model's)
    sampling_defaults: dict = field(default_factory=dict)   # fields a request leaves out (--sampling-defaults)


def default_engine() -> str:
    for path in (os.path.join(REPO, "build", "engine", "strata"), os.path.join(REPO, "build", "strata")):
        if os.path.exists(path):
            return path
    return os.path.join(REPO, "build", "engine", "strata")


def default_vision_helper(engine: str) -> str:
    """strata-vision where the build puts it next to the engine (build/vision/ beside build/engine/), else in the
    engine's own folder (an installed layout)."""
    exe = "strata-vision.exe" if os.name == "nt" else "strata-vision"
    here = os.path.dirname(os.path.abspath(engine))
    for path in (os.path.join(os.path.dirname(here), "vision", exe), os.path.join(here, exe)):
        if os.path.exists(path):
            return path
    return os.path.join(os.path.dirname(here), "vision", exe)


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
    ap.add_argument("--vision-model", default=None,
                    help="the vision tower's GGUF (vision/convert_vision.py): turns images on")
    ap.add_argument("--vision-helper", default=None,
                    help="the strata-vision binary (default: vision/strata-vision beside the engine's build folder)")
    ap.add_argument("--vision-arg", action="append", default=[], help="an extra argument for strata-vision")
    ap.add_argument("--vision-tmp", default=None,
                    help="folder for the pictures and embeddings files of requests (default: the system's temp)")
    ap.add_argument("--vision-timeout", type=float, default=600.0,
                    help="seconds one picture may take in strata-vision before it is restarted")
    ap.add_argument("--image-max-mb", type=float, default=20.0, help="largest picture accepted or fetched (MB)")
    ap.add_argument("--image-fetch-timeout", type=float, default=20.0, help="seconds to fetch an http(s) picture")
    ap.add_argument("--image-max-pixels", type=int, default=None,
                    help="resize pictures to at most this many pixels (default: the vision model's max_pixels, "
                         "at most 1,003,520)")
    ap.add_argument("--sampling-defaults", default=None, metavar="JSON",
                    help='sampling for requests that leave a field out, e.g. \'{"temperature": 0.7, "top_p": 0.9}\' '
                         "(fields: temperature, top_p, top_k, min_p, repeat_penalty, frequency_penalty, "
                         "presence_penalty, seed; default: greedy)")
    a = ap.parse_args(argv)
    from gateway.api.sampling import parse_defaults
    try:
        sampling_defaults = parse_defaults(a.sampling_defaults) if a.sampling_defaults else {}
    except ValueError as e:
        ap.error(str(e))
    if a.port < 0 or a.port > 65535:
        ap.error(f"--port {a.port} is not a port number")
    if a.image_max_pixels is not None and a.image_max_pixels < 1024:
        ap.error(f"--image-max-pixels {a.image_max_pixels} is too small (at least 1024)")
    if a.ctx is not None and a.ctx < 16:
        ap.error(f"--ctx {a.ctx} is too small")
    engine = a.engine or default_engine()
    return Settings(model=a.model, engine=engine, engine_args=tuple(a.engine_arg),
                    host=a.host, port=a.port, api_key=a.api_key or os.environ.get("STRATA_API_KEY") or None,
                    ctx=a.ctx, model_name=a.model_name or "", silence_timeout_s=a.engine_timeout,
                    ready_timeout_s=a.ready_timeout, keepalive_s=a.keepalive,
                    max_body_bytes=int(a.max_body_mb * 1024 * 1024), log_level=a.log_level,
                    vision_model=a.vision_model, vision_helper=a.vision_helper or default_vision_helper(engine),
                    vision_args=tuple(a.vision_arg), vision_tmp=a.vision_tmp, vision_timeout_s=a.vision_timeout,
                    image_max_bytes=int(a.image_max_mb * 1024 * 1024), image_fetch_timeout_s=a.image_fetch_timeout,
                    image_max_pixels=a.image_max_pixels, sampling_defaults=sampling_defaults)


def engine_argv(s: Settings) -> list[str]:
    argv = [s.engine, "--serve", "--model", s.model]
    if s.ctx:
        argv += ["--ctx", str(s.ctx)]
    if s.vision_model:
        argv.append("--vision")
    return argv + list(s.engine_args)
