# Helpers for the end-to-end tests: the real gateway started as `python -m gateway` on a free port (on the engine
# binary and a tiny model that tests/conftest.py provides, or the shipped demo model), waiting for health, stopping
# processes, the chat page opened in headless Chromium.
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
# The trained demo model (installer/demo) and its MTP head, as the installer runs it.
DEMO_MODEL = PROJECT_DIR / "installer" / "demo" / "strata-demo.gguf"
DEMO_MTP = PROJECT_DIR / "installer" / "demo" / "strata-demo-mtp.gguf"
DEMO_CONTEXT = 4096


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


def open_page(url: str):
    """A context manager yielding the page at `url` in headless Chromium; fails on any JavaScript error."""
    from playwright.sync_api import sync_playwright
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run tests/e2e/install_browser.sh"

    class Opened:
        def __enter__(self):
            self.playwright = sync_playwright().start()
            self.browser = self.playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                           args=CHROMIUM_FLAGS)
            context = self.browser.new_context(viewport={"width": 1200, "height": 800})
            context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
            self.page = context.new_page()
            self.errors = []
            self.page.on("pageerror", lambda e: self.errors.append(str(e)))
            self.page.goto(url)
            return self.page

        def __exit__(self, *exc):
            self.browser.close()
            self.playwright.stop()
            assert self.errors == [], f"JavaScript errors on the page: {self.errors}"
    return Opened()
