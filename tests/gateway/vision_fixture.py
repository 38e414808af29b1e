"""A tiny random vision tower for the gateway's image tests (tests/vision_tower.py): patch 16 and merge 2 (factor 32
as the real model), out_hidden_size 32 = the hidden size of the tiny real-vocabulary text model, so its rows fit
that engine; converted to f32 with vision/convert_vision.py."""
from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests"))
from strata_testing import build_dir  # noqa: E402
from vision_tower import MAX_PIXELS, MEAN, MIN_PIXELS, STD, randomise, save_tower  # noqa: E402,F401

VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16, in_channels=3)


def helper_path() -> str:
    return os.path.join(build_dir(), "vision", "strata-vision")


def make_tower(d, seed=0) -> dict:
    """{'model': the torch Qwen4ExpVisionModel, 'hf': checkpoint dir, 'gguf': f32 GGUF} under the folder d."""
    model, hf = save_tower(d, VISION, seed)
    gguf = os.path.join(str(d), "vision-f32.gguf")
    r = subprocess.run([sys.executable, os.path.join(REPO, "vision", "convert_vision.py"), hf, gguf, "--outtype",
                        "f32"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return {"model": model, "hf": hf, "gguf": gguf}
