"""The model's tokenizer as an HF `tokenizers` byte-level BPE, built from the GGUF's tokenizer.ggml.* arrays (or a
tokenizer.json next to the model): NFC, the Qwen3.5 split regex, byte-level, ignore_merges (CLIENTS.md §1)."""
from __future__ import annotations

import json
import os
from functools import lru_cache

from tokenizers import Tokenizer

from gateway.text.gguf_meta import TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_USER_DEFINED, ModelMeta

# The Qwen3.5 pre-tokenizer pattern (qwen35): like Qwen2's, plus \p{M} so combining marks stay with their letters.
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

STOP_TEXTS = ("<|im_end|>", "<|endoftext|>")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: one printable character per byte value."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class TextTokenizer:
    """Encode text to ids; give each id's bytes (for incremental decoding); know the special ids."""

    def __init__(self, tokenizer: Tokenizer, special_ids: set[int]):
        self.hf = tokenizer
        self.special_ids = frozenset(special_ids)   # control tokens: never shown as text
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        decoder = _byte_decoder()
        added = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
        self._bytes: dict[int, bytes] = {}
        for text, i in tokenizer.get_vocab(with_added_tokens=True).items():
            if text in added:
                self._bytes[i] = text.encode("utf-8")
            else:
                try:
                    self._bytes[i] = bytes(decoder[c] for c in text)
                except KeyError:  # not byte-level text (a filler entry)
                    self._bytes[i] = text.encode("utf-8")
        self.stop_ids = frozenset(i for t in STOP_TEXTS if (i := tokenizer.token_to_id(t)) is not None)

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for; b'' for control tokens and unknown ids."""
        if token_id in self.special_ids:
            return b""
        return self._bytes.get(token_id, b"")

    def token_piece(self, token_id: int) -> bytes:
        """The bytes a token stands for, a control token's own text included (for logprobs)."""
        if token_id in self.special_ids:
            return (self.hf.id_to_token(token_id) or "").encode("utf-8")
        return self._bytes.get(token_id, b"")

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def id_of(self, text: str) -> int | None:
        return self.hf.token_to_id(text)


def tokenizer_json_from_meta(meta: ModelMeta) -> dict:
    """A tokenizer.json document equivalent to the GGUF's tokenizer.ggml.* arrays."""
    if not meta.tokens or not meta.token_types or meta.merges is None:
        raise ValueError("the GGUF has no tokenizer.ggml.tokens / token_type / merges")
    vocab, added = {}, []
    for i, (text, kind) in enumerate(zip(meta.tokens, meta.token_types)):
        if kind in (TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED):
            # Added tokens are in the vocabulary too, so they keep the GGUF's ids wherever they sit (the demo
            # model's specials are ids 0-32; `tokenizers` would give an added token missing from it a new id).
            vocab[text] = i
        if kind in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            added.append({"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": kind == TOKEN_CONTROL})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        ]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": list(meta.merges)},
    }


def load_tokenizer(model_path: str, meta: ModelMeta) -> TextTokenizer:
    """From the GGUF's metadata; else from tokenizer.json next to the model file."""
    if meta.tokens:
        hf = Tokenizer.from_str(json.dumps(tokenizer_json_from_meta(meta)))
    else:
        path = os.path.join(os.path.dirname(os.path.abspath(model_path)), "tokenizer.json")
        if not os.path.exists(path):
            raise ValueError(f"{model_path} has no tokenizer.ggml.tokens and there is no {path}")
        hf = Tokenizer.from_file(path)
    special = {i for i, t in hf.get_added_tokens_decoder().items() if t.special}
    return TextTokenizer(hf, special)
