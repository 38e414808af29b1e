"""`python -m gateway --model FILE [--engine PATH] [--host 127.0.0.1] [--port 8080] [--api-key K] [--ctx N]`."""
from __future__ import annotations

import logging
import sys

from aiohttp import web

from gateway.app import build_app
from gateway.settings import parse_settings


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(argv)
    logging.basicConfig(level=settings.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    app = build_app(settings)
    print(f"Strata gateway on http://{settings.host}:{settings.port} (engine: {settings.engine})", file=sys.stderr,
          flush=True)
    web.run_app(app, host=settings.host, port=settings.port, print=None, handler_cancellation=True,
                shutdown_timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
