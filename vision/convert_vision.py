#!/usr/bin/env python3
"""HF qwen4_exp checkpoint (its vision tower) -> the GGUF that `strata-vision` reads (layout: vision/README.md).

Usage: python vision/convert_vision.py HF_DIR OUT.gguf [--outtype f32|f16|bf16]

HF_DIR holds config.json (a `qwen4_exp` config with `vision_config`, or a bare `qwen4_exp_vision` config), the
*.safetensors files with the vision tower (`model.visual.*`, `visual.*`, or unprefixed names of a saved
Qwen4ExpVisionModel), and optionally preprocessor_config.json (image mean/std, rescale factor, min/max pixels; the
defaults of transformers' Qwen2VLImageProcessor, the image processor of qwen4_exp, when it is missing).
Norm weights and all biases are always stored as F32; the 2-D matrices (and the position table) in the outtype.
"""
import argparse
import json
import os
import sys

import numpy as np

import gguf

ARCH = "qwen4exp-vision"
FORMAT_VERSION = 1

# Qwen4ExpVisionConfig defaults (transformers 5.23, configuration_qwen4_exp.py).
VISION_DEFAULTS = {
    "depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 4304,
    "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
    "out_hidden_size": 3584, "num_position_embeddings": 2304,
}
# Qwen2VLImageProcessor / Qwen2VLImageProcessorPil class defaults (transformers 5.23): OPENAI_CLIP mean/std,
# size {"shortest_edge": 56*56, "longest_edge": 28*28*1280}, rescale 1/255.
PROCESSOR_DEFAULTS = {
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "rescale_factor": 1 / 255,
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 1280,
}
LAYER_NORM_EPS = 1e-6   # hard-coded in Qwen4ExpVisionBlock / Qwen4ExpVisionPatchMerger
SUPPORTED_ACTS = ("gelu_pytorch_tanh", "gelu")
PREFIXES = ("model.visual.", "visual.", "")


class ConvertError(Exception):
    pass


def read_vision_config(hf_dir: str) -> dict:
    path = os.path.join(hf_dir, "config.json")
    if not os.path.exists(path):
        raise ConvertError(f"{path} is missing")
    with open(path) as f:
        cfg = json.load(f)
    if "vision_config" in cfg:
        vc = dict(cfg["vision_config"] or {})
    elif cfg.get("model_type") == "qwen4_exp_vision":
        vc = dict(cfg)
    else:
        raise ConvertError(f"{path} has no vision_config (model_type {cfg.get('model_type')!r})")
    out = dict(VISION_DEFAULTS)
    out.update({k: v for k, v in vc.items() if k in VISION_DEFAULTS})
    for k in ("patch_size", "temporal_patch_size"):
        if isinstance(out[k], (list, tuple)):
            if len(set(out[k])) != 1:
                raise ConvertError(f"non-square {k} {out[k]} is not supported")
            out[k] = out[k][0]
    rope = vc.get("rope_parameters") or {}
    if rope.get("rope_type", "axial") != "axial":
        raise ConvertError(f"vision rope_type {rope.get('rope_type')!r} is not supported (expected axial)")
    out["rope_theta"] = float(rope.get("rope_theta", 10000.0))
    if out["hidden_act"] not in SUPPORTED_ACTS:
        raise ConvertError(f"vision hidden_act {out['hidden_act']!r} is not supported ({SUPPORTED_ACTS})")
    if out["hidden_size"] % out["num_heads"] or (out["hidden_size"] // out["num_heads"]) % 4:
        raise ConvertError("vision head_dim must be an integer multiple of 4")
    side = int(out["num_position_embeddings"] ** 0.5)
    if side * side != out["num_position_embeddings"]:
        raise ConvertError(f"num_position_embeddings {out['num_position_embeddings']} is not a square")
    return out


def read_processor_config(hf_dir: str, vc: dict) -> dict:
    out = dict(PROCESSOR_DEFAULTS)
    path = os.path.join(hf_dir, "preprocessor_config.json")
    if not os.path.exists(path):
        print(f"convert_vision: no preprocessor_config.json, using Qwen2VLImageProcessor defaults", file=sys.stderr)
        return out
    with open(path) as f:
        pc = json.load(f)
    for k in ("image_mean", "image_std", "rescale_factor"):
        if pc.get(k) is not None:
            out[k] = pc[k]
    size = pc.get("size") or {}
    out["min_pixels"] = int(pc.get("min_pixels") or size.get("shortest_edge") or size.get("min_pixels")
                            or out["min_pixels"])
    out["max_pixels"] = int(pc.get("max_pixels") or size.get("longest_edge") or size.get("max_pixels")
                            or out["max_pixels"])
    for k, vk in (("patch_size", "patch_size"), ("merge_size", "spatial_merge_size"),
                  ("temporal_patch_size", "temporal_patch_size")):
        if pc.get(k) is not None and int(pc[k]) != int(vc[vk]):
            raise ConvertError(f"preprocessor_config {k}={pc[k]} differs from vision_config {vk}={vc[vk]}")
    if pc.get("do_rescale") is False or pc.get("do_normalize") is False:
        raise ConvertError("preprocessor_config turns off rescale or normalize: not supported")
    for k in ("image_mean", "image_std"):
        if isinstance(out[k], (int, float)):
            out[k] = [float(out[k])] * 3
        if len(out[k]) != 3:
            raise ConvertError(f"{k} must have 3 values, got {out[k]}")
    return out


class Checkpoint:
    def __init__(self, hf_dir: str):
        from safetensors import safe_open
        files = sorted(f for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
        if not files:
            raise ConvertError(f"no .safetensors files in {hf_dir}")
        keys = {}
        self.handles = []
        for fn in files:
            h = safe_open(os.path.join(hf_dir, fn), framework="pt")
            self.handles.append(h)
            for k in h.keys():
                keys[k] = h
        for p in PREFIXES:
            if p + "patch_embed.proj.weight" in keys:
                self.prefix = p
                break
        else:
            raise ConvertError(f"no vision tower in {hf_dir}: none of "
                               f"{[p + 'patch_embed.proj.weight' for p in PREFIXES]} found")
        self.keys = keys

    def get(self, name: str) -> np.ndarray:
        import torch
        k = self.prefix + name
        if k not in self.keys:
            raise ConvertError(f"tensor {k} is missing")
        return self.keys[k].get_tensor(k).to(torch.float32).numpy()


def tensor_plan(vc: dict):
    """(gguf name, hf name, numpy shape) of every tensor, in file order."""
    h, ff, out = vc["hidden_size"], vc["intermediate_size"], vc["out_hidden_size"]
    pdim = vc["in_channels"] * vc["temporal_patch_size"] * vc["patch_size"] ** 2
    mh = h * vc["spatial_merge_size"] ** 2
    plan = [("v.patch_embd.weight", "patch_embed.proj.weight", (h, pdim)),
            ("v.patch_embd.bias", "patch_embed.proj.bias", (h,)),
            ("v.pos_embd.weight", "pos_embed.weight", (vc["num_position_embeddings"], h))]
    for i in range(vc["depth"]):
        b, hb = f"v.blk.{i}.", f"blocks.{i}."
        plan += [(b + "ln1.weight", hb + "norm1.weight", (h,)), (b + "ln1.bias", hb + "norm1.bias", (h,)),
                 (b + "attn_qkv.weight", hb + "attn.qkv.weight", (3 * h, h)),
                 (b + "attn_qkv.bias", hb + "attn.qkv.bias", (3 * h,)),
                 (b + "attn_out.weight", hb + "attn.proj.weight", (h, h)),
                 (b + "attn_out.bias", hb + "attn.proj.bias", (h,)),
                 (b + "ln2.weight", hb + "norm2.weight", (h,)), (b + "ln2.bias", hb + "norm2.bias", (h,)),
                 (b + "ffn_up.weight", hb + "mlp.linear_fc1.weight", (ff, h)),
                 (b + "ffn_up.bias", hb + "mlp.linear_fc1.bias", (ff,)),
                 (b + "ffn_down.weight", hb + "mlp.linear_fc2.weight", (h, ff)),
                 (b + "ffn_down.bias", hb + "mlp.linear_fc2.bias", (h,))]
    plan += [("v.merger.ln.weight", "merger.norm.weight", (h,)), ("v.merger.ln.bias", "merger.norm.bias", (h,)),
             ("v.merger.fc1.weight", "merger.linear_fc1.weight", (mh, mh)),
             ("v.merger.fc1.bias", "merger.linear_fc1.bias", (mh,)),
             ("v.merger.fc2.weight", "merger.linear_fc2.weight", (out, mh)),
             ("v.merger.fc2.bias", "merger.linear_fc2.bias", (out,))]
    return plan


def encode(x: np.ndarray, outtype: str):
    """(data, raw_dtype or None) for GGUFWriter.add_tensor."""
    if x.ndim == 1 or outtype == "f32":
        return np.ascontiguousarray(x, dtype=np.float32), None
    if outtype == "f16":
        return np.ascontiguousarray(x, dtype=np.float16), None
    if outtype == "bf16":
        import torch
        b = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
        return b.view(torch.int16).numpy().view(np.uint16), gguf.GGMLQuantizationType.BF16
    raise ConvertError(f"unknown outtype {outtype!r} (expected f32, f16 or bf16)")


def convert(hf_dir: str, out_path: str, outtype: str = "f32") -> dict:
    vc = read_vision_config(hf_dir)
    pc = read_processor_config(hf_dir, vc)
    ck = Checkpoint(hf_dir)
    w = gguf.GGUFWriter(out_path, ARCH)
    w.add_uint32("vision.format_version", FORMAT_VERSION)
    for key in ("depth", "hidden_size", "intermediate_size", "num_heads", "in_channels", "patch_size",
                "temporal_patch_size", "spatial_merge_size", "out_hidden_size", "num_position_embeddings"):
        w.add_uint32(f"vision.{key}", int(vc[key]))
    w.add_string("vision.hidden_act", vc["hidden_act"])
    w.add_float32("vision.rope_theta", vc["rope_theta"])
    w.add_float32("vision.layer_norm_eps", LAYER_NORM_EPS)
    w.add_array("vision.image_mean", [float(v) for v in pc["image_mean"]])
    w.add_array("vision.image_std", [float(v) for v in pc["image_std"]])
    w.add_float32("vision.rescale_factor", float(pc["rescale_factor"]))
    w.add_uint64("vision.min_pixels", int(pc["min_pixels"]))
    w.add_uint64("vision.max_pixels", int(pc["max_pixels"]))
    types = {}
    for name, hf_name, shape in tensor_plan(vc):
        x = ck.get(hf_name)
        if name == "v.patch_embd.weight":
            x = x.reshape(x.shape[0], -1)   # Conv3d [h, C, T, P, P] -> [h, C*T*P*P], the patch vector's order
        if tuple(x.shape) != shape:
            raise ConvertError(f"{ck.prefix + hf_name}: shape {list(x.shape)}, expected {list(shape)}")
        data, raw = encode(x, outtype)
        w.add_tensor(name, data, raw_dtype=raw)
        types[name] = "f32" if x.ndim == 1 else outtype
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", default="f32", choices=["f32", "f16", "bf16"])
    a = ap.parse_args(argv)
    try:
        types = convert(a.hf_dir, a.out, a.outtype)
    except ConvertError as e:
        print(f"convert_vision: error: {e}", file=sys.stderr)
        return 1
    print(f"convert_vision: wrote {a.out} ({len(types)} tensors, {a.outtype})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
