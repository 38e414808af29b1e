# Per-tensor ggml type choice (GGUF.md §2.7 converter rules, §4.2 quantize rules with the shape fallback) and
# the encoders: gguf-py's quantizers, our Q2_0 (type 42), simple Q4_K/Q6_K, and random-but-valid blocks.
from __future__ import annotations

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

Q2_0 = 42  # GGML_TYPE_Q2_0; not in gguf-py 0.19's enum
# name -> (ggml type id, block size, bytes per block)
TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
    "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
    "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "IQ2_XXS": (16, 256, 66),
    "IQ2_XS": (17, 256, 74), "IQ3_XXS": (18, 256, 98), "IQ1_S": (19, 256, 50), "IQ4_NL": (20, 32, 18),
    "IQ3_S": (21, 256, 110), "IQ2_S": (22, 256, 82), "IQ4_XS": (23, 256, 136), "BF16": (30, 1, 2),
    "Q2_0": (Q2_0, 64, 18),
}
TYPE_NAMES = {v[0]: k for k, v in TYPES.items()}

# llama_model_ftype values written as general.file_type
FTYPES = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32, "q2_0": 41, "iq2_xs": 20}

# llama-quantize's fallback when ne0 is not a multiple of the block size (then F16).
FALLBACK = {"IQ2_XXS": "IQ4_NL", "IQ2_XS": "IQ4_NL", "IQ2_S": "IQ4_NL", "IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL",
            "IQ1_S": "IQ4_NL", "IQ4_XS": "IQ4_NL", "Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q2_0": "Q4_0",
            "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def fits(type_name: str, ne0: int) -> bool:
    return ne0 % TYPES[type_name][1] == 0


def with_fallback(type_name: str, ne0: int) -> str:
    while not fits(type_name, ne0):
        type_name = FALLBACK.get(type_name, "F16")
    return type_name


def forced_f32(name: str, ne: tuple) -> bool:
    """GGUF.md §2.7: tensors the converter always writes as F32."""
    return (len(ne) == 1 or name.endswith("_norm.weight") or not name.endswith(".weight")
            or "ffn_gate_inp.weight" in name or "ffn_gate_inp_shexp" in name or "ssm_conv1d" in name)


def never_quantized(name: str, ne: tuple) -> bool:
    """GGUF.md §4.2: tensors llama-quantize leaves in their source type."""
    return (forced_f32(name, ne) or "indexer.q_proj.weight" in name or "indexer.k_proj.weight" in name)


class TypeChooser:
    """Chooses the ggml type of each tensor for one output type. Stateful: the IQ2_XS mix counts ffn_down tensors."""

    def __init__(self, outtype: str, n_layer: int):
        if outtype not in FTYPES:
            raise ValueError(f"unknown outtype {outtype!r}; expected one of {sorted(FTYPES)}")
        self.outtype = outtype
        self.n_layer = n_layer
        self.i_ffn_down = 0

    def choose(self, name: str, ne: tuple) -> str:
        ne0 = ne[0]
        if self.outtype == "f32" or forced_f32(name, ne):
            return "F32"
        if self.outtype in ("f16", "bf16"):
            return self.outtype.upper()
        if self.outtype == "q8_0":
            return "Q8_0" if fits("Q8_0", ne0) else "F16"   # convert_hf_to_gguf's Q8_0 fallback
        # llama-quantize ftypes, applied to a BF16 source file
        if never_quantized(name, ne):
            return "BF16"
        if self.outtype == "q2_0":
            if name == "token_embd.weight" or name.startswith("per_layer_token_embd"):
                t = "Q4_K"
            elif name == "output.weight":
                t = "Q6_K"
            else:
                t = "Q2_0"
            return with_fallback(t, ne0)
        return with_fallback(self._iq2_xs(name), ne0)

    def _iq2_xs(self, name: str) -> str:
        """GGUF.md §4.2, IQ2_XS column."""
        if name == "token_embd.weight" or name.startswith("per_layer_token_embd"):
            return "Q2_K"
        if name == "output.weight":
            return "Q5_K"
        if "attn_qkv" in name or "attn_v.weight" in name:
            return "Q4_K"
        if "ffn_down" in name:
            t = "Q2_K" if self.i_ffn_down < max(1, (2 * self.n_layer) // 8) else "IQ2_XS"
            self.i_ffn_down += 1
            return t
        return "IQ2_XS"


# ---- Q2_0 -------------------------------------------------------------------------------------------------

def quantize_q2_0(x: np.ndarray) -> np.ndarray:
    """Reference Q2_0: d = max|x| per 64 weights, code = clamp(round(x/d)+1, 0, 3). Returns uint8 rows of bytes."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float32)
    nb = rows.shape[1] // 64
    blocks = rows.reshape(-1, nb, 64)
    d = np.abs(blocks).max(axis=-1, keepdims=True)
    ratio = np.divide(blocks, d, out=np.zeros_like(blocks), where=d > 0)
    codes = np.clip(np.round(ratio) + 1, 0, 3).astype(np.uint8)
    codes = codes.reshape(*codes.shape[:-1], 16, 4)
    qs = codes[..., 0] | (codes[..., 1] << 2) | (codes[..., 2] << 4) | (codes[..., 3] << 6)
    dh = d.astype(np.float16).view(np.uint8)
    out = np.concatenate([dh, qs], axis=-1)
    return out.reshape(*x.shape[:-1], nb * 18)


def dequantize_q2_0(raw: np.ndarray, ne0: int) -> np.ndarray:
    b = raw.reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)
    qs = b[:, 2:]
    codes = np.stack([(qs >> (2 * k)) & 3 for k in range(4)], axis=-1).reshape(-1, 64)
    return ((codes.astype(np.float32) - 1) * d).reshape(-1, ne0)


# ---- K-quants that gguf-py cannot quantize (simple, not llama.cpp's optimising search) -------------------

def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    rows = x.reshape(-1, x.shape[-1]).astype(np.float32)
    sub = rows.reshape(-1, 8, 32)                                 # [blocks, 8 sub-blocks, 32]
    mn = np.minimum(sub.min(axis=-1), 0)                          # [B, 8]
    scale = (sub.max(axis=-1) - mn) / 15
    d = scale.max(axis=-1) / 63                                   # [B]
    dmin = (-mn).max(axis=-1) / 63
    d16, dmin16 = d.astype(np.float16), dmin.astype(np.float16)
    df, dminf = d16.astype(np.float32)[:, None], dmin16.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), 0, 63).astype(np.uint8)
    m = np.clip(np.round(np.divide(-mn, dminf, out=np.zeros_like(mn), where=dminf > 0)), 0, 63).astype(np.uint8)
    eff_d = (df * sc)[..., None]
    eff_m = (dminf * m)[..., None]
    q = np.clip(np.round(np.divide(sub + eff_m, eff_d, out=np.zeros_like(sub), where=eff_d > 0)), 0, 15)
    q = q.astype(np.uint8)                                        # [B, 8, 32]
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)   # pairs of sub-blocks share 32 bytes
    scales = np.zeros((len(sub), 12), np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    out = np.concatenate([d16[:, None].view(np.uint8), dmin16[:, None].view(np.uint8), scales, qs], axis=-1)
    return out.reshape(*x.shape[:-1], (x.shape[-1] // 256) * 144)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    rows = x.reshape(-1, x.shape[-1]).astype(np.float32)
    sub = rows.reshape(-1, 16, 16)
    amax = np.abs(sub).max(axis=-1)                               # [B, 16]
    scale = amax / 31
    d = np.abs(scale).max(axis=-1) / 127
    d16 = d.astype(np.float16)
    df = d16.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), -128, 127).astype(np.int8)
    eff = (df * sc)[..., None]
    q = np.clip(np.round(np.divide(sub, eff, out=np.zeros_like(sub), where=eff > 0)) + 32, 0, 63).astype(np.uint8)
    q = q.reshape(-1, 2, 4, 32)                                   # [B, half, quarter, 32]: element 128h + 32k + l
    ql = np.concatenate([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4),
                         (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], axis=-1).reshape(-1, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6))
    out = np.concatenate([ql, qh.reshape(-1, 64), sc.view(np.uint8), d16[:, None].view(np.uint8)], axis=-1)
    return out.reshape(*x.shape[:-1], (x.shape[-1] // 256) * 210)


# ---- random valid blocks (test-only formats) -----------------------------------------------------------

# byte offsets of the fp16 scale fields inside one block
_FP16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
                "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ2_XXS": [0], "IQ2_XS": [0],
                "IQ3_XXS": [0], "IQ1_S": [0], "IQ4_NL": [0], "IQ3_S": [0], "IQ2_S": [0], "IQ4_XS": [0],
                "Q2_0": [0]}


def random_blocks(type_name: str, np_shape: tuple, rng: np.random.Generator, target_std: float = 0.05) -> np.ndarray:
    """Random bytes with finite fp16 scales: a valid tensor of any block format (every code is legal).
    The scales are set so that the dequantized values have about target_std (dequantization is linear in them)."""
    _, bs, nbytes = TYPES[type_name]
    n_blocks = int(np.prod(np_shape)) // bs
    raw = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
    d = rng.uniform(0.5, 1.0, size=(n_blocks, len(_FP16_FIELDS[type_name])))
    probe = raw.copy()
    for k, off in enumerate(_FP16_FIELDS[type_name]):
        probe[:, off:off + 2] = d[:, k].astype(np.float16).view(np.uint8).reshape(-1, 2)
    std = float(dequantize(probe, type_name, (n_blocks, bs)).std()) or 1.0
    for k, off in enumerate(_FP16_FIELDS[type_name]):
        raw[:, off:off + 2] = (d[:, k] * target_std / std).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(*np_shape[:-1], np_shape[-1] // bs * nbytes)


# ---- encoding ----------------------------------------------------------------------------------------------

def encode(x: np.ndarray, type_name: str) -> np.ndarray:
    """x: float32 in numpy order (ne0 last). Returns the array for GGUFWriter.add_tensor (uint8 for block types)."""
    if type_name == "F32":
        return np.ascontiguousarray(x, dtype=np.float32)
    if type_name == "F16":
        return np.ascontiguousarray(x, dtype=np.float16)
    if type_name == "Q2_0":
        return quantize_q2_0(x)
    if type_name == "Q4_K":
        return quantize_q4_k(x)
    if type_name == "Q6_K":
        return quantize_q6_k(x)
    return gguf.quants.quantize(np.ascontiguousarray(x, dtype=np.float32), T[type_name])


def dequantize(raw: np.ndarray, type_name: str, np_shape: tuple) -> np.ndarray:
    """Inverse of encode / random_blocks, as float32 in numpy order."""
    if type_name == "F32":
        return raw.astype(np.float32).reshape(np_shape)
    if type_name == "F16":
        return raw.view(np.float16).astype(np.float32).reshape(np_shape) if raw.dtype == np.uint8 else \
            raw.astype(np.float32).reshape(np_shape)
    if type_name == "Q2_0":
        return dequantize_q2_0(raw, np_shape[-1]).reshape(np_shape)
    return gguf.quants.dequantize(raw.view(np.uint8), T[type_name]).reshape(np_shape)
