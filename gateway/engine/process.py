"""The supervised `strata --serve` process: spawn, read INFO lines until READY, one engine line → one event,
stderr into the log (the last lines are kept to explain a death), kill."""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal

from gateway.engine.protocol import Event, Info, ProtocolError, Ready, parse_line

log = logging.getLogger("gateway.engine")


class EngineFailed(Exception):
    """The engine died, hung or could not start; the message says why (with the end of its log)."""


class EngineProcess:
    def __init__(self, argv: list[str], ready_timeout_s: float):
        self.argv = argv
        self.ready_timeout_s = ready_timeout_s
        self.proc: asyncio.subprocess.Process | None = None
        self.info: dict[str, str] = {}
        self.max_context = 0
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self._stderr_task: asyncio.Task | None = None
        self._killed = False  # set at once by kill(); returncode only changes once the child is reaped

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and not self._killed

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stderr_tail(self, n: int = 8) -> str:
        return " | ".join(list(self._stderr_tail)[-n:])

    def failure(self, what: str) -> EngineFailed:
        code = self.proc.returncode if self.proc else None
        detail = f" (exit code {code})" if code is not None else ""
        tail = self.stderr_tail()
        return EngineFailed(f"{what}{detail}" + (f"; its log ends: {tail}" if tail else ""))

    async def start(self) -> None:
        log.info("starting engine: %s", " ".join(self.argv))
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=16 * 1024 * 1024, start_new_session=True)
        except OSError as e:
            raise EngineFailed(f"cannot start the engine {self.argv[0]}: {e}") from e
        self._stderr_task = asyncio.create_task(self._pump_stderr())
        self.info = {}
        try:
            while True:
                event = await self.read_event(self.ready_timeout_s, "starting")
                if isinstance(event, Info):
                    self.info[event.key] = event.value
                elif isinstance(event, Ready):
                    if event.max_context <= 0:
                        await asyncio.sleep(0.2)  # let its last stderr lines arrive
                        raise self.failure("the engine failed to start")
                    self.max_context = event.max_context
                    log.info("engine ready: context %d, pid %s", self.max_context, self.pid)
                    return
                else:
                    raise self.failure(f"the engine sent {event!r} before READY")
        except BaseException:
            self.kill()
            raise

    async def _pump_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                return
            text = line.decode("utf-8", errors="replace").rstrip()
            self._stderr_tail.append(text)
            log.info("engine: %s", text)

    def send(self, line: str) -> None:
        if not self.alive or self.proc.stdin is None:
            raise self.failure("the engine is not running")
        try:
            self.proc.stdin.write(line.encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError) as e:
            raise self.failure(f"the engine's input is closed ({e})") from e

    async def read_event(self, timeout_s: float, doing: str = "serving a request") -> Event:
        assert self.proc and self.proc.stdout
        try:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except asyncio.TimeoutError:
            self.kill()
            raise EngineFailed(f"the engine said nothing for {timeout_s:g} s while {doing}; it was stopped and "
                               f"will be restarted") from None
        if not raw:
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except asyncio.TimeoutError:
                self.kill()
            self._killed = True
            await asyncio.sleep(0.05)
            raise self.failure(f"the engine exited while {doing}")
        try:
            return parse_line(raw.decode("utf-8", errors="replace"))
        except ProtocolError as e:
            self.kill()
            raise EngineFailed(f"{e}; the engine was stopped and will be restarted") from e

    def kill(self) -> None:
        if self.alive:
            self._killed = True
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()

    async def stop(self) -> None:
        """QUIT, then a kill if it does not exit within 5 s."""
        if not self.alive:
            return
        try:
            self.send("QUIT")
            await asyncio.wait_for(self.proc.wait(), 5)
        except (EngineFailed, asyncio.TimeoutError):
            self.kill()
            await self.proc.wait()
        if self._stderr_task:
            self._stderr_task.cancel()
