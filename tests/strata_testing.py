"""Helpers shared by the test suites (imported by name; conftest modules are not importable reliably because every
test folder has its own): the repository root, the engine binary, `strata generate`, the cached tiny models."""
import os
import pathlib
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = pathlib.Path(REPO) / "engine" / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))


def build_dir() -> str:
    return os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))


def engine_path() -> str:
    return os.path.join(build_dir(), "engine", "strata")


_tiny = {}


def tiny(name: str) -> dict:
    """The manifest of a tiny model (engine/tools/make_tiny.py), built once and cached on disk."""
    import make_tiny
    if name not in _tiny:
        _tiny[name] = make_tiny.build(name)
    return _tiny[name]


def run_generate(engine: str, model: str, prompt: list[int], n: int, *extra: str, logits_out: str | None = None):
    """Runs `strata generate --ignore-eos`; returns the generated ids."""
    cmd = [engine, "generate", "--model", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n),
           "--ignore-eos", *extra]
    if logits_out:
        cmd += ["--logits-out", logits_out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"strata generate failed ({r.returncode}): {r.stderr}"
    return [int(x) for x in r.stdout.strip().split(",") if x]
