# Helpers shared by the installer tests: the Hub-like server fixture's data, running the real installer
# (`python -m installer`) as a separate process, and waiting for conditions.
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hub_server import make_server

PROJECT_DIR = Path(__file__).resolve().parents[2]
REPO = "test-org/Tiny-GGUF"
SHARD_NAMES = ("tiny-Q2_0-00001-of-00002.gguf", "tiny-Q2_0-00002-of-00002.gguf")
MMPROJ_NAME = "mmproj-tiny-BF16.gguf"


@dataclass
class Hub:
    url: str
    state: object
    repo_dir: Path
    catalog: Path

    def add_file(self, name: str, size: int, seed: int) -> bytes:
        data = random.Random(seed).randbytes(size)
        (self.repo_dir / name).write_bytes(data)
        return data


def start_hub(tmp_path: Path):
    """A Hub-like server over tmp_path/hub-root holding REPO, and a catalogue for it. Returns (hub, server)."""
    root = tmp_path / "hub-root"
    repo_dir = root / REPO
    repo_dir.mkdir(parents=True)
    server, state = make_server(root)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({
        "default_family": "original",
        "families": {"original": {
            "repo": REPO, "revision": None,
            "mmproj": {"path": MMPROJ_NAME, "size_bytes": None, "sha256": None},
            "sizes": {"Q2_0": {"file_pattern": "*Q2_0*.gguf", "shards": 2, "files": None, "ram_floor_gib": 1}}}}}))
    hub = Hub(url=f"http://127.0.0.1:{server.server_address[1]}", state=state, repo_dir=repo_dir, catalog=catalog)
    return hub, server


def models_dir(home: Path) -> Path:
    return home / "models" / REPO.split("/")[-1]


def piece_sizes(paths) -> list[tuple[Path, int]]:
    """(path, bytes) of files a running download is writing; one renamed (.part to its final name) or removed between
    the listing and its stat is skipped, not an error."""
    out = []
    for p in paths:
        try:
            out.append((p, p.stat().st_size))
        except FileNotFoundError:
            pass
    return out


def half_on_disk(paths, at_least: int) -> bool:
    """At least `at_least` bytes of pieces on disk, one of them a .part with bytes in it (a kill now lands mid-piece)."""
    sizes = piece_sizes(paths)
    return sum(n for _, n in sizes) >= at_least and any(p.suffix == ".part" and n for p, n in sizes)


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def installer_command(hub: Hub, home: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "installer", "--download-only", "--model", "Q2_0", "--vision", "no",
            "--dir", str(home), "--catalog", str(hub.catalog), *extra]


def installer_env(hub: Hub, **extra: str) -> dict:
    env = dict(os.environ, HF_ENDPOINT=hub.url, PYTHONUNBUFFERED="1")
    env.pop("HF_TOKEN", None)
    env.update(extra)
    return env


def run_installer(hub: Hub, home: Path, *extra: str, env: dict | None = None, timeout_s: float = 120):
    return subprocess.run(installer_command(hub, home, *extra), cwd=PROJECT_DIR, env=env or installer_env(hub),
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
