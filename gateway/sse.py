"""Server-sent events over an aiohttp StreamResponse: headers, framing, keep-alive comments while nothing else is
sent (so agents do not time out while a long prompt is read), and a closed connection surfaced as ConnectionError."""
from __future__ import annotations

import asyncio
import json

from aiohttp import web


class SSEWriter:
    def __init__(self, request: web.Request, keepalive_s: float = 10.0):
        self.request = request
        self.keepalive_s = keepalive_s
        self.response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "Connection": "keep-alive",
            "X-Accel-Buffering": "no"})
        self._lock = asyncio.Lock()
        self._ping: asyncio.Task | None = None
        self._last_write = 0.0
        self.closed = False

    async def open(self) -> None:
        await self.response.prepare(self.request)
        self._last_write = asyncio.get_running_loop().time()
        self._ping = asyncio.create_task(self._keepalive())

    async def _write(self, data: bytes) -> None:
        async with self._lock:
            if self.request.transport is None or self.request.transport.is_closing():
                self.closed = True
                raise ConnectionResetError("the client closed the connection")
            await self.response.write(data)
            self._last_write = asyncio.get_running_loop().time()

    async def send(self, data, event: str | None = None) -> None:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        frame = (f"event: {event}\n" if event else "") + "".join(f"data: {line}\n" for line in text.split("\n"))
        await self._write((frame + "\n").encode())

    async def comment(self, text: str = "keep-alive") -> None:
        await self._write(f": {text}\n\n".encode())

    async def _keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                await asyncio.sleep(self.keepalive_s / 4)
                if loop.time() - self._last_write >= self.keepalive_s:
                    await self.comment()
        except (ConnectionError, asyncio.CancelledError):
            return

    async def close(self) -> None:
        if self._ping:
            self._ping.cancel()
        if not self.closed:
            try:
                await self.response.write_eof()
            except ConnectionError:
                pass
            self.closed = True
