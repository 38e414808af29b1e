# The inverse of convert.py for parity tests: a qwen4exp GGUF of any type, dequantized, as a transformers
# Qwen4ExpForCausalLM state dict (runtime names: fused experts, one ngram_embedding table).
from __future__ import annotations

import numpy as np
import torch

from gguf_layout import hparams_from_config, read_config
from gguf_read import GGUFFile


def untile_heads(x: np.ndarray, nk: int, nv: int, axis: int = 0) -> np.ndarray:
    """Tiled value-head order (position j*nk + g) back to HF grouped order (head g*rep + j)."""
    rep = nv // nk
    x = np.moveaxis(x, axis, 0)
    hs = x.shape[0] // nv
    y = x.reshape(rep, nk, hs, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
    return np.ascontiguousarray(np.moveaxis(y, 0, axis))


def hf_state_dict(gguf_path: str, hf_dir: str) -> dict:
    """{transformers parameter name: float32 tensor} holding the GGUF's (dequantized) weights.
    Use with model.load_state_dict(sd, strict=False); only the non-persistent buffers are left out."""
    text, root = read_config(hf_dir)
    hp = hparams_from_config(text, root)
    f = GGUFFile(gguf_path)
    g = f.tensor_f32
    sd = {"model.embed_tokens.weight": g("token_embd.weight"), "lm_head.weight": g("output.weight")}
    mix = "model.hyper_connection_mixer."
    sd[mix + "hc_norm.weight"] = g("output_hc_norm.weight") - 1
    sd[mix + "input_mix_weight_down.weight"] = g("output_hc_down.weight")
    sd[mix + "input_mix_weight_up.weight"] = g("output_hc_up.weight")
    nk, nv, kd = hp.ssm_nk, hp.ssm_nv, hp.ssm_key_dim
    for il in range(hp.n_layer):
        b, p = f"blk.{il}.", f"model.layers.{il}."
        for hf, gg in (("attn_hyper_connection", "hc_attn"), ("mlp_hyper_connection", "hc_ffn")):
            sd[f"{p}{hf}.hc_norm.weight"] = g(f"{b}{gg}_norm.weight") - 1
            sd[f"{p}{hf}.input_mix_weight_down.weight"] = g(f"{b}{gg}_down.weight")
            sd[f"{p}{hf}.input_mix_weight_up.weight"] = g(f"{b}{gg}_up.weight")
            sd[f"{p}{hf}.block_inject_weight.weight"] = g(f"{b}{gg}_inject.weight")
        m = p + "mlp."
        sd[m + "gate.weight"] = g(b + "ffn_gate_inp.weight")
        sd[m + "experts.gate_up_proj"] = np.concatenate([g(b + "ffn_gate_exps.weight"), g(b + "ffn_up_exps.weight")],
                                                        axis=1)
        sd[m + "experts.down_proj"] = g(b + "ffn_down_exps.weight")
        sd[m + "shared_expert_gate.weight"] = g(b + "ffn_gate_inp_shexp.weight").reshape(1, -1)
        for w in ("gate", "up", "down"):
            sd[f"{m}shared_expert.{w}_proj.weight"] = g(f"{b}ffn_{w}_shexp.weight")
        if hp.is_attention[il]:
            a = p + "self_attn."
            for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                           ("o_proj", "attn_output")):
                sd[f"{a}{hf}.weight"] = g(f"{b}{gg}.weight")
            sd[a + "q_norm.weight"] = g(b + "attn_q_norm.weight") - 1
            sd[a + "k_norm.weight"] = g(b + "attn_k_norm.weight") - 1
            sd[a + "indexer.index_qk_proj.weight"] = np.concatenate([g(b + "indexer.q_proj.weight"),
                                                                     g(b + "indexer.k_proj.weight")])
            sd[a + "indexer.q_layernorm.weight"] = g(b + "indexer.q_norm.weight") - 1
            sd[a + "indexer.k_layernorm.weight"] = g(b + "indexer.k_norm.weight") - 1
        else:
            la = p + "linear_attn."
            qkv = g(b + "attn_qkv.weight")
            sd[la + "in_proj_qkv.weight"] = np.concatenate([qkv[:2 * kd], untile_heads(qkv[2 * kd:], nk, nv)])
            sd[la + "in_proj_z.weight"] = untile_heads(g(b + "attn_gate.weight"), nk, nv)
            sd[la + "in_proj_b.weight"] = untile_heads(g(b + "ssm_beta.weight"), nk, nv)
            sd[la + "in_proj_a.weight"] = untile_heads(g(b + "ssm_alpha.weight"), nk, nv)
            conv = g(b + "ssm_conv1d.weight")
            conv = np.concatenate([conv[:2 * kd], untile_heads(conv[2 * kd:], nk, nv)])
            sd[la + "conv1d.weight"] = conv[:, None, :]
            sd[la + "dt_bias"] = untile_heads(g(b + "ssm_dt.bias"), nk, nv)
            sd[la + "A_log"] = untile_heads(torch.log(-torch.from_numpy(g(b + "ssm_a"))).numpy(), nk, nv)
            sd[la + "norm.weight"] = g(b + "ssm_norm.weight")
            sd[la + "out_proj.weight"] = untile_heads(g(b + "ssm_out.weight"), nk, nv, axis=1)
        if il == hp.ple_layer:
            q = p + "ple."
            sd[q + "key_proj.weight"] = g(b + "ple_key.weight")
            sd[q + "value_proj.weight"] = g(b + "ple_value.weight")
            for k in ("key", "query", "conv"):
                sd[f"{q}norm_{k}.weight"] = g(f"{b}ple_norm_{k}.weight") - 1
            sd[q + "conv1d.weight"] = g(b + "ple_conv1d.weight")[:, None, :]
            sd[q + "ple_embedding.ngram_embedding.weight"] = g("per_layer_token_embd.weight")
    out = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in sd.items()}
    if hp.ple_layer is not None:
        e = f"model.layers.{hp.ple_layer}.ple.ple_embedding."
        for hf, key in (("layer_multipliers", "layer_multipliers"), ("ngram_heads_offsets", "head_offsets"),
                        ("ngram_heads_vocab_sizes", "head_vocab_sizes")):
            out[e + hf] = torch.tensor(f.value(f"qwen4exp.ple.{key}"), dtype=torch.int64)
    return out
