"""A tiny random vision tower for the gateway's image tests, built as tests/vision/test_vision_helper.py builds its
own (make_tower, copied: that module is a test module and cannot be imported by name from here): every weight, norm
and bias random, patch 16 and merge 2 (factor 32 as the real model), out_hidden_size 32 = the hidden size of the
tiny real-vocabulary text model, so its rows fit that engine. Saved as an HF checkpoint with a preprocessor config
(non-default mean/std, 1,024..65,536 pixels) and converted to f32 with vision/convert_vision.py."""
from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests"))
from strata_testing import build_dir  # noqa: E402

VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=16, in_channels=3)
MEAN, STD = [0.52, 0.44, 0.39], [0.31, 0.24, 0.21]
MIN_PIXELS, MAX_PIXELS = 32 * 32, 256 * 256


def helper_path() -> str:
    return os.path.join(build_dir(), "vision", "strata-vision")


def randomise(model, torch, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)


def make_tower(d, seed=0) -> dict:
    """{'model': the torch Qwen4ExpVisionModel, 'hf': checkpoint dir, 'gguf': f32 GGUF} under the folder d."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen4ExpConfig, Qwen4ExpVisionConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpVisionModel

    hf = os.path.join(str(d), "hf")
    os.makedirs(hf)
    vc = Qwen4ExpVisionConfig(**VISION)
    torch.manual_seed(seed)
    model = Qwen4ExpVisionModel(vc).eval().float()
    randomise(model, torch, seed)
    Qwen4ExpConfig(vision_config=vc.to_dict()).save_pretrained(hf)
    save_file({"model.visual." + k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(hf, "model.safetensors"))
    Qwen2VLImageProcessorPil(patch_size=VISION["patch_size"], merge_size=VISION["spatial_merge_size"],
                             temporal_patch_size=2, image_mean=MEAN, image_std=STD,
                             size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}).save_pretrained(hf)
    gguf = os.path.join(str(d), "vision-f32.gguf")
    r = subprocess.run([sys.executable, os.path.join(REPO, "vision", "convert_vision.py"), hf, gguf, "--outtype",
                        "f32"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return {"model": model, "hf": hf, "gguf": gguf}
