"""A tiny random Qwen4ExpForConditionalGeneration (the "tiny" text config of engine/tools/tiny_configs.py plus a tiny
vision tower, every weight randomised: norms, biases, the patch conv, the position table), its GGUF from our
converter (which skips model.visual.*), and transformers' greedy decoding of prompts with images, as the oracle
for the engine's GENI path. Image features come from transformers' own get_image_features and are written in the
SVE1 embeddings format the vision helper writes (protocol.md §3)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from strata_testing import REPO, TOOLS, tiny  # noqa: E402

TEXT_CONFIG = "tiny"
VISION = {"depth": 2, "hidden_size": 32, "num_heads": 2, "intermediate_size": 48, "in_channels": 3,
          "patch_size": 2, "temporal_patch_size": 2, "spatial_merge_size": 2, "num_position_embeddings": 16,
          "hidden_act": "gelu_pytorch_tanh"}
SEED = 77
VISION_START, VISION_END = 488, 489     # any text ids of the small vocabulary (only the image ids are special)


def _cache_dir() -> str:
    import tiny_configs
    h = hashlib.sha256(json.dumps([tiny_configs.CONFIGS[TEXT_CONFIG], VISION, SEED], sort_keys=True).encode())
    with open(__file__, "rb") as f:
        h.update(f.read())
    for fn in ("convert.py", "gguf_layout.py", "tiny_configs.py"):
        with open(TOOLS / fn, "rb") as f:
            h.update(f.read())
    base = os.environ.get("STRATA_TINY_DIR") or os.path.join(REPO, "build", "tiny")
    return os.path.join(base, f"vlm-{TEXT_CONFIG}-{h.hexdigest()[:12]}")


def _randomise_vision_(model, gen) -> None:
    for name, p in model.model.visual.named_parameters():
        with torch.no_grad():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "pos_embed" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else p.shape[0]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


def build() -> dict:
    """{'hf_dir', 'gguf', 'image_token_id'}; built once, cached under build/tiny."""
    final = _cache_dir()
    manifest = os.path.join(final, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return json.load(f)
    import convert
    import make_tiny
    import tiny_configs
    from transformers import Qwen4ExpConfig, Qwen4ExpForConditionalGeneration

    text_m = tiny(TEXT_CONFIG)            # for its tokenizer files
    cfg, _, _ = tiny_configs.CONFIGS[TEXT_CONFIG]
    text_kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "image_token_id")}
    image_id = cfg["image_token_id"]
    config = Qwen4ExpConfig(text_config=text_kwargs, vision_config=dict(VISION, out_hidden_size=cfg["hidden_size"]),
                            image_token_id=image_id, video_token_id=image_id + 1,
                            vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)
    torch.manual_seed(SEED)
    model = Qwen4ExpForConditionalGeneration(config).eval()
    gen = torch.Generator().manual_seed(SEED)
    text_params = [(n[len("model.language_model."):] if n.startswith("model.language_model.") else n, p)
                   for n, p in model.named_parameters() if not n.startswith("model.visual.")]
    make_tiny.randomise_([("model." + n if not n.startswith("lm_head") else n, p) for n, p in text_params], cfg, gen)
    _randomise_vision_(model, gen)
    work = final + ".tmp"
    shutil.rmtree(work, ignore_errors=True)
    hf_dir = os.path.join(work, "hf")
    model.save_pretrained(hf_dir)
    with open(os.path.join(hf_dir, "config.json")) as f:
        saved = json.load(f)
    saved["text_config"]["partial_rotary_factor"] = cfg["partial_rotary_factor"]
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(saved, f, indent=2)
    for fn in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        src = os.path.join(text_m["hf_dir"], fn)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(hf_dir, fn))
    gguf = os.path.join(work, "vlm-f32.gguf")
    convert.convert(hf_dir, gguf, "f32", None, name="strata-vlm-tiny")
    out = {"hf_dir": os.path.join(final, "hf"), "gguf": os.path.join(final, "vlm-f32.gguf"), "image_token_id": image_id}
    with open(os.path.join(work, "manifest.json"), "w") as f:
        json.dump(out, f)
    shutil.rmtree(final, ignore_errors=True)
    os.rename(work, final)
    return out


def load_hf(hf_dir: str):
    from transformers import Qwen4ExpForConditionalGeneration
    model = Qwen4ExpForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32)
    return model.eval()


def pixels(grids: list[tuple[int, int, int]], seed: int) -> torch.Tensor:
    """Random pixel_values for images of patch grids (t, h, w): one flattened C×T×p×p cube per patch."""
    g = torch.Generator().manual_seed(seed)
    n = sum(t * h * w for t, h, w in grids)
    width = VISION["in_channels"] * VISION["temporal_patch_size"] * VISION["patch_size"] ** 2
    return torch.randn(n, width, generator=g)


@torch.no_grad()
def image_features(model, pixel_values: torch.Tensor, grids) -> list[np.ndarray]:
    thw = torch.tensor(grids, dtype=torch.long)
    feats = model.model.get_image_features(pixel_values, thw, return_dict=True).pooler_output
    return [f.float().numpy() for f in feats]


def write_sve(path: str, feats: list[np.ndarray], grids, n_embd: int | None = None, magic: bytes = b"SVE1") -> None:
    """SVE1: per image a header (magic, int32 n_tokens, nx, ny, n_embd) then n_tokens float32 rows."""
    m = VISION["spatial_merge_size"]
    with open(path, "wb") as f:
        for x, (_, h, w) in zip(feats, grids):
            ny, nx = h // m, w // m
            assert x.shape[0] == nx * ny
            f.write(magic + struct.pack("<4i", x.shape[0], nx, ny, n_embd or x.shape[1]))
            f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())


def mm_types(ids: list[int], image_id: int) -> torch.Tensor:
    return torch.tensor([[1 if t == image_id else 0 for t in ids]], dtype=torch.int32)


@torch.no_grad()
def hf_greedy(model, ids: list[int], pixel_values, grids, n_new: int) -> tuple[list[int], np.ndarray]:
    """Prefill with the images (transformers computes M-RoPE positions and rope_deltas itself), then one-token steps
    with the cache (positions P + rope_delta); returns the greedy tokens and the logits before each [n_new, V]."""
    image_id = model.config.image_token_id
    kw = {}
    if grids:
        kw = {"pixel_values": pixel_values, "image_grid_thw": torch.tensor(grids, dtype=torch.long),
              "mm_token_type_ids": mm_types(ids, image_id)}
    model.model.rope_deltas = None
    out = model(input_ids=torch.tensor([ids]), use_cache=True, **kw)
    past, logits = out.past_key_values, out.logits[0, -1]
    tokens, rows = [], []
    for _ in range(n_new):
        rows.append(logits.float().numpy().copy())
        nxt = int(torch.argmax(logits))
        tokens.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return tokens, np.stack(rows)


@torch.no_grad()
def hf_full_logits(model, ids: list[int], pixel_values, grids) -> np.ndarray:
    """One uncached forward over the whole sequence (positions from get_rope_index): logits [len, V]."""
    kw = {}
    if grids:
        kw = {"pixel_values": pixel_values, "image_grid_thw": torch.tensor(grids, dtype=torch.long),
              "mm_token_type_ids": mm_types(ids, model.config.image_token_id)}
    model.model.rope_deltas = None
    return model(input_ids=torch.tensor([ids]), use_cache=False, **kw).logits[0].float().numpy()
