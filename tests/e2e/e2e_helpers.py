# Helpers for the end-to-end tests: the real gateway started as `python -m gateway` on a free port (on the engine
# binary and tiny model that tests/conftest.py provides), waiting for health, stopping processes.
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
ARTIFACTS_DIR = PROJECT_DIR / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
# The tiny config with 256-wide rows decodes ~300 tokens/s on this machine's CPU, so its answers take seconds:
# long enough to see thinking stream, then the answer, and to press stop in the middle.
TEST_MODEL_CONFIG = "wide256"
TEST_CONTEXT = 32768


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout_s: float = 5) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


def wait_for_health(url: str, process: subprocess.Popen | None, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode} before it was ready")
        try:
            health = get_json(f"{url}/health")
            if health.get("status") == "ok":
                return health
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url}/health was not ok within {timeout_s} s")


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def stop_process(process: subprocess.Popen, timeout_s: float = 20) -> int:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def port_is_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


class Gateway:
    """`python -m gateway` on the real engine; logs to log_path."""

    def __init__(self, model: Path, engine: Path, log_path: Path, *extra: str, context: int = TEST_CONTEXT):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--model", str(model), "--engine", str(engine), "--port",
             str(self.port), "--ctx", str(context), *extra], cwd=PROJECT_DIR, stdout=self.log,
            stderr=subprocess.STDOUT)
        self.health = wait_for_health(self.url, self.process, timeout_s=120)

    def wait_idle(self, timeout_s: float = 30) -> dict:
        return wait_until(lambda: (s := get_json(f"{self.url}/status"))["state"] == "idle" and s, timeout_s,
                          "the gateway to be idle")

    def close(self) -> None:
        stop_process(self.process)
        self.log.close()
