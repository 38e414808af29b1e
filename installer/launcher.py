# Starts Strata from a strata-<name>.json: runs the gateway (which starts the engine), waits until /health
# answers, opens the browser when there is a display, and stays until Ctrl+C.
# Usage: python -m installer.launcher strata-<name>.json [--port N] [--no-browser]
import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import webbrowser
from pathlib import Path

from installer.config_writer import StrataConfig, load_config

HEALTH_POLL_S = 0.5
# The model id the APIs and the chat page report for the demo model (its GGUF's general.name is the training
# checkpoint's folder, "ckpt").
DEMO_MODEL_NAME = "strata-demo"


class LaunchError(Exception):
    pass


def has_display() -> bool:
    if platform.system() in ("Windows", "Darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def gateway_takes_option(python: str, option: str, project_dir: str | None) -> bool:
    """Whether `python -m gateway --help` lists an option (the image-encoder flag is newer than the gateway)."""
    try:
        result = subprocess.run([python, "-m", "gateway", "--help"], capture_output=True, text=True, timeout=60,
                                cwd=project_dir or None)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option in result.stdout


def gateway_command(config: StrataConfig, port: int, say=print) -> list[str]:
    python = config.python or sys.executable
    command = [python, "-m", "gateway", "--model", config.model, "--engine", config.engine,
               "--host", config.host, "--port", str(port), "--ctx", str(config.context)]
    if config.api_key:
        command += ["--api-key", config.api_key]
    if config.demo:
        command += ["--model-name", DEMO_MODEL_NAME]
    command += [f"--engine-arg={arg}" for arg in config.engine_args]
    if config.sampling_defaults:   # what requests get when they leave a sampling field out
        command += ["--sampling-defaults", json.dumps(config.sampling_defaults, sort_keys=True)]
    if config.vision_model:
        command += ["--vision-model", config.vision_model]
    elif config.mmproj:
        if gateway_takes_option(python, "--mmproj", config.project_dir):
            command += ["--mmproj", config.mmproj]
        else:
            say("Note: this version of the server cannot take the image encoder yet; images stay off.")
    return command


def check_files(config: StrataConfig) -> None:
    for what, path in (("engine", config.engine), ("model", config.model), ("image encoder", config.mmproj),
                       ("vision model", config.vision_model)):
        if path and not Path(path).is_file():
            raise LaunchError(f"the {what} file {path} named in the config is missing; run the installer again "
                              f"(./setup.sh or START-HERE.bat) to fetch or rebuild it.")


def wait_for_health(process: subprocess.Popen, url: str) -> dict:
    """Poll /health until the engine is loaded (status "ok"); a model of tens of GB can take minutes."""
    while True:
        if process.poll() is not None:
            raise LaunchError(f"the server stopped while starting (exit code {process.returncode}); "
                              f"its messages above say why.")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                health = json.loads(response.read() or b"{}")
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            health = {}
        if health.get("status") == "ok":
            return health
        failure = (health.get("engine") or {}).get("last_failure")
        if failure:
            raise LaunchError(f"the engine could not start: {failure}")
        time.sleep(HEALTH_POLL_S)


def log_file(log_dir: Path, name: str) -> Path:
    """logs/strata-<name>.log under log_dir, the previous run's kept as .log.1 (one run each, so it stays small)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"strata-{name}.log"
    if path.exists():
        path.replace(path.with_name(path.name + ".1"))
    return path


def _copy_output(stream, log) -> None:
    """The server's output to this console and to the log file, line by line (so a crash leaves its last words)."""
    for line in iter(stream.readline, b""):
        for out in (getattr(sys.stdout, "buffer", None), log):
            try:
                if out is not None:
                    out.write(line)
                    out.flush()
            except (OSError, ValueError):
                pass


def start(config: StrataConfig, port: int | None = None, open_browser: bool = True, say=print,
          log_dir: Path | None = None) -> int:
    """Run the gateway in the foreground; returns its exit code. With log_dir, its output (and these messages) also
    go to log_dir/strata-<name>.log."""
    port = port or config.port
    check_files(config)
    if not port_is_free(config.host, port):
        raise LaunchError(f"port {port} on {config.host} is already in use (is Strata already running?). "
                          f"Stop the other program or start with --port <another port>.")
    log_path = log_file(log_dir, config.name) if log_dir else None
    log = open(log_path, "ab") if log_path else None
    if log:
        console = say

        def say(message: str = "") -> None:   # noqa: F811  (the same messages, also in the log)
            console(message)
            log.write((message + "\n").encode("utf-8", "replace"))
            log.flush()
    command = gateway_command(config, port, say)
    say(f"Starting Strata ({config.name}) on http://{config.host}:{port} ...")
    if config.demo:
        say(f"NOTE: this is the DEMO model: {config.demo_note}")
    process = subprocess.Popen(command, cwd=config.project_dir or None, stdout=subprocess.PIPE if log else None,
                               stderr=subprocess.STDOUT if log else None)
    if log:
        threading.Thread(target=_copy_output, args=(process.stdout, log), daemon=True).start()
    signal.signal(signal.SIGTERM, _on_sigterm)   # stop the server with us
    try:
        base = f"http://{config.host}:{port}"
        health = wait_for_health(process, f"{base}/health")
        say(f"\nStrata is ready ({health.get('model', config.name)}, context {health.get('context', config.context)}).")
        say(f"  Chat page:        {base}/")
        say(f"  OpenAI API:       {base}/v1   Anthropic API: {base}")
        if log_path:
            say(f"  Log:              {log_path}")
        say("  Stop with Ctrl+C.")
        if open_browser and has_display():
            webbrowser.open(f"{base}/")
        return process.wait()
    except KeyboardInterrupt:
        say("\nStopping Strata ...")
        return _stop(process)
    except BaseException:
        _stop(process)
        raise


def _on_sigterm(*_) -> None:
    # Further SIGTERMs are ignored from here on: one arriving before _stop has told the server to stop would end the
    # launcher and leave the server running on its port (seen in CI: a SIGTERM, then the test's terminate()).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(143)


def _stop(process: subprocess.Popen) -> int:
    # A second SIGTERM or Ctrl+C (a service manager, an impatient user) must not cut this wait short: the launcher
    # would exit while the server still holds its port.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m installer.launcher", description="Start Strata from its config.")
    parser.add_argument("config", type=Path, help="strata-<name>.json written by the installer")
    parser.add_argument("--port", type=int, help="serve on this port instead of the config's")
    parser.add_argument("--no-browser", action="store_true", help="do not open the chat page in a browser")
    args = parser.parse_args(argv)
    try:
        return start(load_config(args.config), args.port, open_browser=not args.no_browser,
                     log_dir=args.config.resolve().parent / "logs")
    except (LaunchError, ValueError) as e:
        print(f"\nCannot start Strata: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
