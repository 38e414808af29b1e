# `python -m installer --yes` end to end on this machine: no usable GPU (or, on a bigger PC, a Hub with nothing in
# it) makes it fall back to the demo model; it writes strata-demo.json and run-demo.sh, starts the real gateway on
# the real engine, and the run script and a later plain run start it again. SIGTERM stops the server with it.
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from e2e_helpers import PROJECT_DIR, free_port, port_is_closed, stop_process, wait_for_health, wait_until

sys.path.insert(0, str(PROJECT_DIR / "tests" / "installer"))
from hub_server import make_server  # noqa: E402


def ask(port: int, question: str) -> dict:
    body = json.dumps({"messages": [{"role": "user", "content": question}], "max_tokens": 200}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["choices"][0]


def start_and_check(command: list[str], log_path, port: int, env: dict, timeout_s: float = 240,
                    while_up=None) -> str:
    """Runs a command that should serve Strata on `port`; checks /health (and while_up), stops it, returns its
    output."""
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        try:
            health = wait_for_health(f"http://127.0.0.1:{port}", process, timeout_s)
            assert health["status"] == "ok"
            wait_until(lambda: "Strata is ready" in log_path.read_text(), 30, "the launcher's ready message")
            if while_up:
                while_up(port)
        finally:
            process.send_signal(signal.SIGTERM)
            exit_code = stop_process(process)
    output = log_path.read_text()
    assert exit_code in (0, 143), f"exit code {exit_code}:\n{output}"
    assert port_is_closed(port), "the gateway kept running after the installer was stopped"
    return output


def test_yes_falls_back_to_the_demo_and_writes_a_config_and_run_script_that_start(engine_bin, tmp_path):
    empty_hub_root = tmp_path / "hub"
    empty_hub_root.mkdir()
    hub, _ = make_server(empty_hub_root)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{hub.server_address[1]}", PYTHONUNBUFFERED="1")
    home = tmp_path / "home"
    try:
        answers = []
        port = free_port()
        output = start_and_check([sys.executable, "-m", "installer", "--yes", "--dir", str(home), "--engine",
                                  engine_bin, "--no-browser", "--port", str(port)], tmp_path / "setup.log", port, env,
                                 while_up=lambda p: answers.append(ask(p, "What is 12 + 30?")))
        assert "Serving the DEMO model" in output and "the small demo model that ships with Strata" in output, output
        # The shipped demo model thinks, then answers (on this GPU-less machine without its MTP head: on a CPU it
        # decodes faster without it).
        assert answers[0]["finish_reason"] == "stop"
        assert answers[0]["message"]["reasoning_content"] and answers[0]["message"]["content"], answers

        config = json.loads((home / "strata-demo.json").read_text())
        assert config["demo"] is True and config["port"] == port and config["engine"] == os.path.abspath(engine_bin)
        assert config["model"] == str(PROJECT_DIR / "installer" / "demo" / "strata-demo.gguf")
        assert config["engine_args"] == []
        run_script = home / "run-demo.sh"
        assert os.access(run_script, os.X_OK)

        # The first start's console output is also in the install's log file; the run script's start writes a new
        # one and keeps the first as .1.
        log = home / "logs" / "strata-demo.log"
        first = log.read_text()
        assert "Strata is ready" in first and "engine ready" in first and f"  Log:              {log}" in output

        port = free_port()
        start_and_check([str(run_script), "--no-browser", "--port", str(port)], tmp_path / "run.log", port, env)
        assert (home / "logs" / "strata-demo.log.1").read_text() == first
        assert f"127.0.0.1:{port}" in log.read_text() and "engine ready" in log.read_text()

        port = free_port()
        output = start_and_check([sys.executable, "-m", "installer", "--dir", str(home), "--no-browser", "--port",
                                  str(port)], tmp_path / "later.log", port, env)
        assert "Strata is set up (strata-demo.json); starting it." in output
        assert "Checking this PC" not in output
    finally:
        hub.shutdown()
        hub.server_close()


def test_failed_download_falls_back_to_the_demo_and_says_how_to_continue(engine_bin, tmp_path):
    empty_hub_root = tmp_path / "hub"
    empty_hub_root.mkdir()
    hub, _ = make_server(empty_hub_root)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{hub.server_address[1]}", PYTHONUNBUFFERED="1")
    home, my_ggufs = tmp_path / "home", tmp_path / "my-ggufs"
    my_ggufs.mkdir()
    try:
        result = subprocess.run([sys.executable, "-m", "installer", "--yes", "--gguf-dir", str(my_ggufs), "--dir",
                                 str(home), "--engine", engine_bin, "--no-start"], cwd=PROJECT_DIR, env=env,
                                capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    finally:
        hub.shutdown()
        hub.server_close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "The download stopped:" in result.stdout and "HTTP 404" in result.stdout
    assert "Serving the DEMO model, because the model could not be downloaded" in result.stdout
    assert "--setup" in result.stdout
    assert json.loads((home / "strata-demo.json").read_text())["demo"] is True


def test_a_burst_of_sigterms_still_stops_the_server(engine_bin, tmp_path):
    """A second SIGTERM while the launcher stops the server must not end the launcher first (it used to leave the
    gateway running on its port, found in CI)."""
    home = tmp_path / "home"
    env = dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9", PYTHONUNBUFFERED="1")
    setup = subprocess.run([sys.executable, "-m", "installer", "--yes", "--dir", str(home), "--engine", engine_bin,
                            "--no-start"], cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=240)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    for delay in (0.0, 0.002, 0.01, 0.03):
        port = free_port()
        with open(tmp_path / "burst.log", "w") as log:
            launcher = subprocess.Popen([sys.executable, "-m", "installer.launcher", str(home / "strata-demo.json"),
                                         "--no-browser", "--port", str(port)], cwd=PROJECT_DIR, env=env, stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            wait_for_health(f"http://127.0.0.1:{port}", launcher, 120)
            wait_until(lambda: "Strata is ready" in (tmp_path / "burst.log").read_text(), 30, "the ready message")
            for _ in range(6):
                launcher.send_signal(signal.SIGTERM)
                time.sleep(delay)
            assert stop_process(launcher) in (0, 143)
        assert port_is_closed(port), f"the gateway outlived the launcher (SIGTERMs {delay} s apart)"
