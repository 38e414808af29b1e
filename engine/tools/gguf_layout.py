# The qwen4exp GGUF layout (GGUF.md §1-§2) computed from a transformers config alone: hyperparameters, the
# refusals for what llama.cpp's format cannot express, and the tensor name/shape list the converter writes.
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field

ARCH = "qwen4exp"


class ConvertError(Exception):
    """A checkpoint that the qwen4exp GGUF format cannot express, or a malformed one."""


def read_config(hf_dir: str) -> tuple[dict, dict]:
    """Returns (text config, root config). A VLM config keeps the text part under text_config."""
    with open(os.path.join(hf_dir, "config.json")) as f:
        root = json.load(f)
    text = root.get("text_config") or root
    return text, root


def _nth_prime_after(start: int, count: int) -> int:
    def is_prime(v: int) -> bool:
        if v < 2:
            return False
        if v % 2 == 0:
            return v == 2
        return all(v % d for d in range(3, math.isqrt(v) + 1, 2))

    p = start
    for _ in range(count):
        p += 1
        while not is_prime(p):
            p += 1
    return p


@dataclass
class Hparams:
    n_embd: int                 # H
    n_layer: int                # L (trunk layers, without MTP)
    n_vocab: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_rot: int
    rope_theta: float
    mrope_sections: list
    ctx_len: int
    rms_eps: float
    attn_interval: int
    is_attention: list          # per layer
    ssm_nk: int
    ssm_nv: int
    ssm_dk: int
    ssm_dv: int
    ssm_conv_kernel: int
    n_expert: int
    n_expert_used: int
    expert_ff: int
    shexp_ff: int
    hc: int
    hc_lowrank: int
    idx_heads: int
    idx_head_dim: int
    idx_top_k: int
    compress_ratio: int
    ple_layer: int | None       # 0-based, or None without PLE
    ple_ngram: int
    ple_heads_per_ngram: int
    ple_conv_kernel: int
    ple_embed_dim: int
    ple_rows: int               # padded table rows
    ple_eos: int | None
    image_token_id: int | None
    has_output: bool = True
    warnings: list = field(default_factory=list)

    @property
    def hc_dim(self) -> int:
        return self.hc * self.n_embd

    @property
    def ple_heads(self) -> int:
        return (self.ple_ngram - 1) * self.ple_heads_per_ngram

    @property
    def ple_row_width(self) -> int:
        return self.ple_embed_dim // self.ple_heads

    @property
    def ssm_key_dim(self) -> int:
        return self.ssm_nk * self.ssm_dk

    @property
    def ssm_value_dim(self) -> int:
        return self.ssm_nv * self.ssm_dv

    @property
    def ssm_conv_dim(self) -> int:
        return 2 * self.ssm_key_dim + self.ssm_value_dim


def hparams_from_config(text: dict, root: dict | None = None, has_output: bool = True) -> Hparams:
    """Derives the GGUF hyperparameters; raises ConvertError for what llama.cpp's qwen4exp cannot express."""
    root = root or text
    warnings = []
    L = text["num_hidden_layers"]
    raw_types = text.get("layer_types")
    interval = text.get("full_attention_interval") or root.get("full_attention_interval")
    if raw_types is None:
        interval = interval or 4
        raw_types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(L)]
    if len(raw_types) != L:
        raise ConvertError(f"layer_types has {len(raw_types)} entries for num_hidden_layers={L}")
    unknown = sorted(set(raw_types) - {"linear_attention", "full_attention", "indexed_attention"})
    if unknown:
        raise ConvertError(f"unsupported layer types {unknown}")
    # llama.cpp's converter places the ratio where the raw type is "full_attention"; transformers saves the same
    # layers as "indexed_attention", so both spellings count as attention here.
    is_attn = [t != "linear_attention" for t in raw_types]
    if interval is None:
        interval = is_attn.index(True) + 1 if any(is_attn) else L + 1
    # Layer kinds that follow no interval (the demo model's attention at 3, 5, 7) go into the GGUF as
    # attention.recurrent_layers, which the loader reads in place of the interval (GGUF.md §1).

    nk, nv = text.get("linear_num_key_heads", 16), text.get("linear_num_value_heads", 32)
    dk, dv = text.get("linear_key_head_dim", 128), text.get("linear_value_head_dim", 128)
    if dk != dv:
        raise ConvertError(f"linear_key_head_dim={dk} != linear_value_head_dim={dv}: "
                           "qwen4exp stores one ssm.state_size for both")
    if nv % nk:
        raise ConvertError(f"linear_num_value_heads={nv} is not a multiple of linear_num_key_heads={nk}")

    qsa = {k: text.get(k) for k in ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim",
                                     "indexer_budget", "indexer_compress_ratio")}
    missing = [k for k, v in qsa.items() if v is None]
    if missing:
        raise ConvertError(f"QSA fields missing from the config: {missing}")
    if qsa["indexer_kv_heads"] != 1:
        raise ConvertError(f"indexer_kv_heads={qsa['indexer_kv_heads']}: qwen4exp supports exactly 1 indexer key head")
    ratio = qsa["indexer_compress_ratio"]
    if isinstance(ratio, (list, tuple)):
        if len(set(ratio)) != 1:
            raise ConvertError(f"indexer_compress_ratio differs across layers {ratio}: "
                               "llama.cpp supports one compress ratio per file")
        ratio = ratio[0]

    hc = text.get("hc_count", 4)
    if hc <= 1:
        raise ConvertError(f"hc_count={hc}: qwen4exp requires more than one residual stream")
    gate = text.get("output_gate_type") or text.get("hidden_act", "silu")
    if gate != "sigmoid":
        raise ConvertError(f"output_gate_type={gate!r}: llama.cpp hard-codes a sigmoid GDN output gate")

    ple_ids = sorted(set(text.get("ple_layer_ids") or []))
    ple_layer = None
    ple_eos = None
    H = text["hidden_size"]
    ngram = text.get("ngram_size", 3)
    hpn = text.get("heads_per_ngram", 8)
    ple_dim = text.get("ple_embed_dim") or H
    ple_rows = 0
    if len(ple_ids) > 1:
        raise ConvertError(f"ple_layer_ids={ple_ids}: llama.cpp supports exactly one PLE layer")
    if ple_ids:
        ple_layer = ple_ids[0] - 1
        if not 0 <= ple_layer < L or is_attn[ple_layer]:
            raise ConvertError(f"PLE layer {ple_ids[0]} (1-based) is not a linear_attention layer")
        heads = (ngram - 1) * hpn
        if heads <= 0 or ple_dim % heads:
            raise ConvertError(f"ple_embed_dim={ple_dim} is not divisible by the {heads} n-gram heads")
        eos = text.get("eos_token_id", root.get("eos_token_id"))
        if eos is None or eos == []:
            raise ConvertError("eos_token_id must be set when PLE is enabled")
        if isinstance(eos, list):
            if eos[0] != eos[-1]:
                warnings.append(f"eos_token_id is a list {eos}: llama.cpp stores the last id as ple.eos_token_id, "
                                f"transformers uses the first")
            eos = eos[-1]
        ple_eos = eos
        base = text.get("ngram_vocab_size_base", 20_000_000)
        total = sum(_nth_prime_after(base - 1, h + 1) for h in range(heads))
        div = text.get("make_ngram_vocab_size_divisible_by", 128)
        ple_rows = math.ceil(total / div) * div

    hd = text.get("head_dim") or H // text["num_attention_heads"]
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    # llama.cpp's converter reads partial_rotary_factor at the config top level only (default 0.25).
    prf = text.get("partial_rotary_factor", root.get("partial_rotary_factor", 0.25))
    if "partial_rotary_factor" in rope and rope["partial_rotary_factor"] != prf:
        warnings.append(f"rope_parameters.partial_rotary_factor={rope['partial_rotary_factor']} differs from the "
                        f"top-level value {prf} that llama.cpp's converter writes; the GGUF uses {prf}")
    sections = list(rope.get("mrope_section") or [11, 11, 10])
    sections = (sections + [0, 0, 0, 0])[:4]
    theta = rope.get("rope_theta", text.get("rope_theta", 10000.0))
    if rope.get("rope_type", "default") not in ("default", "mrope"):
        raise ConvertError(f"rope_type={rope.get('rope_type')!r} is not supported by this converter")

    return Hparams(
        n_embd=H, n_layer=L, n_vocab=text["vocab_size"], n_head=text["num_attention_heads"],
        n_head_kv=text["num_key_value_heads"], head_dim=hd, n_rot=int(hd * prf), rope_theta=float(theta),
        mrope_sections=sections, ctx_len=text.get("max_position_embeddings", 32768),
        rms_eps=float(text.get("rms_norm_eps", 1e-6)), attn_interval=interval, is_attention=is_attn,
        ssm_nk=nk, ssm_nv=nv, ssm_dk=dk, ssm_dv=dv, ssm_conv_kernel=text.get("linear_conv_kernel_dim", 4),
        n_expert=text["num_experts"], n_expert_used=text["num_experts_per_tok"],
        expert_ff=text["moe_intermediate_size"], shexp_ff=text["shared_expert_intermediate_size"],
        hc=hc, hc_lowrank=text.get("hc_lowrank", 320),
        idx_heads=qsa["indexer_n_heads"], idx_head_dim=qsa["indexer_head_dim"], idx_top_k=qsa["indexer_budget"],
        compress_ratio=ratio, ple_layer=ple_layer, ple_ngram=ngram, ple_heads_per_ngram=hpn,
        ple_conv_kernel=text.get("ple_conv_kernel_size", 4), ple_embed_dim=ple_dim, ple_rows=ple_rows,
        ple_eos=ple_eos, image_token_id=root.get("image_token_id", text.get("image_token_id")),
        has_output=has_output, warnings=warnings)


# ---- tensor list -------------------------------------------------------------------------------------------
# Shapes are GGUF ne order (ne0 first).

def _block_common(hp: Hparams, il: int) -> list:
    H, nH, r, n = hp.n_embd, hp.hc_dim, hp.hc_lowrank, hp.hc
    out = []
    for k in ("attn", "ffn"):
        out += [(f"blk.{il}.hc_{k}_norm.weight", (nH,)), (f"blk.{il}.hc_{k}_down.weight", (nH, r)),
                (f"blk.{il}.hc_{k}_up.weight", (r, nH)), (f"blk.{il}.hc_{k}_inject.weight", (nH, n))]
    E, I, Is = hp.n_expert, hp.expert_ff, hp.shexp_ff
    out += [(f"blk.{il}.ffn_gate_inp.weight", (H, E)),
            (f"blk.{il}.ffn_gate_exps.weight", (H, I, E)), (f"blk.{il}.ffn_up_exps.weight", (H, I, E)),
            (f"blk.{il}.ffn_down_exps.weight", (I, H, E)),
            (f"blk.{il}.ffn_gate_inp_shexp.weight", (H,)),
            (f"blk.{il}.ffn_gate_shexp.weight", (H, Is)), (f"blk.{il}.ffn_up_shexp.weight", (H, Is)),
            (f"blk.{il}.ffn_down_shexp.weight", (Is, H))]
    return out


def _block_attention(hp: Hparams, il: int) -> list:
    H, hd, di = hp.n_embd, hp.head_dim, hp.idx_head_dim
    return [(f"blk.{il}.attn_q.weight", (H, hp.n_head * 2 * hd)),
            (f"blk.{il}.attn_k.weight", (H, hp.n_head_kv * hd)),
            (f"blk.{il}.attn_v.weight", (H, hp.n_head_kv * hd)),
            (f"blk.{il}.attn_output.weight", (hp.n_head * hd, H)),
            (f"blk.{il}.attn_q_norm.weight", (hd,)), (f"blk.{il}.attn_k_norm.weight", (hd,)),
            (f"blk.{il}.indexer.q_proj.weight", (H, hp.idx_heads * di)),
            (f"blk.{il}.indexer.k_proj.weight", (H, di)),
            (f"blk.{il}.indexer.q_norm.weight", (di,)), (f"blk.{il}.indexer.k_norm.weight", (di,))]


def _block_gdn(hp: Hparams, il: int) -> list:
    H, nv, vd = hp.n_embd, hp.ssm_nv, hp.ssm_value_dim
    return [(f"blk.{il}.attn_qkv.weight", (H, hp.ssm_conv_dim)), (f"blk.{il}.attn_gate.weight", (H, vd)),
            (f"blk.{il}.ssm_beta.weight", (H, nv)), (f"blk.{il}.ssm_alpha.weight", (H, nv)),
            (f"blk.{il}.ssm_conv1d.weight", (hp.ssm_conv_kernel, hp.ssm_conv_dim)),
            (f"blk.{il}.ssm_dt.bias", (nv,)), (f"blk.{il}.ssm_a", (nv,)),
            (f"blk.{il}.ssm_norm.weight", (hp.ssm_dv,)), (f"blk.{il}.ssm_out.weight", (vd, H))]


def _block_ple(hp: Hparams, il: int) -> list:
    nH, Dp = hp.hc_dim, hp.ple_embed_dim
    return [(f"blk.{il}.ple_key.weight", (Dp, nH)), (f"blk.{il}.ple_value.weight", (Dp, hp.n_embd)),
            (f"blk.{il}.ple_norm_key.weight", (nH,)), (f"blk.{il}.ple_norm_query.weight", (nH,)),
            (f"blk.{il}.ple_norm_conv.weight", (nH,)), (f"blk.{il}.ple_conv1d.weight", (hp.ple_conv_kernel, nH))]


def main_tensor_specs(hp: Hparams) -> list:
    """[(gguf name, ne)] of the main file, in the order the converter writes them."""
    H, V, nH, r = hp.n_embd, hp.n_vocab, hp.hc_dim, hp.hc_lowrank
    specs = [("token_embd.weight", (H, V))]
    if hp.has_output:
        specs.append(("output.weight", (H, V)))
    specs += [("output_hc_norm.weight", (nH,)), ("output_hc_down.weight", (nH, r)), ("output_hc_up.weight", (r, nH))]
    if hp.ple_layer is not None:
        specs.append(("per_layer_token_embd.weight", (hp.ple_row_width, hp.ple_rows)))
    for il in range(hp.n_layer):
        specs += _block_common(hp, il)
        specs += _block_attention(hp, il) if hp.is_attention[il] else _block_gdn(hp, il)
        if il == hp.ple_layer:
            specs += _block_ple(hp, il)
    return specs


def mtp_tensor_specs(hp: Hparams) -> list:
    """[(gguf name, ne)] of the separate MTP file: blk.L (attention-type block + nextn.*), token_embd, output."""
    H, V, nH, r, L = hp.n_embd, hp.n_vocab, hp.hc_dim, hp.hc_lowrank, hp.n_layer
    specs = [("token_embd.weight", (H, V))]
    if hp.has_output:
        specs.append(("output.weight", (H, V)))
    specs += _block_common(hp, L) + _block_attention(hp, L)
    specs += [(f"blk.{L}.nextn.eh_proj.weight", (2 * H, H)), (f"blk.{L}.nextn.enorm.weight", (H,)),
              (f"blk.{L}.nextn.hnorm.weight", (nH,)), (f"blk.{L}.nextn.hc_head_norm.weight", (nH,)),
              (f"blk.{L}.nextn.hc_head_down.weight", (nH, r)), (f"blk.{L}.nextn.hc_head_up.weight", (r, nH))]
    return specs


def real_model_config() -> dict:
    """The released 125B text config as GGUF.md describes it (sizes only; used for the header-only description)."""
    return {
        "vocab_size": 248320, "hidden_size": 2560, "num_hidden_layers": 48, "num_attention_heads": 24,
        "num_key_value_heads": 2, "head_dim": 256, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10]},
        "partial_rotary_factor": 0.25,
        "layer_types": ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(48)],
        "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 640,
        "shared_expert_intermediate_size": 640, "hc_count": 4, "hc_lowrank": 320,
        "indexer_n_heads": 4, "indexer_kv_heads": 1, "indexer_head_dim": 128, "indexer_budget": 2048,
        "indexer_compress_ratio": 4, "ple_layer_ids": [2], "ple_embed_dim": 2560, "ngram_size": 3,
        "heads_per_ngram": 8, "ple_conv_kernel_size": 4, "ngram_vocab_size_base": 20_000_000,
        "make_ngram_vocab_size_divisible_by": 128, "output_gate_type": "sigmoid", "eos_token_id": 248044,
        "image_token_id": 248056,
    }


def describe(config_path: str | None = None) -> list:
    """Tensor name/shape list for a config.json (default: the real 48-layer model). CLI: python gguf_layout.py [config.json]"""
    if config_path:
        text, root = read_config(os.path.dirname(config_path) or ".")
    else:
        text = root = real_model_config()
    return main_tensor_specs(hparams_from_config(text, root))


if __name__ == "__main__":
    specs = describe(sys.argv[1] if len(sys.argv) > 1 else None)
    for name, ne in specs:
        print(f"{name:48s} {list(ne)}")
    print(f"{len(specs)} tensors")
