"""A tiny random qwen4_exp vision tower for the tests (tests/vision, tests/gateway, tests/installer): every weight,
norm and bias random, saved as an HF checkpoint dir with a preprocessor config (non-default mean/std, 1,024..65,536
pixels) that vision/convert_vision.py converts."""
from __future__ import annotations

import os

MEAN, STD = [0.52, 0.44, 0.39], [0.31, 0.24, 0.21]
MIN_PIXELS, MAX_PIXELS = 32 * 32, 256 * 256


def randomise(model, torch, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
                p.copy_(base + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)


def save_tower(d, vision: dict, seed=0):
    """(the torch Qwen4ExpVisionModel, its HF checkpoint dir d/hf as a str) for the vision config `vision`."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen4ExpConfig, Qwen4ExpVisionConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpVisionModel

    hf = os.path.join(str(d), "hf")
    os.makedirs(hf)
    vc = Qwen4ExpVisionConfig(**vision)
    torch.manual_seed(seed)
    model = Qwen4ExpVisionModel(vc).eval().float()
    randomise(model, torch, seed)
    Qwen4ExpConfig(vision_config=vc.to_dict()).save_pretrained(hf)
    save_file({"model.visual." + k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(hf, "model.safetensors"))
    Qwen2VLImageProcessorPil(patch_size=vision["patch_size"], merge_size=vision["spatial_merge_size"],
                             temporal_patch_size=2, image_mean=MEAN, image_std=STD,
                             size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}).save_pretrained(hf)
    return model, hf
