"""Converts a transformers `qwen4_exp` checkpoint to a qwen4exp GGUF in llama.cpp's layout (GGUF.md §1-§4).

Usage: python convert.py HF_DIR OUT.gguf --outtype f32|f16|bf16|q8_0|q2_0 [--mtp-out MTP.gguf] [--chat-template FILE]
       (--outtype iq2_xs is test-only: every quantized tensor gets random valid blocks of the IQ2_XS mix.)

Input: config.json, model.safetensors or sharded *.safetensors (+ index), per-expert or fused experts, the PLE table
as `ngram_embedding.shard_{s}` pieces (concatenated in ascending s) or one `ngram_embedding.weight`, names with or
without the `model.language_model.` prefix, optional tokenizer.json / tokenizer_config.json / chat_template.jinja /
generation_config.json.

MTP weights. transformers has no qwen4_exp MTP module, so the HF-side names are ours:
    mtp.fc_embedding.weight [H, H]            eh_proj input half 0 (applied to enorm(embed(next token)))
    mtp.fc_hidden.weight [H, H]               eh_proj input half 1 (applied to hnorm(trunk residual), per stream)
    mtp.pre_fc_norm_embedding.weight [H]      offset RMSNorm (stored as w, used as 1+w)
    mtp.pre_fc_norm_hidden.weight [n*H]       grouped offset RMSNorm over the n residual streams
    mtp.layers.0.*                            one attention-type decoder layer, same names as model.layers.N.*
    mtp.hyper_connection_mixer.{hc_norm,input_mix_weight_down,input_mix_weight_up}.weight   the draft's output mixer
They go to a separate GGUF (GGUF.md §2.6): blk.L + blk.L.nextn.* + token_embd + output, block_count L+1,
nextn_predict_layers 1, compress_ratios padded with 0.

Deviations from llama.cpp's converter, all deliberate:
* layer_types "indexed_attention" (what transformers saves) counts like "full_attention" for compress_ratios.
* layer_types that follow no full_attention_interval are written as attention.recurrent_layers (bool per block).
* output_gate_type other than sigmoid is refused (llama.cpp would silently use sigmoid).
* ffn_gate_inp_shexp is written 1-D {H}.
* q2_0 is a llama-quantize ftype, not a converter outtype: tensors llama-quantize never quantizes stay F32 (the
  §2.7 F32 set) or BF16 (indexer projections); token_embd and the PLE table Q4_K, output Q6_K, the rest Q2_0, each
  with the ne0 fallback (Q2_0→Q4_0, Q4_K→Q5_0, Q6_K→Q8_0, then F16). Q4_K/Q6_K use a simple min/max quantizer.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import struct
import sys

import numpy as np
import gguf
from gguf import GGUFValueType as VT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_layout import (ARCH, ConvertError, Hparams, hparams_from_config, main_tensor_specs,  # noqa: E402
                         mtp_tensor_specs, read_config)
from gguf_quant import FTYPES, TYPES, TypeChooser, encode, random_blocks  # noqa: E402
from gguf_vocab import tokenizer_metadata  # noqa: E402


class Checkpoint:
    """Tensor access by canonical HF name (`model.…`, `lm_head.…`, `mtp.…`) over one or many safetensors files."""

    def __init__(self, hf_dir: str):
        from safetensors import safe_open   # imported here: the installer's MTP conversion runs without it

        files = sorted(f for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
        if not files:
            raise ConvertError(f"no .safetensors files in {hf_dir}")
        self.where = {}
        self.handles = {}
        for fn in files:
            h = safe_open(os.path.join(hf_dir, fn), framework="pt")
            self.handles[fn] = h
            for k in h.keys():
                name = self.canonical(k)
                if name is not None:
                    self.where[name] = (fn, k)

    @staticmethod
    def canonical(name: str) -> str | None:
        if name.startswith("model.language_model."):
            return "model." + name[len("model.language_model."):]
        if name.startswith("model.visual.") or name.startswith("visual."):
            return None
        return name

    def has(self, name: str) -> bool:
        return name in self.where

    def raw(self, name: str) -> torch.Tensor:
        if name not in self.where:
            raise ConvertError(f"tensor {name!r} is missing from the checkpoint")
        fn, key = self.where[name]
        return self.handles[fn].get_tensor(key)

    def f32(self, name: str) -> np.ndarray:
        import torch

        return self.raw(name).to(torch.float32).numpy()

    def ints(self, name: str) -> list:
        import torch

        t = self.raw(name)
        if t.dtype != torch.int64:
            raise ConvertError(f"{name} has dtype {t.dtype}; the PLE constants must be int64 buffers")
        return [int(v) for v in t.tolist()]

    def names(self, prefix: str) -> list:
        return [n for n in self.where if n.startswith(prefix)]


# ---- transforms --------------------------------------------------------------------------------------------

def tile_heads(x: np.ndarray, nk: int, nv: int, axis: int = 0) -> np.ndarray:
    """HF grouped value-head order (h = g*rep + j) → llama.cpp tiled order (position j*nk + g), along `axis`
    whose length is nv * head_size."""
    rep = nv // nk
    x = np.moveaxis(x, axis, 0)
    hs = x.shape[0] // nv
    y = x.reshape(nk, rep, hs, *x.shape[1:]).swapaxes(0, 1).reshape(x.shape)
    return np.ascontiguousarray(np.moveaxis(y, 0, axis))


def _experts(ck: Checkpoint, p: str, E: int, I: int) -> tuple:
    """(gate [E,I,H], up [E,I,H], down [E,H,I]) from fused or per-expert tensors."""
    if ck.has(p + "experts.gate_up_proj"):
        gu = ck.f32(p + "experts.gate_up_proj")
        if gu.shape[1] != 2 * I:
            raise ConvertError(f"{p}experts.gate_up_proj has shape {gu.shape}, expected [E, {2 * I}, H]")
        return gu[:, :I], gu[:, I:], ck.f32(p + "experts.down_proj")
    stack = lambda w: np.stack([ck.f32(f"{p}experts.{e}.{w}.weight") for e in range(E)])  # noqa: E731
    return stack("gate_proj"), stack("up_proj"), stack("down_proj")


def _block_tensors(ck: Checkpoint, hp: Hparams, src: str, il: int, attention: bool, experts: bool = True) -> dict:
    """GGUF tensors of one trunk-style block from HF prefix `src` (e.g. 'model.layers.3.'); without the three
    ffn_*_exps tensors when experts is False."""
    out = {}
    b = f"blk.{il}."
    for hf, gg in (("attn_hyper_connection", "hc_attn"), ("mlp_hyper_connection", "hc_ffn")):
        out[b + gg + "_norm.weight"] = ck.f32(f"{src}{hf}.hc_norm.weight") + 1
        out[b + gg + "_down.weight"] = ck.f32(f"{src}{hf}.input_mix_weight_down.weight")
        out[b + gg + "_up.weight"] = ck.f32(f"{src}{hf}.input_mix_weight_up.weight")
        out[b + gg + "_inject.weight"] = ck.f32(f"{src}{hf}.block_inject_weight.weight")
    m = src + "mlp."
    out[b + "ffn_gate_inp.weight"] = ck.f32(m + "gate.weight")
    if experts:
        gate, up, down = _experts(ck, m, hp.n_expert, hp.expert_ff)
        out[b + "ffn_gate_exps.weight"], out[b + "ffn_up_exps.weight"], out[b + "ffn_down_exps.weight"] = gate, up, down
    out[b + "ffn_gate_inp_shexp.weight"] = ck.f32(m + "shared_expert_gate.weight").reshape(-1)
    out[b + "ffn_gate_shexp.weight"] = ck.f32(m + "shared_expert.gate_proj.weight")
    out[b + "ffn_up_shexp.weight"] = ck.f32(m + "shared_expert.up_proj.weight")
    out[b + "ffn_down_shexp.weight"] = ck.f32(m + "shared_expert.down_proj.weight")
    if attention:
        a = src + "self_attn."
        out[b + "attn_q.weight"] = ck.f32(a + "q_proj.weight")
        out[b + "attn_k.weight"] = ck.f32(a + "k_proj.weight")
        out[b + "attn_v.weight"] = ck.f32(a + "v_proj.weight")
        out[b + "attn_output.weight"] = ck.f32(a + "o_proj.weight")
        out[b + "attn_q_norm.weight"] = ck.f32(a + "q_norm.weight") + 1
        out[b + "attn_k_norm.weight"] = ck.f32(a + "k_norm.weight") + 1
        qk = ck.f32(a + "indexer.index_qk_proj.weight")
        nq = hp.idx_heads * hp.idx_head_dim
        if qk.shape[0] != nq + hp.idx_head_dim:
            raise ConvertError(f"{a}indexer.index_qk_proj has {qk.shape[0]} rows, expected {nq + hp.idx_head_dim}")
        out[b + "indexer.q_proj.weight"] = qk[:nq]
        out[b + "indexer.k_proj.weight"] = qk[nq:]
        out[b + "indexer.q_norm.weight"] = ck.f32(a + "indexer.q_layernorm.weight") + 1
        out[b + "indexer.k_norm.weight"] = ck.f32(a + "indexer.k_layernorm.weight") + 1
    else:
        g = src + "linear_attn."
        nk, nv, kd = hp.ssm_nk, hp.ssm_nv, hp.ssm_key_dim
        qkv = ck.f32(g + "in_proj_qkv.weight")
        out[b + "attn_qkv.weight"] = np.concatenate([qkv[:2 * kd], tile_heads(qkv[2 * kd:], nk, nv)])
        out[b + "attn_gate.weight"] = tile_heads(ck.f32(g + "in_proj_z.weight"), nk, nv)
        out[b + "ssm_beta.weight"] = tile_heads(ck.f32(g + "in_proj_b.weight"), nk, nv)
        out[b + "ssm_alpha.weight"] = tile_heads(ck.f32(g + "in_proj_a.weight"), nk, nv)
        conv = ck.f32(g + "conv1d.weight")[:, 0, :]
        out[b + "ssm_conv1d.weight"] = np.concatenate([conv[:2 * kd], tile_heads(conv[2 * kd:], nk, nv)])
        out[b + "ssm_dt.bias"] = tile_heads(ck.f32(g + "dt_bias"), nk, nv)
        # torch's exp, as llama.cpp's converter (numpy's float32 exp differs in the last ulp)
        import torch

        a = -torch.exp(ck.raw(g + "A_log").to(torch.float32))
        out[b + "ssm_a"] = tile_heads(a.numpy(), nk, nv)
        out[b + "ssm_norm.weight"] = ck.f32(g + "norm.weight")
        out[b + "ssm_out.weight"] = tile_heads(ck.f32(g + "out_proj.weight"), nk, nv, axis=1)
    return out


def _ple_table(ck: Checkpoint, p: str) -> np.ndarray:
    if ck.has(p + "ngram_embedding.weight"):
        return ck.f32(p + "ngram_embedding.weight")
    shards = {}
    for n in ck.names(p + "ngram_embedding.shard_"):
        m = re.fullmatch(re.escape(p) + r"ngram_embedding\.shard_(\d+)\.weight", n)
        if m:
            shards[int(m.group(1))] = n
    if not shards:
        raise ConvertError(f"no PLE table under {p}ngram_embedding")
    if sorted(shards) != list(range(len(shards))):
        raise ConvertError(f"PLE table shards are not contiguous from 0: {sorted(shards)}")
    parts = [ck.f32(shards[s]) for s in range(len(shards))]
    widths = {x.shape[1] for x in parts}
    if len(widths) != 1:
        raise ConvertError(f"PLE table shards disagree on the row width: {sorted(widths)}")
    return np.concatenate(parts)


def main_tensors(ck: Checkpoint, hp: Hparams) -> tuple[dict, dict]:
    """Returns ({gguf name: float32 array in numpy order}, {PLE constant name: int list})."""
    out = {"token_embd.weight": ck.f32("model.embed_tokens.weight")}
    if hp.has_output:
        out["output.weight"] = ck.f32("lm_head.weight")
    mix = "model.hyper_connection_mixer."
    out["output_hc_norm.weight"] = ck.f32(mix + "hc_norm.weight") + 1
    out["output_hc_down.weight"] = ck.f32(mix + "input_mix_weight_down.weight")
    out["output_hc_up.weight"] = ck.f32(mix + "input_mix_weight_up.weight")
    ple_consts = {}
    for il in range(hp.n_layer):
        src = f"model.layers.{il}."
        out.update(_block_tensors(ck, hp, src, il, hp.is_attention[il]))
        if il == hp.ple_layer:
            p = src + "ple."
            b = f"blk.{il}."
            out[b + "ple_key.weight"] = ck.f32(p + "key_proj.weight")
            out[b + "ple_value.weight"] = ck.f32(p + "value_proj.weight")
            for k in ("key", "query", "conv"):
                out[b + f"ple_norm_{k}.weight"] = ck.f32(p + f"norm_{k}.weight") + 1
            out[b + "ple_conv1d.weight"] = ck.f32(p + "conv1d.weight")[:, 0, :]
            out["per_layer_token_embd.weight"] = _ple_table(ck, p + "ple_embedding.")
            e = p + "ple_embedding."
            ple_consts = {"layer_multipliers": ck.ints(e + "layer_multipliers"),
                          "head_offsets": ck.ints(e + "ngram_heads_offsets"),
                          "head_vocab_sizes": ck.ints(e + "ngram_heads_vocab_sizes")}
    return out, ple_consts


def mtp_tensors(ck: Checkpoint, hp: Hparams) -> dict:
    out = {"token_embd.weight": ck.f32("model.embed_tokens.weight")}
    if hp.has_output:
        out["output.weight"] = ck.f32("lm_head.weight")
    out.update(mtp_block_tensors(ck, hp))
    return out


def mtp_block_tensors(ck, hp: Hparams, experts: bool = True) -> dict:
    """blk.L + blk.L.nextn.* from the mtp.* tensors alone (without ffn_*_exps when experts is False). `ck` is
    anything with Checkpoint's has/f32 (mtp_extract.py passes tensors fetched by byte range)."""
    L = hp.n_layer
    out = _block_tensors(ck, hp, "mtp.layers.0.", L, attention=True, experts=experts)
    n = f"blk.{L}.nextn."
    out[n + "eh_proj.weight"] = np.concatenate([ck.f32("mtp.fc_embedding.weight"), ck.f32("mtp.fc_hidden.weight")],
                                               axis=1)
    out[n + "enorm.weight"] = ck.f32("mtp.pre_fc_norm_embedding.weight") + 1
    out[n + "hnorm.weight"] = ck.f32("mtp.pre_fc_norm_hidden.weight") + 1
    out[n + "hc_head_norm.weight"] = ck.f32("mtp.hyper_connection_mixer.hc_norm.weight") + 1
    out[n + "hc_head_down.weight"] = ck.f32("mtp.hyper_connection_mixer.input_mix_weight_down.weight")
    out[n + "hc_head_up.weight"] = ck.f32("mtp.hyper_connection_mixer.input_mix_weight_up.weight")
    return out


# ---- metadata ----------------------------------------------------------------------------------------------

def model_metadata(hp: Hparams, ple_consts: dict, outtype: str, name: str, mtp: bool, hf_dir: str) -> list:
    """[(key, value, value type, array element type or None)] for GGUF.md §1."""
    a = ARCH
    u32 = lambda k, v: (k, int(v), VT.UINT32, None)  # noqa: E731
    n_blocks = hp.n_layer + (1 if mtp else 0)
    ratios = [hp.compress_ratio if attn else 0 for attn in hp.is_attention] + ([0] if mtp else [])
    kv = [("general.architecture", a, VT.STRING, None), ("general.name", name, VT.STRING, None),
          u32("general.file_type", FTYPES[outtype]), u32("general.quantization_version", 2)]
    gen_path = os.path.join(hf_dir, "generation_config.json")
    if os.path.exists(gen_path):
        with open(gen_path) as f:
            gen = json.load(f)
        if "temperature" in gen:
            kv.append(("general.sampling.temp", float(gen["temperature"]), VT.FLOAT32, None))
        if "top_p" in gen:
            kv.append(("general.sampling.top_p", float(gen["top_p"]), VT.FLOAT32, None))
        if "top_k" in gen:
            kv.append(("general.sampling.top_k", int(gen["top_k"]), VT.INT32, None))
    kv += [u32(f"{a}.block_count", n_blocks), u32(f"{a}.context_length", hp.ctx_len),
           u32(f"{a}.embedding_length", hp.n_embd),
           u32(f"{a}.attention.head_count", hp.n_head), u32(f"{a}.attention.head_count_kv", hp.n_head_kv),
           u32(f"{a}.attention.key_length", hp.head_dim), u32(f"{a}.attention.value_length", hp.head_dim),
           (f"{a}.attention.layer_norm_rms_epsilon", hp.rms_eps, VT.FLOAT32, None),
           (f"{a}.rope.freq_base", hp.rope_theta, VT.FLOAT32, None),
           u32(f"{a}.rope.dimension_count", hp.n_rot),
           (f"{a}.rope.dimension_sections", list(hp.mrope_sections), VT.ARRAY, VT.INT32),
           u32(f"{a}.expert_count", hp.n_expert), u32(f"{a}.expert_used_count", hp.n_expert_used),
           u32(f"{a}.expert_feed_forward_length", hp.expert_ff),
           u32(f"{a}.expert_shared_feed_forward_length", hp.shexp_ff),
           u32(f"{a}.ssm.conv_kernel", hp.ssm_conv_kernel), u32(f"{a}.ssm.state_size", hp.ssm_dk),
           u32(f"{a}.ssm.group_count", hp.ssm_nk), u32(f"{a}.ssm.time_step_rank", hp.ssm_nv),
           u32(f"{a}.ssm.inner_size", hp.ssm_value_dim), u32(f"{a}.full_attention_interval", hp.attn_interval),
           u32(f"{a}.hyper_connection.count", hp.hc), u32(f"{a}.hyper_connection.low_rank", hp.hc_lowrank),
           u32(f"{a}.attention.indexer.head_count", hp.idx_heads),
           u32(f"{a}.attention.indexer.key_length", hp.idx_head_dim),
           u32(f"{a}.attention.indexer.top_k", hp.idx_top_k),
           (f"{a}.attention.compress_ratios", ratios, VT.ARRAY, VT.INT32)]
    if hp.is_attention != [(i + 1) % hp.attn_interval == 0 for i in range(hp.n_layer)]:
        recurrent = [not attn for attn in hp.is_attention] + ([False] if mtp else [])
        kv.append((f"{a}.attention.recurrent_layers", recurrent, VT.ARRAY, VT.BOOL))
    if hp.ple_layer is not None:
        kv += [(f"{a}.ple.layers", [hp.ple_layer], VT.ARRAY, VT.INT32), u32(f"{a}.ple.ngram_size", hp.ple_ngram),
               u32(f"{a}.ple.heads_per_ngram", hp.ple_heads_per_ngram),
               u32(f"{a}.ple.conv_kernel", hp.ple_conv_kernel), u32(f"{a}.ple.eos_token_id", hp.ple_eos)]
        if hp.image_token_id is not None:
            kv.append(u32(f"{a}.ple.image_token_id", hp.image_token_id))
        kv.append(u32(f"{a}.embedding_length_per_layer_input", hp.ple_row_width))
        for key in ("layer_multipliers", "head_offsets", "head_vocab_sizes"):
            kv.append((f"{a}.ple.{key}", ple_consts[key], VT.ARRAY, VT.UINT64))
    if mtp:
        kv.append(u32(f"{a}.nextn_predict_layers", 1))
    return kv


def tokenizer_kv(meta: dict) -> list:
    kv = []
    for k, v in meta.items():
        if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
            kv.append((k, v, VT.ARRAY, VT.STRING))
        elif k == "tokenizer.ggml.token_type":
            kv.append((k, v, VT.ARRAY, VT.INT32))
        elif k == "tokenizer.ggml.add_bos_token":
            kv.append((k, v, VT.BOOL, None))
        elif k.endswith("_token_id"):
            kv.append((k, int(v), VT.UINT32, None))
        else:
            kv.append((k, v, VT.STRING, None))
    return kv


class _Writer(gguf.GGUFWriter):
    """GGUFWriter with a vectorised packer for large typed arrays (248k tokens and merges per file)."""

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if vtype != VT.ARRAY or sub_type not in (VT.STRING, VT.INT32, VT.UINT64):
            return super()._pack_val(val, vtype, add_vtype, sub_type)
        head = (struct.pack("<I", vtype) if add_vtype else b"") + struct.pack("<IQ", sub_type, len(val))
        if sub_type == VT.STRING:
            enc = [v.encode("utf-8") for v in val]
            return head + b"".join(struct.pack("<Q", len(e)) + e for e in enc)
        return head + np.asarray(val, dtype="<i4" if sub_type == VT.INT32 else "<u8").tobytes()


def write_gguf(path: str, kv: list, specs: list, tensors: dict, outtype: str, n_layer: int, seed: int = 0) -> dict:
    """Writes the file; returns {tensor name: ggml type name}. Checks the tensors against the layout specs."""
    names = [n for n, _ in specs]
    if set(names) != set(tensors):
        raise ConvertError(f"tensor set differs from the layout: missing {sorted(set(names) - set(tensors))}, "
                           f"extra {sorted(set(tensors) - set(names))}")
    chooser = TypeChooser(outtype, n_layer)
    rng = np.random.default_rng(seed)
    w = _Writer(path, arch=None)
    for key, val, vt, sub in kv:
        w.add_key_value(key, val, vt, sub_type=sub)
    types = {}
    for name, ne in specs:
        x = tensors[name]
        if tuple(reversed(x.shape)) != tuple(ne):
            raise ConvertError(f"{name}: converted shape ne={list(reversed(x.shape))}, layout says {list(ne)}")
        t = chooser.choose(name, ne)
        types[name] = t
        if outtype == "iq2_xs" and TYPES[t][1] > 1:
            data = random_blocks(t, x.shape, rng)
        else:
            data = encode(x, t)
        if data.dtype == np.uint8 and TYPES[t][0] not in gguf.GGML_QUANT_SIZES:
            # a type gguf-py does not know (Q2_0): pass the element shape and the raw id
            w.add_tensor(name, data.view(np.int8), raw_shape=x.shape, raw_dtype=TYPES[t][0])
        elif data.dtype == np.uint8:
            w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType(TYPES[t][0]))
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types


def convert(hf_dir: str, out_path: str, outtype: str = "f32", mtp_out: str | None = None,
            chat_template: str | None = None, name: str | None = None) -> dict:
    """Python entry point; returns {'types': {...}, 'mtp_types': {...} or None, 'warnings': [...]}."""
    if outtype not in FTYPES:
        raise ConvertError(f"unknown outtype {outtype!r}; expected one of {sorted(FTYPES)}")
    text, root = read_config(hf_dir)
    ck = Checkpoint(hf_dir)
    hp = hparams_from_config(text, root, has_output=ck.has("lm_head.weight"))
    for msg in hp.warnings:
        print(f"convert.py: warning: {msg}", file=sys.stderr)
    tensors, ple_consts = main_tensors(ck, hp)
    if hp.ple_layer is not None:
        got = tensors["per_layer_token_embd.weight"].shape
        if got != (hp.ple_rows, hp.ple_row_width):
            raise ConvertError(f"PLE table is {list(got)} rows×width, the config implies "
                               f"[{hp.ple_rows}, {hp.ple_row_width}]")
        heads = hp.ple_heads
        for key, want in (("layer_multipliers", hp.ple_ngram), ("head_offsets", heads), ("head_vocab_sizes", heads)):
            if len(ple_consts[key]) != want:
                raise ConvertError(f"PLE {key} has {len(ple_consts[key])} entries, expected {want}")
    name = name or os.path.basename(os.path.normpath(hf_dir))
    tok = tokenizer_metadata(hf_dir, hp.n_vocab, text if "eos_token_id" in text else root)
    tok_kv = tokenizer_kv(tok) if tok else []
    if chat_template is not None:
        with open(chat_template, encoding="utf-8") as f:
            tpl = f.read()
        tok_kv = [e for e in tok_kv if e[0] != "tokenizer.chat_template"]
        tok_kv.append(("tokenizer.chat_template", tpl, VT.STRING, None))
    kv = model_metadata(hp, ple_consts, outtype, name, False, hf_dir) + tok_kv
    types = write_gguf(out_path, kv, main_tensor_specs(hp), tensors, outtype, hp.n_layer)
    mtp_types = None
    if mtp_out:
        if not ck.has("mtp.fc_embedding.weight"):
            raise ConvertError(f"--mtp-out given but the checkpoint has no mtp.* weights")
        kv = model_metadata(hp, ple_consts, outtype, name + " MTP", True, hf_dir) + tok_kv
        mtp_types = write_gguf(mtp_out, kv, mtp_tensor_specs(hp), mtp_tensors(ck, hp), outtype, hp.n_layer + 1,
                               seed=1)
    return {"types": types, "mtp_types": mtp_types, "warnings": hp.warnings}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", default="f32", choices=sorted(FTYPES))
    ap.add_argument("--mtp-out")
    ap.add_argument("--chat-template", help="Jinja file written as tokenizer.chat_template (overrides the checkpoint's)")
    ap.add_argument("--name", help="general.name (default: the checkpoint directory name)")
    args = ap.parse_args(argv)
    try:
        r = convert(args.hf_dir, args.out, args.outtype, args.mtp_out, args.chat_template, args.name)
    except ConvertError as e:
        print(f"convert.py: error: {e}", file=sys.stderr)
        return 2
    counts = {}
    for t in r["types"].values():
        counts[t] = counts.get(t, 0) + 1
    print(f"wrote {args.out}: {len(r['types'])} tensors {counts}")
    if args.mtp_out:
        print(f"wrote {args.mtp_out}: {len(r['mtp_types'])} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
