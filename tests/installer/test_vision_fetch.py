# The vision model from the original checkpoint: a tiny random vision tower (built as tests/gateway/vision_fixture.py
# builds its own) inside a sharded checkpoint with other tensors around it, served by the Hub-like server; only the
# model.visual.* byte ranges are fetched (resumable after kill -9), the GGUF equals what vision/convert_vision.py
# makes from the whole checkpoint folder, and the installer passes --vision-model only when images are on.
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from installer_helpers import PROJECT_DIR, half_on_disk, installer_env, wait_for

sys.path.insert(0, str(PROJECT_DIR / "tests" / "gateway"))
sys.path.insert(0, str(PROJECT_DIR / "tests"))
from strata_testing import engine_path  # noqa: E402  (also puts engine/tools on sys.path)
from test_mtp_fetch import range_bytes, write_safetensors  # noqa: E402
from vision_fixture import MAX_PIXELS, MEAN, MIN_PIXELS, STD, randomise  # noqa: E402

import mtp_extract  # noqa: E402
from installer.config_writer import StrataConfig  # noqa: E402
from installer.launcher import gateway_command  # noqa: E402
from installer.mtp_fetch import MtpFetchError  # noqa: E402
from installer.vision_head import VisionSource, make_vision_model  # noqa: E402

CKPT_REPO = "test-org/Tiny-VL"
GGUF_REPO = "test-org/Tiny-GGUF"
# Bigger than vision_fixture's tower (about 1.3 MB of f32) so a throttled fetch can be killed in the middle.
VISION = dict(depth=2, hidden_size=64, num_heads=2, intermediate_size=256, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=64, in_channels=3)
NO_TORCH = "import runpy, sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None; " \
           "runpy.run_module('installer.vision_head', run_name='__main__')"
N_SHARDS = 3            # the last shard holds only text tensors and must never be read


@pytest.fixture(scope="module")
def tower(tmp_path_factory):
    """An HF folder with the tower's model.visual.* tensors (f32), config.json and preprocessor_config.json."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen4ExpConfig, Qwen4ExpVisionConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpVisionModel

    hf = tmp_path_factory.mktemp("tower") / "hf"
    hf.mkdir()
    vc = Qwen4ExpVisionConfig(**VISION)
    torch.manual_seed(0)
    model = Qwen4ExpVisionModel(vc).eval().float()
    randomise(model, torch, 0)
    Qwen4ExpConfig(vision_config=vc.to_dict()).save_pretrained(str(hf))
    save_file({"model.visual." + k: v.contiguous() for k, v in model.state_dict().items()},
              str(hf / "model.safetensors"))
    Qwen2VLImageProcessorPil(patch_size=VISION["patch_size"], merge_size=VISION["spatial_merge_size"],
                             temporal_patch_size=2, image_mean=MEAN, image_std=STD,
                             size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}).save_pretrained(str(hf))
    return hf


def reshard(hf: Path, repo_dir: Path, dtype: str) -> int:
    """The tower (as dtype F32 or BF16) in N_SHARDS shards + index, text-model tensors before, between and after
    its tensors (so some ranges merge and some do not); returns the vision tensors' bytes."""
    entries = mtp_extract.read_local_header(str(hf / "model.safetensors"))
    data = (hf / "model.safetensors").read_bytes()
    rng = np.random.default_rng(1)

    def raw(key):
        e = entries[key]
        x = np.frombuffer(data[e.start:e.end], dtype="<f4")
        if dtype == "BF16":
            return "BF16", e.shape, (x.view(np.uint32) >> 16).astype("<u2").tobytes()
        return "F32", e.shape, x.tobytes()

    def text(i):
        return (f"model.language_model.layers.{i}.mlp.up_proj.weight", "BF16", [16, 64],
                rng.integers(0, 1 << 16, 16 * 64, dtype=np.uint16).tobytes())

    vision = sorted(entries)
    half = len(vision) // 2
    shards = [[text(0)] + [(k, *raw(k)) for k in vision[:half]],
              [(k, *raw(k)) for k in vision[half:half + 5]] + [text(1)] + [(k, *raw(k)) for k in vision[half + 5:]]
              + [text(2)],
              [text(3), text(4)]]
    repo_dir.mkdir(parents=True)
    names = [f"model-{i + 1:05d}-of-{N_SHARDS:05d}.safetensors" for i in range(N_SHARDS)]
    for name, tensors in zip(names, shards):
        write_safetensors(repo_dir / name, tensors)
    weight_map = {t[0]: name for name, tensors in zip(names, shards) for t in tensors}
    (repo_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for name in ("config.json", "preprocessor_config.json"):
        (repo_dir / name).write_bytes((hf / name).read_bytes())
    return sum(len(t[3]) for tensors in shards for t in tensors if t[0].startswith("model.visual."))


@pytest.fixture
def ckpt(hub, tower):
    repo_dir = hub.repo_dir.parent / CKPT_REPO.split("/")[1]
    return repo_dir, reshard(tower, repo_dir, "F32")


def shard_gets(hub) -> list[dict]:
    return [r for r in hub.state.requests if r["method"] == "GET" and f"{CKPT_REPO}/resolve/" in r["path"]
            and r["path"].endswith(".safetensors")]


def piece_gets(hub) -> list[dict]:
    return [r for r in shard_gets(hub) if r["range"] != "bytes=0-7" and not r["range"].startswith("bytes=8-")]


def reference_gguf(repo_dir: Path, out: Path, outtype: str) -> bytes:
    r = subprocess.run([sys.executable, str(PROJECT_DIR / "vision" / "convert_vision.py"), str(repo_dir), str(out),
                        "--outtype", outtype], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out.read_bytes()


@pytest.mark.parametrize("dtype, outtype", [("F32", "f16"), ("F32", "f32"), ("BF16", "bf16"), ("BF16", "f16")])
def test_only_vision_ranges_are_fetched_and_the_gguf_equals_convert_vision(hub, tower, tmp_path, monkeypatch,
                                                                             dtype, outtype):
    repo_dir = hub.repo_dir.parent / CKPT_REPO.split("/")[1]
    needed = reshard(tower, repo_dir, dtype)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    out = tmp_path / "models" / "original-Q2_0-vision.gguf"
    out.parent.mkdir()
    said = []
    make_vision_model(VisionSource(CKPT_REPO, None), out, outtype, say=said.append)
    gets = shard_gets(hub)
    assert all(r["range"] and not r["range"].endswith("-") for r in gets), "a GET without a closed byte range"
    assert not any(r["path"].endswith(f"-{N_SHARDS:05d}-of-{N_SHARDS:05d}.safetensors") for r in gets)
    pieces = piece_gets(hub)
    assert sum(range_bytes(r) for r in pieces) == needed          # exactly the vision bytes, each once
    assert len(pieces) == 3, [r["range"] for r in pieces]          # shard 1: one run; shard 2: two (text between)
    assert [r for r in hub.state.requests if r["path"].endswith("/preprocessor_config.json")]
    assert not list(out.parent.glob("*.parts-*")), "the fetched pieces should be removed after the conversion"
    assert out.read_bytes() == reference_gguf(repo_dir, tmp_path / "ref.gguf", outtype)
    assert any("Vision model ready" in s for s in said)

    before = len(hub.state.requests)
    said.clear()
    make_vision_model(VisionSource(CKPT_REPO, None), out, outtype, say=said.append)
    assert "converted earlier" in said[0] and len(hub.state.requests) == before


def test_no_preprocessor_config_uses_the_defaults_like_convert_vision(hub, ckpt, tmp_path, monkeypatch):
    repo_dir, _ = ckpt
    (repo_dir / "preprocessor_config.json").unlink()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    out = tmp_path / "v.gguf"
    make_vision_model(VisionSource(CKPT_REPO, None), out, "f32", say=lambda _: None)
    assert out.read_bytes() == reference_gguf(repo_dir, tmp_path / "ref.gguf", "f32")


def test_a_checkpoint_without_a_vision_tower_is_refused_before_any_tensor_byte(hub, ckpt, tmp_path, monkeypatch):
    repo_dir, _ = ckpt
    index = json.loads((repo_dir / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if not k.startswith("model.visual.")}
    (repo_dir / "model.safetensors.index.json").write_text(json.dumps(index))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    with pytest.raises(MtpFetchError, match="no model.visual.. tensors"):
        make_vision_model(VisionSource(CKPT_REPO, None), tmp_path / "v.gguf", say=lambda _: None)
    assert shard_gets(hub) == []


def test_kill_9_mid_fetch_resumes_from_the_pieces_on_disk(hub, ckpt, tmp_path):
    repo_dir, needed = ckpt
    hub.state.bytes_per_s = 150_000
    out = tmp_path / "v.gguf"
    # without torch (not in requirements.txt): the f16 default reads and writes with numpy only
    command = [sys.executable, "-c", NO_TORCH, "--repo", CKPT_REPO, "--out", str(out)]
    process = subprocess.Popen(command, cwd=PROJECT_DIR, env=installer_env(hub), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    parts = lambda: list(tmp_path.glob("*.parts-*/*.part")) + list(tmp_path.glob("*.parts-*/*.bin"))  # noqa: E731
    try:
        wait_for(lambda: half_on_disk(parts(), 300_000), 60, "a piece half on disk")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    kept = sum(p.stat().st_size for p in parts())
    assert 0 < kept < needed and any(p.suffix == ".part" for p in parts()), "the kill should land mid-piece"
    assert not out.exists()
    gets_before = len(piece_gets(hub))

    hub.state.bytes_per_s = None
    result = subprocess.run(command, cwd=PROJECT_DIR, env=installer_env(hub), capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "already on disk" in result.stdout
    assert sum(range_bytes(r) for r in piece_gets(hub)[gets_before:]) == needed - kept   # nothing fetched twice
    assert out.read_bytes() == reference_gguf(repo_dir, tmp_path / "ref.gguf", "f16")


def installer_catalog(tmp_path: Path, checkpoint_repo: str | None) -> Path:
    """A catalogue as older ones were (an mmproj entry, which is no longer fetched) plus vision.checkpoint_repo."""
    catalog = tmp_path / f"catalog-{checkpoint_repo is not None}.json"
    catalog.write_text(json.dumps({"default_family": "original", "families": {"original": {
        "repo": GGUF_REPO, "revision": None, "mtp": {"checkpoint_repo": None, "revision": None},
        "vision": {"checkpoint_repo": checkpoint_repo, "revision": None},
        "mmproj": {"path": "mmproj-tiny-BF16.gguf", "size_bytes": None, "sha256": None},
        "sizes": {"Q2_0": {"file_pattern": "*Q2_0*.gguf", "shards": 1, "files": None, "ram_floor_gib": 1}}}}}))
    return catalog


def run_setup(hub, home: Path, catalog: Path, vision: str) -> tuple[str, dict]:
    command = [sys.executable, "-m", "installer", "--setup", "--yes", "--model", "Q2_0", "--vision", vision,
               "--no-start", "--engine", engine_path(), "--dir", str(home), "--catalog", str(catalog)]
    result = subprocess.run(command, cwd=PROJECT_DIR, env=installer_env(hub), capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, json.loads((home / "strata-original-Q2_0.json").read_text())


def test_installer_makes_the_vision_model_and_the_gateway_gets_it_only_with_images_on(hub, ckpt, tmp_path):
    repo_dir, _ = ckpt
    (hub.repo_dir / "tiny-Q2_0-00001-of-00001.gguf").write_bytes(b"GGUF" + bytes(60))
    (hub.repo_dir / "mmproj-tiny-BF16.gguf").write_bytes(b"GGUF" + bytes(60))
    home = tmp_path / "home"
    vision_gguf = home / "models" / "Tiny-GGUF" / "original-Q2_0-vision.gguf"

    out, config = run_setup(hub, home, installer_catalog(tmp_path, CKPT_REPO), "yes")
    assert config["vision_model"] == str(vision_gguf) and config["mmproj"] is None, out
    assert f"Vision model ready: {vision_gguf}" in out and "images on" in out
    assert vision_gguf.read_bytes() == reference_gguf(repo_dir, tmp_path / "ref.gguf", "f16")
    assert not hub.state.file_gets("mmproj-tiny-BF16.gguf"), "the unusable mmproj was downloaded"
    command = gateway_command(StrataConfig(**{k: v for k, v in config.items() if k != "_comment"}), 8080)
    assert command[command.index("--vision-model") + 1] == str(vision_gguf)

    gets = len(shard_gets(hub))
    out, config = run_setup(hub, home, installer_catalog(tmp_path, CKPT_REPO), "yes")
    assert "converted earlier" in out and len(shard_gets(hub)) == gets and config["vision_model"] == str(vision_gguf)

    out, config = run_setup(hub, home, installer_catalog(tmp_path, CKPT_REPO), "no")
    assert config["vision_model"] is None and "images off" in out
    assert "--vision-model" not in gateway_command(StrataConfig(**{k: v for k, v in config.items()
                                                                    if k != "_comment"}), 8080)

    out, config = run_setup(hub, home, installer_catalog(tmp_path, None), "yes")
    assert "Images are not available for 'original'" in out and config["vision_model"] is None
    assert not hub.state.file_gets("mmproj-tiny-BF16.gguf")


def test_the_demo_model_has_no_images_and_is_served_as_strata_demo(tmp_path):
    config = StrataConfig(name="demo", model="m.gguf", engine="strata", context=4096, demo=True)
    command = gateway_command(config, 8080)
    assert config.vision_model is None and "--vision-model" not in command
    assert command[command.index("--model-name") + 1] == "strata-demo"
    real = StrataConfig(name="original-Q2_0", model="m.gguf", engine="strata", context=4096)
    assert "--model-name" not in gateway_command(real, 8080)   # the GGUF's own name
