# Expected GGUF tensors computed from the transformers model itself (fused experts, concatenated PLE table),
# written from GGUF.md §2 independently of convert.py.
import json
import os

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def tiled_index(nk: int, nv: int, head_size: int) -> torch.Tensor:
    """GGUF value head p holds HF head (p mod nk)·rep + p div nk (tiled, not interleaved)."""
    rep = nv // nk
    idx = []
    for p in range(nv):
        h = (p % nk) * rep + p // nk
        idx += range(h * head_size, (h + 1) * head_size)
    return torch.tensor(idx)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).numpy().copy()


def load_hf(hf_dir: str):
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    return model.config, model.state_dict()


def block(sd: dict, cfg, src: str, il: int, attention: bool) -> dict:
    out, b = {}, f"blk.{il}."
    for hf, gg in (("attn_hyper_connection", "hc_attn"), ("mlp_hyper_connection", "hc_ffn")):
        out[f"{b}{gg}_norm.weight"] = _np(sd[f"{src}{hf}.hc_norm.weight"] + 1)
        out[f"{b}{gg}_down.weight"] = _np(sd[f"{src}{hf}.input_mix_weight_down.weight"])
        out[f"{b}{gg}_up.weight"] = _np(sd[f"{src}{hf}.input_mix_weight_up.weight"])
        out[f"{b}{gg}_inject.weight"] = _np(sd[f"{src}{hf}.block_inject_weight.weight"])
    I = cfg.moe_intermediate_size
    gu = sd[f"{src}mlp.experts.gate_up_proj"]
    out[b + "ffn_gate_inp.weight"] = _np(sd[f"{src}mlp.gate.weight"])
    out[b + "ffn_gate_exps.weight"] = _np(gu[:, :I, :])
    out[b + "ffn_up_exps.weight"] = _np(gu[:, I:, :])
    out[b + "ffn_down_exps.weight"] = _np(sd[f"{src}mlp.experts.down_proj"])
    out[b + "ffn_gate_inp_shexp.weight"] = _np(sd[f"{src}mlp.shared_expert_gate.weight"][0])
    for w in ("gate", "up", "down"):
        out[f"{b}ffn_{w}_shexp.weight"] = _np(sd[f"{src}mlp.shared_expert.{w}_proj.weight"])
    if attention:
        a = src + "self_attn."
        for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")):
            out[f"{b}{gg}.weight"] = _np(sd[f"{a}{hf}.weight"])
        out[b + "attn_q_norm.weight"] = _np(sd[a + "q_norm.weight"] + 1)
        out[b + "attn_k_norm.weight"] = _np(sd[a + "k_norm.weight"] + 1)
        qk = sd[a + "indexer.index_qk_proj.weight"]
        nq = cfg.indexer_n_heads * cfg.indexer_head_dim
        out[b + "indexer.q_proj.weight"] = _np(qk[:nq])
        out[b + "indexer.k_proj.weight"] = _np(qk[nq:])
        out[b + "indexer.q_norm.weight"] = _np(sd[a + "indexer.q_layernorm.weight"] + 1)
        out[b + "indexer.k_norm.weight"] = _np(sd[a + "indexer.k_layernorm.weight"] + 1)
    else:
        g = src + "linear_attn."
        nk, nv, dk, dv = (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                          cfg.linear_value_head_dim)
        kd = nk * dk
        vrows = tiled_index(nk, nv, dv)
        heads = tiled_index(nk, nv, 1)
        qkv_rows = torch.cat([torch.arange(2 * kd), 2 * kd + vrows])
        out[b + "attn_qkv.weight"] = _np(sd[g + "in_proj_qkv.weight"][qkv_rows])
        out[b + "attn_gate.weight"] = _np(sd[g + "in_proj_z.weight"][vrows])
        out[b + "ssm_beta.weight"] = _np(sd[g + "in_proj_b.weight"][heads])
        out[b + "ssm_alpha.weight"] = _np(sd[g + "in_proj_a.weight"][heads])
        out[b + "ssm_conv1d.weight"] = _np(sd[g + "conv1d.weight"][:, 0, :][qkv_rows])
        out[b + "ssm_dt.bias"] = _np(sd[g + "dt_bias"][heads])
        out[b + "ssm_a"] = _np(-torch.exp(sd[g + "A_log"])[heads])
        out[b + "ssm_norm.weight"] = _np(sd[g + "norm.weight"])
        out[b + "ssm_out.weight"] = _np(sd[g + "out_proj.weight"][:, vrows])
    return out


def expected_main(hf_dir: str) -> tuple:
    """({gguf name: float32 array}, {PLE constant: int list}, config)"""
    cfg, sd = load_hf(hf_dir)
    out = {"token_embd.weight": _np(sd["model.embed_tokens.weight"]), "output.weight": _np(sd["lm_head.weight"]),
           "output_hc_norm.weight": _np(sd["model.hyper_connection_mixer.hc_norm.weight"] + 1),
           "output_hc_down.weight": _np(sd["model.hyper_connection_mixer.input_mix_weight_down.weight"]),
           "output_hc_up.weight": _np(sd["model.hyper_connection_mixer.input_mix_weight_up.weight"])}
    consts = {}
    for il, kind in enumerate(cfg.layer_types):
        src = f"model.layers.{il}."
        out.update(block(sd, cfg, src, il, kind != "linear_attention"))
        if il + 1 in cfg.ple_layer_ids:
            p, b = src + "ple.", f"blk.{il}."
            out[b + "ple_key.weight"] = _np(sd[p + "key_proj.weight"])
            out[b + "ple_value.weight"] = _np(sd[p + "value_proj.weight"])
            for k in ("key", "query", "conv"):
                out[f"{b}ple_norm_{k}.weight"] = _np(sd[f"{p}norm_{k}.weight"] + 1)
            out[b + "ple_conv1d.weight"] = _np(sd[p + "conv1d.weight"][:, 0, :])
            out["per_layer_token_embd.weight"] = _np(sd[p + "ple_embedding.ngram_embedding.weight"])
            e = p + "ple_embedding."
            consts = {"layer_multipliers": sd[e + "layer_multipliers"].tolist(),
                      "head_offsets": sd[e + "ngram_heads_offsets"].tolist(),
                      "head_vocab_sizes": sd[e + "ngram_heads_vocab_sizes"].tolist()}
    return out, consts, cfg


def expected_mtp(hf_dir: str) -> dict:
    """The MTP file's tensors, from the raw mtp.* safetensors entries (transformers drops them on load)."""
    cfg, sd = load_hf(hf_dir)
    raw = load_file(os.path.join(hf_dir, "model.safetensors"))
    mtp = {k: v for k, v in raw.items() if k.startswith("mtp.")}
    E = cfg.num_experts
    p = "mtp.layers.0.mlp.experts."
    mtp[p + "gate_up_proj"] = torch.stack([torch.cat([mtp[f"{p}{e}.gate_proj.weight"], mtp[f"{p}{e}.up_proj.weight"]])
                                           for e in range(E)])
    mtp[p + "down_proj"] = torch.stack([mtp[f"{p}{e}.down_proj.weight"] for e in range(E)])
    L = cfg.num_hidden_layers
    out = {"token_embd.weight": _np(sd["model.embed_tokens.weight"]), "output.weight": _np(sd["lm_head.weight"])}
    out.update(block(mtp, cfg, "mtp.layers.0.", L, True))
    n = f"blk.{L}.nextn."
    out[n + "eh_proj.weight"] = _np(torch.cat([mtp["mtp.fc_embedding.weight"], mtp["mtp.fc_hidden.weight"]], dim=1))
    out[n + "enorm.weight"] = _np(mtp["mtp.pre_fc_norm_embedding.weight"] + 1)
    out[n + "hnorm.weight"] = _np(mtp["mtp.pre_fc_norm_hidden.weight"] + 1)
    out[n + "hc_head_norm.weight"] = _np(mtp["mtp.hyper_connection_mixer.hc_norm.weight"] + 1)
    out[n + "hc_head_down.weight"] = _np(mtp["mtp.hyper_connection_mixer.input_mix_weight_down.weight"])
    out[n + "hc_head_up.weight"] = _np(mtp["mtp.hyper_connection_mixer.input_mix_weight_up.weight"])
    return out


def hf_config_json(hf_dir: str) -> dict:
    with open(os.path.join(hf_dir, "config.json")) as f:
        return json.load(f)
