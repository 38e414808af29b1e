"""Writes the MTP GGUF (GGUF.md §2.6: blk.L + blk.L.nextn.*, metadata as convert.py --mtp-out) from the checkpoint's
mtp.* tensors alone, read at their byte offsets: in local safetensors files, or in the pieces the installer fetched
by HTTP Range (installer/mtp_fetch.py). token_embd/output are left out: the engine takes them from the main model.
Needs numpy and gguf only (no torch, no safetensors).

Usage: python mtp_extract.py HF_DIR OUT.gguf [--outtype q8_0|bf16|f16|f32]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert  # noqa: E402
from gguf_layout import ConvertError, Hparams, hparams_from_config, mtp_tensor_specs, read_config  # noqa: E402
from gguf_quant import TYPES, TypeChooser, encode  # noqa: E402

OUTTYPES = ("q8_0", "bf16", "f16", "f32")
DEFAULT_OUTTYPE = "q8_0"
# safetensors dtype -> how its bytes are read (BF16 as raw 16-bit words, widened to f32 by hand)
DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "I64": np.dtype("<i8")}
MAX_HEADER_BYTES = 100 << 20      # safetensors' own limit on the JSON header
PLE_CONSTANTS = ("layer_multipliers", "ngram_heads_offsets", "ngram_heads_vocab_sizes")


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file: its name there, dtype, shape and absolute byte range [start, end)."""
    key: str
    dtype: str
    shape: tuple
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def header_length(first8: bytes, where: str) -> int:
    if len(first8) != 8:
        raise ConvertError(f"{where}: got {len(first8)} bytes where the 8-byte safetensors header length should be")
    n = struct.unpack("<Q", first8)[0]
    if not 2 <= n <= MAX_HEADER_BYTES:
        raise ConvertError(f"{where}: safetensors header length {n} is not plausible; not a safetensors file?")
    return n


def parse_header(header: bytes, n: int, file_size: int | None, where: str) -> dict[str, TensorEntry]:
    """{name in the file: TensorEntry} from the JSON header that follows the 8-byte length n."""
    try:
        body = json.loads(header)
    except (UnicodeDecodeError, ValueError) as e:
        raise ConvertError(f"{where}: the safetensors header is not JSON ({e})") from e
    entries = {}
    data_start = 8 + n
    for key, info in body.items():
        if key == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        dtype = info["dtype"]
        if dtype in DTYPES and end - begin != math.prod(shape) * DTYPES[dtype].itemsize:
            raise ConvertError(f"{where}: {key} has {end - begin} bytes for {dtype} {list(shape)}")
        if file_size is not None and data_start + end > file_size:
            raise ConvertError(f"{where}: {key} ends at byte {data_start + end} but the file has only {file_size} "
                               f"bytes (truncated file?)")
        entries[key] = TensorEntry(key, dtype, shape, data_start + begin, data_start + end)
    return entries


def read_local_header(path: str) -> dict[str, TensorEntry]:
    with open(path, "rb") as f:
        n = header_length(f.read(8), path)
        return parse_header(f.read(n), n, os.path.getsize(path), path)


# ---- what the MTP GGUF needs --------------------------------------------------------------------------------

def canonical_name(key: str) -> str | None:
    """convert.py's canonical names; mtp.* may also sit under model. or model.language_model."""
    name = convert.Checkpoint.canonical(key)
    if name is not None and name.startswith("model.mtp."):
        name = name[len("model."):]
    return name


def load_hparams(config_dir: str) -> Hparams:
    text, root = read_config(config_dir)
    layers = text.get("mtp_num_hidden_layers", root.get("mtp_num_hidden_layers"))
    if layers is not None and layers != 1:
        raise ConvertError(f"mtp_num_hidden_layers={layers} in config.json: the engine's MTP GGUF holds one layer")
    return hparams_from_config(text, root, has_output=False)


def ple_constant_names(hp: Hparams) -> list[str]:
    """The PLE int64 buffers whose values the GGUF metadata carries (in the trunk, not under mtp.)."""
    if hp.ple_layer is None:
        return []
    return [f"model.layers.{hp.ple_layer}.ple.ple_embedding.{k}" for k in PLE_CONSTANTS]


def is_needed(name: str, hp: Hparams) -> bool:
    return name.startswith("mtp.") or name in ple_constant_names(hp)


def expected_shapes(hp: Hparams, fused_experts: bool) -> dict[str, tuple]:
    """HF name -> shape of every tensor the MTP GGUF is made from (convert.py's docstring names)."""
    H, nH, r, n = hp.n_embd, hp.hc_dim, hp.hc_lowrank, hp.hc
    E, I, Is, hd = hp.n_expert, hp.expert_ff, hp.shexp_ff, hp.head_dim
    s = {"mtp.fc_embedding.weight": (H, H), "mtp.fc_hidden.weight": (H, H),
         "mtp.pre_fc_norm_embedding.weight": (H,), "mtp.pre_fc_norm_hidden.weight": (nH,)}

    def mixer(p: str) -> None:
        s.update({p + "hc_norm.weight": (nH,), p + "input_mix_weight_down.weight": (r, nH),
                  p + "input_mix_weight_up.weight": (nH, r)})

    mixer("mtp.hyper_connection_mixer.")
    layer = "mtp.layers.0."
    for hc in ("attn_hyper_connection.", "mlp_hyper_connection."):
        mixer(layer + hc)
        s[layer + hc + "block_inject_weight.weight"] = (n, nH)
    a = layer + "self_attn."
    nq = hp.idx_heads * hp.idx_head_dim
    s.update({a + "q_proj.weight": (hp.n_head * 2 * hd, H), a + "k_proj.weight": (hp.n_head_kv * hd, H),
              a + "v_proj.weight": (hp.n_head_kv * hd, H), a + "o_proj.weight": (H, hp.n_head * hd),
              a + "q_norm.weight": (hd,), a + "k_norm.weight": (hd,),
              a + "indexer.index_qk_proj.weight": (nq + hp.idx_head_dim, H),
              a + "indexer.q_layernorm.weight": (hp.idx_head_dim,),
              a + "indexer.k_layernorm.weight": (hp.idx_head_dim,)})
    m = layer + "mlp."
    s.update({m + "gate.weight": (E, H), m + "shared_expert_gate.weight": (1, H),
              m + "shared_expert.gate_proj.weight": (Is, H), m + "shared_expert.up_proj.weight": (Is, H),
              m + "shared_expert.down_proj.weight": (H, Is)})
    if fused_experts:
        s.update({m + "experts.gate_up_proj": (E, 2 * I, H), m + "experts.down_proj": (E, H, I)})
    else:
        for e in range(E):
            s.update({f"{m}experts.{e}.gate_proj.weight": (I, H), f"{m}experts.{e}.up_proj.weight": (I, H),
                      f"{m}experts.{e}.down_proj.weight": (H, I)})
    return s


def _listed(names: list, limit: int = 6) -> str:
    names = sorted(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_structure(hp: Hparams, found: dict[str, tuple[str, tuple]]) -> None:
    """Refuses a checkpoint whose needed tensors ({canonical name: (dtype, shape)}) are not the expected ones."""
    mtp = {k: v for k, v in found.items() if k.startswith("mtp.")}
    if not mtp:
        raise ConvertError("the checkpoint has no mtp.* tensors (no multi-token-prediction layer)")
    want = expected_shapes(hp, fused_experts="mtp.layers.0.mlp.experts.gate_up_proj" in mtp)
    problems = []
    missing = [k for k in want if k not in mtp]
    extra = [k for k in mtp if k not in want]
    if missing:
        problems.append(f"missing {_listed(missing)}")
    if extra:
        problems.append(f"unexpected {_listed(extra)}")
    for k, shape in want.items():
        if k in mtp and tuple(mtp[k][1]) != shape:
            problems.append(f"{k} has shape {list(mtp[k][1])}, expected {list(shape)}")
    bad_types = [f"{k} ({dt})" for k, (dt, _) in mtp.items() if dt not in ("F32", "F16", "BF16")]
    if bad_types:
        problems.append(f"unsupported dtypes (F32/F16/BF16 only): {_listed(bad_types)}")
    heads = (hp.ple_ngram - 1) * hp.ple_heads_per_ngram
    for k, n in zip(ple_constant_names(hp), (hp.ple_ngram, heads, heads)):
        if found.get(k) != ("I64", (n,)):
            problems.append(f"{k} is {found.get(k, 'absent')}, expected an I64 buffer of {n}")
    if problems:
        raise ConvertError("the checkpoint's MTP layer does not match its config.json (hidden "
                           f"{hp.n_embd}, {hp.n_expert} experts, {hp.n_layer} layers): " + "; ".join(problems))


# ---- reading and writing ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Located:
    """Where one tensor's bytes are on this machine."""
    path: str
    offset: int
    dtype: str
    shape: tuple


class TensorSource:
    """The has/f32/ints/names access of convert.Checkpoint over tensors at known offsets of local files."""

    def __init__(self, located: dict[str, Located]):
        self.located = located

    def has(self, name: str) -> bool:
        return name in self.located

    def names(self, prefix: str) -> list:
        return [n for n in self.located if n.startswith(prefix)]

    def _array(self, name: str, index: int | None = None) -> np.ndarray:
        """The tensor, or only its index-th slice along the first axis."""
        if name not in self.located:
            raise ConvertError(f"tensor {name!r} is missing from the checkpoint")
        loc = self.located[name]
        shape = loc.shape if index is None else loc.shape[1:]
        count = math.prod(shape)
        offset = loc.offset + (0 if index is None else index * count * DTYPES[loc.dtype].itemsize)
        data = np.fromfile(loc.path, dtype=DTYPES[loc.dtype], count=count, offset=offset)
        if data.size != count:
            raise ConvertError(f"{loc.path} holds {data.size} of the {count} values of {name} (truncated file?)")
        return data.reshape(shape)

    def f32(self, name: str, index: int | None = None) -> np.ndarray:
        data = self._array(name, index)
        if self.located[name].dtype == "BF16":
            return (data.astype(np.uint32) << 16).view(np.float32)
        return data.astype(np.float32)

    def ints(self, name: str) -> list:
        if self.located[name].dtype != "I64":
            raise ConvertError(f"{name} has dtype {self.located[name].dtype}; the PLE constants must be int64")
        return [int(v) for v in self._array(name)]


EXPERT_KINDS = {"ffn_gate_exps.weight": "gate", "ffn_up_exps.weight": "up", "ffn_down_exps.weight": "down"}


def expert_matrices(source: TensorSource, hp: Hparams, kind: str):
    """The gate, up or down matrix of each expert in turn (one expert in memory at a time)."""
    m, I = "mtp.layers.0.mlp.experts.", hp.expert_ff
    fused = source.has(m + "gate_up_proj")
    for e in range(hp.n_expert):
        if not fused:
            yield source.f32(f"{m}{e}.{kind}_proj.weight")
        elif kind == "down":
            yield source.f32(m + "down_proj", e)
        else:
            gate_up = source.f32(m + "gate_up_proj", e)
            yield gate_up[:I] if kind == "gate" else gate_up[I:]


def _write_streaming(path: str, kv: list, specs: list, small: dict, source: TensorSource, hp: Hparams,
                     outtype: str) -> dict:
    """convert.write_gguf's file, written tensor by tensor: the experts are read and encoded one at a time, so the
    real head (5 GB of BF16) converts in about 2 GB of memory instead of holding every tensor as f32."""
    L = hp.n_layer
    experts = {f"blk.{L}.{k}": kind for k, kind in EXPERT_KINDS.items()}
    names = [n for n, _ in specs]
    if set(names) != set(small) | set(experts):
        raise ConvertError(f"tensor set differs from the layout: missing {sorted(set(names) - set(small) - set(experts))}"
                           f", extra {sorted(set(small) - set(names))}")
    chooser = TypeChooser(outtype, L + 1)
    w = convert._Writer(path, arch=None)
    for key, val, vt, sub in kv:
        w.add_key_value(key, val, vt, sub_type=sub)
    types = {}
    for name, ne in specs:
        shape = tuple(reversed(ne))
        if name in small and small[name].shape != shape:
            raise ConvertError(f"{name}: converted shape ne={list(reversed(small[name].shape))}, layout says {list(ne)}")
        t = types[name] = chooser.choose(name, ne)
        type_id, block, block_bytes = TYPES[t]
        w.add_tensor_info(name, shape, np.float32, math.prod(shape) // block * block_bytes,
                          raw_dtype=GGMLQuantizationType(type_id))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, _ in specs:
        if name in small:
            data = encode(small.pop(name), types[name])
        else:     # a Q8_0/BF16 row never spans two experts, so the pieces concatenate to the whole tensor's bytes
            data = np.concatenate([encode(x, types[name]).reshape(-1)
                                   for x in expert_matrices(source, hp, experts[name])])
        w.write_tensor_data(data)
    w.close()
    return types


def write_mtp_gguf(source: TensorSource, config_dir: str, out_path: str, outtype: str = DEFAULT_OUTTYPE,
                   name: str | None = None) -> dict:
    """Checks the structure, writes out_path (atomically, via .tmp); returns {tensor name: ggml type}."""
    if outtype not in OUTTYPES:
        raise ConvertError(f"unknown MTP outtype {outtype!r}; expected one of {', '.join(OUTTYPES)}")
    hp = load_hparams(config_dir)
    check_structure(hp, {k: (v.dtype, tuple(v.shape)) for k, v in source.located.items()})
    ple = {key: source.ints(n) for key, n in zip(("layer_multipliers", "head_offsets", "head_vocab_sizes"),
                                                ple_constant_names(hp))}
    small = convert.mtp_block_tensors(source, hp, experts=False)
    specs = [s for s in mtp_tensor_specs(hp) if s[0].startswith(f"blk.{hp.n_layer}.")]
    name = name or os.path.basename(os.path.normpath(config_dir))
    kv = convert.model_metadata(hp, ple, outtype, name + " MTP", True, config_dir)
    tmp = out_path + ".tmp"
    types = _write_streaming(tmp, kv, specs, small, source, hp, outtype)
    os.replace(tmp, out_path)
    return types


def locate_local(hf_dir: str) -> TensorSource:
    """The needed tensors of a checkpoint folder, found through the safetensors headers."""
    hp = load_hparams(hf_dir)
    files = sorted(f for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
    if not files:
        raise ConvertError(f"no .safetensors files in {hf_dir}")
    located = {}
    for fn in files:
        path = os.path.join(hf_dir, fn)
        for key, e in read_local_header(path).items():
            name = canonical_name(key)
            if name is not None and is_needed(name, hp):
                located[name] = Located(path, e.start, e.dtype, e.shape)
    return TensorSource(located)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", default=DEFAULT_OUTTYPE, choices=OUTTYPES)
    args = ap.parse_args(argv)
    try:
        types = write_mtp_gguf(locate_local(args.hf_dir), args.hf_dir, args.out, args.outtype)
    except ConvertError as e:
        print(f"mtp_extract.py: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {len(types)} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
