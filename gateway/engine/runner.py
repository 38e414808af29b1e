"""One request at a time through the engine, in arrival order: a request takes its place in the queue when it
arrives, runs when it is first, and yields the engine's events. If the caller stops early (closed connection), the
runner sends STOP and reads on to that request's DONE before the next request starts. A dead or silent engine fails
the request in flight (EngineFailed) and is restarted by the next one."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import AsyncIterator

from gateway.engine.process import EngineFailed, EngineProcess
from gateway.engine.protocol import Done, Err, Event, Progress, Reused, Token

log = logging.getLogger("gateway.runner")


class EngineRunner:
    def __init__(self, argv: list[str], silence_timeout_s: float = 300.0, ready_timeout_s: float = 600.0):
        self.argv = argv
        self.silence_timeout_s = silence_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.engine: EngineProcess | None = None
        self.last_failure: str | None = None
        self.restarts = 0
        self.queued = 0
        self.phase = "stopped"          # stopped | starting | idle | reading prompt | answering | cancelling
        self.progress: dict = {}         # of the request in flight, for /status
        self._lock = asyncio.Lock()

    # ---- engine lifetime ------------------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._lock:
            await self._ensure_engine()

    async def _ensure_engine(self) -> EngineProcess:
        if self.engine is not None and self.engine.alive:
            return self.engine
        if self.engine is not None:
            self.restarts += 1
        self.phase = "starting"
        engine = EngineProcess(self.argv, self.ready_timeout_s)
        try:
            await engine.start()
        except EngineFailed as e:
            self.phase = "stopped"
            self.last_failure = str(e)
            log.error("%s", e)
            raise
        self.engine = engine
        self.phase = "idle"
        return engine

    async def close(self) -> None:
        async with self._lock:
            if self.engine is not None:
                await self.engine.stop()
            self.phase = "stopped"

    @property
    def max_context(self) -> int:
        return self.engine.max_context if self.engine else 0

    # ---- requests ---------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def turn(self):
        """A place in the queue, taken now; `turn.generate(line)` runs the request when it is first."""
        acquire = asyncio.ensure_future(self._lock.acquire())
        turn = _Turn(self, acquire)
        self.queued += 1
        try:
            yield turn
        finally:
            if not turn.started:
                self.queued -= 1
                if acquire.done() and not acquire.cancelled():
                    self._lock.release()
                else:
                    acquire.cancel()


class _Turn:
    def __init__(self, runner: EngineRunner, acquire: asyncio.Future):
        self.runner = runner
        self.acquire = acquire
        self.started = False
        self._engine: EngineProcess | None = None
        self._stopped = False

    def stop(self) -> None:
        """Ends the running request early (a stop sequence, the loop guard): the engine gets STOP and generate()
        goes on to its DONE, so the request's timings and counts still arrive."""
        if self._engine is not None and self._engine.alive and not self._stopped:
            self._stopped = True
            self._engine.send("STOP")

    async def generate(self, line: str) -> AsyncIterator[Event]:
        """Yields the request's events up to and including DONE or ERR. Use with contextlib.aclosing."""
        r = self.runner
        self.started = True
        try:
            await self.acquire
        finally:
            r.queued -= 1
        finished = False
        engine = None
        try:
            engine = await r._ensure_engine()
            self._engine = engine
            r.phase = "reading prompt"
            r.progress = {"started": time.time(), "prompt_done": 0, "prompt_total": 0, "generated": 0}
            engine.send(line)
            while True:
                try:
                    event = await engine.read_event(r.silence_timeout_s)
                except EngineFailed as e:
                    r.last_failure = str(e)
                    log.error("%s", e)
                    finished = True
                    raise
                _track(r, event)
                if isinstance(event, (Done, Err)):
                    finished = True
                yield event
                if finished:
                    return
        finally:
            if not finished and engine is not None and engine.alive:
                # The caller left mid-request: cancel it and drain to its DONE while still holding the queue.
                r.phase = "cancelling"
                asyncio.get_running_loop().create_task(_drain_and_release(r, engine))
            else:
                r.phase = "idle" if r.engine is not None and r.engine.alive else "stopped"
                r._lock.release()


def _track(r: EngineRunner, event: Event) -> None:
    p = r.progress
    if isinstance(event, Progress):
        p.update(prompt_done=event.reached, prompt_total=event.total, prompt_tokens_per_s=event.tokens_per_s)
    elif isinstance(event, Reused):
        r.phase = "answering"
        p["decode_started"] = time.time()
    elif isinstance(event, Token):
        p["generated"] = p.get("generated", 0) + 1


async def _drain_and_release(r: EngineRunner, engine: EngineProcess) -> None:
    try:
        engine.send("STOP")
        while True:
            event = await engine.read_event(r.silence_timeout_s, "cancelling a request")
            if isinstance(event, (Done, Err)):
                break
    except EngineFailed as e:
        r.last_failure = str(e)
        log.error("%s", e)
    finally:
        r.phase = "idle" if engine.alive else "stopped"
        r._lock.release()
