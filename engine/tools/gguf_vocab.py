# Tokenizer metadata for a qwen4exp GGUF (GGUF.md §3), read from a HF tokenizer.json / tokenizer_config.json.
from __future__ import annotations

import json
import os

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def _added_id(tok_json: dict, vocab: dict, text) -> int | None:
    if isinstance(text, dict):
        text = text.get("content")
    if text is None:
        return None
    for t in tok_json.get("added_tokens", []):
        if t["content"] == text:
            return t["id"]
    return vocab.get(text)


_cache = {}


def tokenizer_metadata(hf_dir: str, n_vocab: int, config: dict) -> dict | None:
    """Memoised on the files' paths and modification times (make_tiny converts one checkpoint many times)."""
    names = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
    stamp = tuple(os.stat(p).st_mtime_ns if os.path.exists(p) else None
                  for p in (os.path.join(hf_dir, n) for n in names))
    key = (os.path.abspath(hf_dir), n_vocab, json.dumps(config, sort_keys=True, default=str), stamp)
    if key not in _cache:
        _cache.clear()
        _cache[key] = _read_tokenizer_metadata(hf_dir, n_vocab, config)
    return _cache[key]


def _read_tokenizer_metadata(hf_dir: str, n_vocab: int, config: dict) -> dict | None:
    """Returns the tokenizer.* keys as {key: value}, or None when the checkpoint has no tokenizer.json.

    Value lists are tagged later by the writer: tokens/merges are string arrays, token_type INT32.
    """
    path = os.path.join(hf_dir, "tokenizer.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    tcfg = {}
    cfg_path = os.path.join(hf_dir, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            tcfg = json.load(f)

    model = tok["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"tokenizer.json model type {model.get('type')!r}: only byte-level BPE is supported")
    vocab = dict(model["vocab"])
    tokens = [None] * n_vocab
    types = [TOKEN_UNUSED] * n_vocab
    for text, i in vocab.items():
        if i >= n_vocab:
            raise ValueError(f"token {text!r} has id {i} >= vocab_size {n_vocab}")
        tokens[i] = text
        types[i] = TOKEN_NORMAL
    for t in tok.get("added_tokens", []):
        i = t["id"]
        if i >= n_vocab:
            raise ValueError(f"added token {t['content']!r} has id {i} >= vocab_size {n_vocab}")
        tokens[i] = t["content"]
        types[i] = TOKEN_CONTROL if t.get("special") else TOKEN_USER_DEFINED
    for i in range(n_vocab):
        if tokens[i] is None:
            tokens[i] = f"[PAD{i}]"

    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen35",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
    }
    eos = _added_id(tok, vocab, tcfg.get("eos_token"))
    if eos is None:
        e = config.get("eos_token_id")
        eos = e[0] if isinstance(e, list) else e
    bos = _added_id(tok, vocab, tcfg.get("bos_token"))
    if bos is None:
        bos = config.get("bos_token_id")
    pad = _added_id(tok, vocab, tcfg.get("pad_token"))
    if pad is None:
        pad = config.get("pad_token_id")
    if eos is not None:
        meta["tokenizer.ggml.eos_token_id"] = eos
    if bos is not None:
        meta["tokenizer.ggml.bos_token_id"] = bos
    if pad is not None:
        meta["tokenizer.ggml.padding_token_id"] = pad
    meta["tokenizer.ggml.add_bos_token"] = False
    template = None
    tpl_path = os.path.join(hf_dir, "chat_template.jinja")
    if os.path.exists(tpl_path):
        with open(tpl_path, encoding="utf-8") as f:
            template = f.read()
    elif isinstance(tcfg.get("chat_template"), str):
        template = tcfg["chat_template"]
    if template is not None:
        meta["tokenizer.chat_template"] = template
    return meta
