"""A synthetic full-size qwen4exp GGUF for benchmarks: the real shapes of GGUF.md (48 layers, H 2560, 512 experts of
640 x 2560, the IQ2_XS or Q2_0 per-tensor mix of llama-quantize), random valid blocks, a 1.15 GiB stand-in PLE table,
and routers whose rows have per-expert scales so that routing is skewed like the measured curve of the real model
(PERFORMANCE.md §1: the top 32/64/128/171/256 experts of a layer carry ~37/53/73/82/93% of the expert calls). The
scales are fitted at generation time on Gaussian activations (router_scales; `--check-router` prints the curve they
give). The model's own hidden states route the same way (zero-mean random blocks, small conv taps; see
random_block_bytes): engine/tools/routing_check.py measures that with the engine. Not a language model: a stand-in
with the real bytes per token.

    python engine/tools/make_synthetic.py OUT.gguf [--experts iq2_xs|q2_0] [--layers 48] [--workers N] [--seed 0]
        [--mtp-out MTP.gguf [--mtp-outtype q8_0|q2_0|iq2_xs]]   (a random MTP head: its drafts are rarely accepted,
        so with it a decode measures what drafting and verifying windows cost, not what they gain)

The header is written with gguf-py; tensor data is then filled in place by worker processes (36 GB in minutes)."""
from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import sys
import time

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_layout  # noqa: E402
import gguf_quant  # noqa: E402
from convert import model_metadata  # noqa: E402

ALIGN = 32
# Std of the GDN and PLE conv taps. The SiLU after them has a positive mean (0.3: about 0.15 of its std in every
# channel); GDN sums it coherently over the sequence, so the hidden state got a token-independent part that routed
# 66% of the calls to 32 experts. At 0.05 the SiLU is near-linear and that part is gone.
CONV_STD = 0.05
ROUTER_LOGIT_STD = 2.0   # logit std of the most popular expert of a layer
# PERFORMANCE.md §1: share of a layer's expert calls carried by its top n of 512 experts.
ROUTING_CURVE = [(0, 0.0), (32, 0.37), (64, 0.53), (128, 0.73), (171, 0.82), (256, 0.93), (512, 1.0)]


def routing_curve_of(counts: np.ndarray, ns=(32, 64, 128, 171, 256)) -> dict:
    """{n: share of the calls that the n most chosen experts carry} (n scaled to the expert count)."""
    c = np.sort(np.asarray(counts, dtype=np.float64))[::-1].cumsum()
    c /= max(c[-1], 1e-30)
    E = len(counts)
    return {n: float(c[max(1, round(n * E / 512)) - 1]) for n in ns}


def router_scales(E: int, k: int, samples: int = 4096, iters: int = 60) -> np.ndarray:
    """Per-rank logit scales (rank 0 most popular) whose top-k choices on Gaussian activations follow ROUTING_CURVE:
    multiplicative updates of each rank's scale toward its target share of the calls."""
    xs = np.array([n * E / 512 for n, _ in ROUTING_CURVE])
    ys = np.array([y for _, y in ROUTING_CURVE])
    target = np.diff(np.interp(np.arange(E + 1), xs, ys))          # share of calls per rank
    rng = np.random.default_rng(12345)
    z = rng.standard_normal((samples, E)).astype(np.float32)
    scale = (np.arange(E) + 1.0) ** -0.25
    for _ in range(iters):
        top = np.argpartition(-(z * scale), k, axis=1)[:, :k]
        got = np.bincount(top.ravel(), minlength=E) / top.size
        scale *= (target / np.maximum(got, 0.5 / top.size)) ** 0.15
        scale /= scale.max()
    return (ROUTER_LOGIT_STD * np.sort(scale)[::-1]).astype(np.float64)


def splitmix64(v: int) -> int:
    m = (1 << 64) - 1
    v = (v + 0x9E3779B97F4A7C15) & m
    v = ((v ^ (v >> 30)) * 0xBF58476D1CE4E5B9) & m
    v = ((v ^ (v >> 27)) * 0x94D049BB133111EB) & m
    return v ^ (v >> 31)


def ple_constants(hp) -> dict:
    """MODEL.md §6.1 with the config's (small) base: multipliers, head sizes (primes), offsets."""
    half = max(1, ((2 ** 63 - 1) // hp.n_vocab) // 2)
    base = 1234 + 10007 * 0
    mult = [2 * (splitmix64((base + 0x9E3779B97F4A7C15 * (i + 1)) & ((1 << 64) - 1)) % half) + 1
            for i in range(hp.ple_ngram)]
    heads = (hp.ple_ngram - 1) * hp.ple_heads_per_ngram
    sizes, p = [], BASE_ROWS
    for _ in range(heads):
        p = gguf_layout._nth_prime_after(p, 1)
        sizes.append(p)
    offsets = [sum(sizes[:h]) for h in range(heads)]
    return {"layer_multipliers": mult, "head_offsets": offsets, "head_vocab_sizes": sizes}


# Per-head rows of the stand-in PLE table (the real one has 20M a head, 28.8 GB): 16 heads of ~700K give 1.15 GiB,
# above the engine's kUnbufferedPleBytes, so its rows are read past the page cache as the real table's are and the
# decode and prompt timings include real reads of the disk.
BASE_ROWS = 700000


def synthetic_config(layers: int) -> dict:
    cfg = gguf_layout.real_model_config()
    cfg["num_hidden_layers"] = layers
    cfg["layer_types"] = ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)]
    cfg["ngram_vocab_size_base"] = BASE_ROWS
    return cfg


def tensor_plan(outtype: str, layers: int, mtp: bool = False):
    """(hp, [(name, ne, ggml type, bytes)]) of the main file, or with mtp of the MTP file (blk.L + blk.L.nextn.*, as
    mtp_extract.py writes it: token_embd and output come from the main file)."""
    cfg = synthetic_config(layers)
    hp = gguf_layout.hparams_from_config(cfg, cfg)
    chooser = gguf_quant.TypeChooser(outtype, hp.n_layer + (1 if mtp else 0))
    specs = ([s for s in gguf_layout.mtp_tensor_specs(hp) if s[0].startswith(f"blk.{hp.n_layer}.")] if mtp
             else gguf_layout.main_tensor_specs(hp))
    plan = []
    for name, ne in specs:
        t = chooser.choose(name, ne)
        if t == "BF16" and len(ne) == 1:
            t = "F32"
        _, bs, bb = gguf_quant.TYPES[t]
        nbytes = math.prod(ne) // bs * bb
        plan.append((name, tuple(ne), t, nbytes))
    return hp, plan


def fill_values(name: str, ne: tuple, rng: np.random.Generator, router_scale) -> np.ndarray:
    """f32 contents of the small tensors that need sensible values (norms, decay, conv, router: router_scale[rank] is
    the logit std of the rank-th most popular expert)."""
    n = math.prod(ne)
    if name.endswith("_norm.weight") or "hc_head_norm" in name:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)       # +1 folded norms near 1
    if name.endswith("ssm_a"):
        return (-np.exp(0.5 * rng.standard_normal(n))).astype(np.float32)     # −exp(A_log)
    if name.endswith("ssm_dt.bias"):
        return (0.5 * rng.standard_normal(n)).astype(np.float32)
    if "ssm_conv1d" in name or "ple_conv1d" in name:
        return (CONV_STD * rng.standard_normal(n)).astype(np.float32)
    if "ffn_gate_inp.weight" in name:
        E, H = ne[1], ne[0]
        scale = router_scale[rng.permutation(E)]       # popular experts differ per layer
        w = rng.standard_normal((E, H)) * (scale[:, None] / math.sqrt(H))
        return w.astype(np.float32).ravel()
    return (rng.standard_normal(n) / math.sqrt(ne[0])).astype(np.float32)


def encode_small(values: np.ndarray, t: str, ne: tuple) -> bytes:
    if t == "F32":
        return values.astype(np.float32).tobytes()
    if t == "F16":
        return values.astype(np.float16).tobytes()
    if t == "BF16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return gguf_quant.encode(values.reshape(tuple(reversed(ne))), t).tobytes()


def random_block_bytes(t: str, nbytes: int, rng: np.random.Generator, scale: float) -> np.ndarray:
    """Random blocks whose fp16 fields (scale, and min where the format has one) share a random sign per block.
    Random codes alone decode to values of one-signed mean (Q2_0: +0.4 std; Q4_K, Q5_K: about one std), which made
    every row of every matrix share one direction: each layer's output was nearly the same vector for every token,
    and every token routed to the same 10 experts. Negating a block's fp16 fields negates all its values."""
    _, bs, bb = gguf_quant.TYPES[t]
    raw = np.frombuffer(rng.bytes(nbytes), dtype=np.uint8).reshape(-1, bb).copy()
    sign = np.where(rng.random(raw.shape[0]) < 0.5, -1.0, 1.0)
    for off in gguf_quant._FP16_FIELDS[t]:
        d = (rng.uniform(0.5, 1.0, raw.shape[0]) * scale * sign).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
    return raw


_SCALES: dict = {}


def block_scale(t: str, target_std: float) -> float:
    """fp16 scale that gives dequantized values of about target_std (measured on a sample)."""
    if t not in _SCALES:
        rng = np.random.default_rng(1)
        _, bs, bb = gguf_quant.TYPES[t]
        sample = random_block_bytes(t, bb * 256, rng, 1.0)
        std = float(gguf_quant.dequantize(sample, t, (256, bs)).std()) or 1.0
        _SCALES[t] = 1.0 / std
    return _SCALES[t] * target_std


def fill_one(args) -> int:
    path, offset, name, ne, t, nbytes, seed, router_scale = args
    rng = np.random.default_rng(seed)
    small = (len(ne) == 1 or "ffn_gate_inp" in name or "ssm_conv1d" in name or "ple_conv1d" in name
             or t in ("F32", "F16", "BF16"))
    with open(path, "r+b") as f:
        f.seek(offset)
        if small:
            data = encode_small(fill_values(name, ne, rng, router_scale), t, ne)
            assert len(data) == nbytes, (name, len(data), nbytes)
            f.write(data)
        else:
            std = 1.0 / math.sqrt(ne[0])        # keeps activations O(1) through the layer stack
            chunk_rows = max(1, (64 << 20) // (nbytes // math.prod(ne[1:])))
            rows = math.prod(ne[1:])
            row_bytes = nbytes // rows
            for r0 in range(0, rows, chunk_rows):
                n = min(chunk_rows, rows - r0)
                f.write(random_block_bytes(t, n * row_bytes, rng, block_scale(t, std)).tobytes())
    return nbytes


def write(out: str, outtype: str, layers: int, workers: int, seed: int, mtp: bool = False) -> None:
    """The main file, or with mtp the MTP file (seeded apart from the main file's tensors)."""
    t0 = time.time()
    hp, plan = tensor_plan(outtype, layers, mtp)
    name = f"strata-synthetic-{outtype}-{layers}L" + (" MTP" if mtp else "")
    kv = model_metadata(hp, ple_constants(hp), outtype, name, mtp, "/nonexistent")
    seed = seed + (7919 if mtp else 0)
    kv.append(("tokenizer.ggml.eos_token_id", 248046, gguf.GGUFValueType.UINT32, None))
    w = gguf.GGUFWriter(out, arch=None)
    for key, val, vt, sub in kv:
        w.add_key_value(key, val, vt, sub_type=sub)
    for name, ne, t, nbytes in plan:
        w.add_tensor_info(name, tuple(reversed(ne)), np.int8, nbytes, raw_dtype=gguf_quant.TYPES[t][0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.fout[0].flush()
    data_start = (w.fout[0].tell() + ALIGN - 1) // ALIGN * ALIGN
    w.fout[0].close()
    scales = router_scales(hp.n_expert, hp.n_expert_used)
    jobs, off = [], data_start
    for i, (name, ne, t, nbytes) in enumerate(plan):
        jobs.append((out, off, name, ne, t, nbytes, seed * 100003 + i, scales if "ffn_gate_inp" in name else None))
        off += (nbytes + ALIGN - 1) // ALIGN * ALIGN
    with open(out, "r+b") as f:
        f.truncate(off)
    jobs.sort(key=lambda j: -j[5])            # big tensors first
    done = 0
    with mp.Pool(workers) as pool:
        for n in pool.imap_unordered(fill_one, jobs):
            done += n
    print(f"wrote {out}: {len(plan)} tensors, {off / 1e9:.2f} GB in {time.time() - t0:.1f} s", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--experts", choices=["iq2_xs", "q2_0"], default="iq2_xs")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mtp-out", help="also write a synthetic MTP head (blk.L + nextn, as mtp_extract.py) here")
    ap.add_argument("--mtp-outtype", choices=["q8_0", "q2_0", "iq2_xs"], default="q8_0",
                    help="the MTP head's types (q8_0: as the installer's mtp_extract.py writes it)")
    ap.add_argument("--check-router", action="store_true",
                    help="print the routing curve the fitted router scales give on Gaussian activations, write nothing")
    a = ap.parse_args(argv)
    if a.check_router:
        E, k = 512, 10
        scales = router_scales(E, k)
        z = np.random.default_rng(7).standard_normal((20000, E)) * scales
        top = np.argpartition(-z, k, axis=1)[:, :k]
        got = routing_curve_of(np.bincount(top.ravel(), minlength=E))
        print("top n experts: share of calls (target)")
        for n, y in got.items():
            print(f"  {n:4d}: {100 * y:5.1f}%  ({100 * dict(ROUTING_CURVE)[n]:.0f}%)")
        return 0
    if a.layers < 4 or a.layers % 4:
        ap.error("--layers must be a positive multiple of 4 (every 4th layer is attention)")
    write(a.out, a.experts, a.layers, a.workers, a.seed)
    if a.mtp_out:
        write(a.mtp_out, a.mtp_outtype, a.layers, a.workers, a.seed, mtp=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
