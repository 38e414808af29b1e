"""A real `python -m gateway` process on a free port, for the gateway tests (importable by name, unlike conftest)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import requests

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """A `python -m gateway` process on a free port."""

    def __init__(self, model: str, engine: str, *extra: str, ctx: int = 2048):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(REPO, "build", f"gateway-test-{self.port}.log")
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--model", model, "--engine", engine, "--port", str(self.port),
             "--ctx", str(ctx), "--keepalive", "1", *extra],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited ({self.proc.returncode}); log: {self.read_log()[-3000:]}")
            try:
                if requests.get(self.url + "/health", timeout=2).json().get("status") == "ok":
                    return
            except (requests.ConnectionError, requests.Timeout, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"gateway not ready after {timeout} s; log: {self.read_log()[-3000:]}")

    def read_log(self) -> str:
        with open(self.log_path) as f:
            return f.read()

    def engine_pid(self) -> int:
        return requests.get(self.url + "/health", timeout=5).json()["engine"]["pid"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


