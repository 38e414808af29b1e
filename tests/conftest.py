"""Shared fixtures: the real engine binary (CPU build) and the tiny models of engine/tools/make_tiny.py."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "engine", "tools"))


def engine_path() -> str:
    build = os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))
    return os.path.join(build, "engine", "strata")


@pytest.fixture(scope="session")
def engine_bin() -> str:
    path = engine_path()
    if not os.path.exists(path):
        pytest.fail(f"engine binary {path} is missing: build it first (cmake -S . -B build && cmake --build build)")
    return path


@pytest.fixture(scope="session")
def tiny_models():
    """tiny_models(name) -> manifest dict (hf_dir, gguf{outtype: path}, mtp_gguf) built once and cached."""
    import make_tiny
    cache = {}

    def get(name: str) -> dict:
        if name not in cache:
            cache[name] = make_tiny.build(name)
        return cache[name]
    return get


def run_generate(engine: str, model: str, prompt: list[int], n: int, *extra: str, logits_out: str | None = None):
    """Runs `strata generate`; returns the generated ids."""
    cmd = [engine, "generate", "--model", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n),
           "--ignore-eos", *extra]
    if logits_out:
        cmd += ["--logits-out", logits_out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"strata generate failed ({r.returncode}): {r.stderr}"
    return [int(x) for x in r.stdout.strip().split(",") if x]
