"""The supervised `strata-vision` process (protocol.md §9): spawn, wait for READY <n_embd>, one ENC at a time,
stderr into the log (its last lines explain a death). A helper that dies is started again at once (and by the next
request if that start failed); the request it was serving gets a 503. `--info` gives the resize rule."""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
import subprocess

from gateway.errors import VisionUnavailable
from gateway.vision.images import ImageError, ResizeRule

log = logging.getLogger("gateway.vision")


def helper_info(argv0: str, model: str, timeout_s: float = 120.0) -> dict[str, str]:
    """`strata-vision --model M --info` as a dict (n_embd, factor, min_pixels, max_pixels, …)."""
    if not os.path.exists(argv0):
        raise SystemExit(f"the vision helper {argv0} is missing: build it (cmake --build build) or name it with "
                         f"--vision-helper")
    if not os.path.exists(model):
        raise SystemExit(f"vision model file not found: {model}")
    r = subprocess.run([argv0, "--model", model, "--info"], capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise SystemExit(f"{argv0} --model {model} --info failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return dict(line.split("=", 1) for line in r.stdout.split() if "=" in line)


def rule_of(info: dict[str, str], max_pixels_cap: int | None) -> ResizeRule:
    factor = int(info["factor"])
    mn, mx = int(info["min_pixels"]), int(info["max_pixels"])
    if max_pixels_cap is not None:
        mx = min(mx, max_pixels_cap)
    elif mx > 28 * 28 * 1280:
        mx = 28 * 28 * 1280   # vision/README.md: keep max_pixels modest (cost grows with patches squared)
    return ResizeRule(factor, min(mn, mx), mx)


def _quote(path: str) -> str:
    return f'"{path}"' if " " in path else path


class VisionHelper:
    def __init__(self, argv: list[str], ready_timeout_s: float = 300.0, request_timeout_s: float = 600.0):
        self.argv = argv
        self.ready_timeout_s = ready_timeout_s
        self.request_timeout_s = request_timeout_s
        self.proc: asyncio.subprocess.Process | None = None
        self.n_embd = 0
        self.state = "stopped"         # stopped | starting | ready | encoding
        self.restarts = 0
        self.started_once = False
        self.last_failure: str | None = None
        self._lock = asyncio.Lock()
        self._tail: collections.deque[str] = collections.deque(maxlen=20)
        self._closing = False
        self._watch_task: asyncio.Task | None = None
        self._restart_task: asyncio.Task | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.alive else None

    def _failure(self, what: str) -> VisionUnavailable:
        code = self.proc.returncode if self.proc else None
        tail = " | ".join(list(self._tail)[-6:])
        msg = what + (f" (exit code {code})" if code is not None else "") + (f"; its log ends: {tail}" if tail else "")
        self.last_failure = msg
        return VisionUnavailable(msg)

    # ---- lifetime -----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        async with self._lock:
            await self._ensure()

    async def _ensure(self) -> None:
        if self.alive and self.state != "starting":
            return
        if self.started_once:
            self.restarts += 1
        self.started_once = True
        self.state = "starting"
        log.info("starting vision helper: %s", " ".join(self.argv))
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as e:
            self.state = "stopped"
            raise self._failure(f"cannot start the vision helper {self.argv[0]}: {e}") from e
        proc = self.proc
        asyncio.create_task(self._pump_stderr(proc))
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), self.ready_timeout_s)
        except asyncio.TimeoutError:
            self._kill()
            self.state = "stopped"
            raise self._failure(f"the vision helper did not say READY within {self.ready_timeout_s:g} s") from None
        words = line.decode(errors="replace").split()
        if len(words) != 2 or words[0] != "READY" or not words[1].isdigit() or int(words[1]) <= 0:
            self._kill()
            await asyncio.sleep(0.2)        # its last stderr lines
            self.state = "stopped"
            raise self._failure(f"the vision helper failed to start (it said {line.decode(errors='replace')!r})")
        self.n_embd = int(words[1])
        self.state = "ready"
        self._watch_task = asyncio.create_task(self._watch(proc))
        log.info("vision helper ready: n_embd %d, pid %d", self.n_embd, proc.pid)

    async def _pump_stderr(self, proc) -> None:
        while True:
            line = await proc.stderr.readline()
            if not line:
                return
            text = line.decode("utf-8", errors="replace").rstrip()
            self._tail.append(text)
            log.info("vision: %s", text)

    async def _watch(self, proc) -> None:
        """A helper that exits on its own is started again at once."""
        await proc.wait()
        if self._closing or proc is not self.proc:
            return
        self.state = "stopped"
        self._failure("the vision helper exited")
        log.error("%s; starting it again", self.last_failure)
        self._restart_task = asyncio.create_task(self._restart())

    async def _restart(self) -> None:
        try:
            await self.start()
        except VisionUnavailable as e:
            log.error("%s (the next request with a picture tries again)", e)

    def _kill(self) -> None:
        if self.alive:
            try:
                if hasattr(os, "killpg"):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:                       # Windows
                    self.proc.kill()
            except (ProcessLookupError, PermissionError):
                self.proc.kill()

    async def close(self) -> None:
        self._closing = True
        if self._restart_task:
            self._restart_task.cancel()
        if not self.alive:
            return
        try:
            self.proc.stdin.write(b"QUIT\n")
            await asyncio.wait_for(self.proc.wait(), 5)
        except (asyncio.TimeoutError, BrokenPipeError, ConnectionResetError):
            self._kill()
            await self.proc.wait()
        self.state = "stopped"

    # ---- requests -----------------------------------------------------------------------------------------------

    async def encode(self, ppm_path: str, out_path: str, where: str) -> tuple[int, int, int, float]:
        """ENC one picture: (n_tokens, nx, ny, ms). A dead or silent helper: VisionUnavailable (503), and it is
        started again; an ERR reply: ImageError (400). A caller that goes away (the client closed the connection)
        does not cut the exchange short: its reply is still read, so the next ENC gets its own."""
        task = asyncio.ensure_future(self._exchange(ppm_path, out_path, where))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return await asyncio.shield(task)

    async def _exchange(self, ppm_path: str, out_path: str, where: str) -> tuple[int, int, int, float]:
        async with self._lock:
            await self._ensure()
            proc = self.proc
            self.state = "encoding"
            try:
                proc.stdin.write(f"ENC {_quote(ppm_path)} {_quote(out_path)}\n".encode())
                await proc.stdin.drain()
                line = await asyncio.wait_for(proc.stdout.readline(), self.request_timeout_s)
            except asyncio.TimeoutError:
                self._kill()
                err = self._failure(f"the vision helper took more than {self.request_timeout_s:g} s on one picture; "
                                    f"it was stopped and is being started again")
                raise err from None
            except (BrokenPipeError, ConnectionResetError):
                line = b""
            finally:
                if self.alive:
                    self.state = "ready"
            if not line:
                try:
                    await asyncio.wait_for(proc.wait(), 5)
                except asyncio.TimeoutError:
                    self._kill()
                await asyncio.sleep(0.05)
                raise self._failure("the vision helper exited while encoding a picture; it is being started again")
            text = line.decode("utf-8", errors="replace").rstrip("\r\n")
            words = text.split(" ")
            if words[0] == "OK" and len(words) == 5:
                return int(words[1]), int(words[2]), int(words[3]), float(words[4])
            if words[0] == "ERR":
                raise ImageError(f"{where}: the vision helper refused the picture: {text[4:]}", param=where)
            self._kill()
            raise self._failure(f"unexpected line from the vision helper: {text[:200]!r}; it was stopped")
