"""Conversation checkpoints: a prompt that diverges from the session after the last turn start of an earlier prompt
(a regenerated answer, a re-rendered history) reads only what follows the checkpoint, and the answer equals a fresh
engine's. A checkpoint whose KV rows were overwritten by another conversation is not used."""
import os
import subprocess

from strata_testing import REPO

DEMO = os.path.join(REPO, "installer", "demo", "strata-demo.gguf")
DEMO_MTP = os.path.join(REPO, "installer", "demo", "strata-demo-mtp.gguf")


def tokens(text: str) -> list[int]:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(REPO, "engine", "tools", "demo_model", "tokenizer", "tokenizer.json"))
    return tok.encode(text).ids


def serve(engine_bin, requests, *extra):
    lines = "".join(f"GEN 40 {','.join(map(str, ids))}\n" for ids in requests)
    r = subprocess.run([engine_bin, "--serve", "--model", DEMO, *extra], input=lines, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out, cur = [], None
    for line in r.stdout.splitlines():
        if line.startswith("RESUME"):
            cur = {"resume": int(line.split()[1]), "tokens": []}
        elif line.startswith("T ") and cur is not None:
            cur["tokens"].append(int(line.split()[1]))
        elif line.startswith("DONE") and cur is not None:
            out.append(cur)
            cur = None
    return out


def test_diverging_prompt_resumes_from_checkpoint(engine_bin):
    history = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n"
    a = tokens(history + "<|im_start|>assistant\n<think>\n")
    b = tokens(history + "<|im_start|>assistant\n<think>\n\n</think>\n\n")   # same history, thinking off
    c = tokens("<|im_start|>user\nHello there, how are you?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    q = len(tokens(history))
    for extra in ([], ["--mtp", DEMO_MTP]):
        got = serve(engine_bin, [a, b, c, b], *extra)
        fresh_b = serve(engine_bin, [b], *extra)[0]["tokens"]
        assert got[0]["resume"] == 0
        assert got[1]["resume"] == q, "b should resume from the checkpoint taken before a's last turn start"
        assert got[1]["tokens"] == fresh_b
        assert got[2]["resume"] == 0
        assert got[3]["resume"] == 0, "c overwrote the KV rows: the checkpoint must not be used"
        assert got[3]["tokens"] == fresh_b


def test_follow_up_turn_extends_the_session(engine_bin):
    first = tokens("<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    got = serve(engine_bin, [first])[0]["tokens"]
    # The answer without its stop token was fed; the gateway's next prompt re-renders it and adds a turn.
    answer = got[:-1]
    follow = first + answer + tokens("<|im_end|>\n<|im_start|>user\nAnd 5 plus 6?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    out = serve(engine_bin, [first, follow])
    assert out[1]["resume"] == len(first) + len(answer)
    assert out[1]["tokens"] == serve(engine_bin, [follow])[0]["tokens"]


def test_new_chat_with_the_same_long_system_prompt_resumes_after_it(engine_bin):
    """An agent starts a new conversation with the same long system prompt (and tools): it resumes after it."""
    system = "<|im_start|>system\n" + " ".join(f"Rule {i}: answer briefly and check the sums." for i in range(40)) \
        + "<|im_end|>\n"
    assert len(tokens(system)) >= 256
    a = tokens(system + "<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    b = tokens(system + "<|im_start|>user\nWhat is 10 plus 20?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    got = serve(engine_bin, [a, b])
    assert got[1]["resume"] == len(tokens(system)), "b should resume at the end of the shared system prompt"
    assert got[1]["tokens"] == serve(engine_bin, [b])[0]["tokens"]
    # A short system prompt is cheap to read again: no checkpoint after it.
    short = "<|im_start|>system\nBe brief.<|im_end|>\n"
    c = tokens(short + "<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    d = tokens(short + "<|im_start|>user\nWhat is 10 plus 20?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert serve(engine_bin, [c, d])[1]["resume"] == 0


def test_long_prompt_changed_in_the_middle_resumes_at_the_last_interval(engine_bin):
    """--checkpoint-every N (16384 by default): a prompt that changes after 150 tokens resumes at 128 (N = 64)."""
    text = tokens(" ".join(f"line {i} of the document says {i * 7 % 13}." for i in range(40)))[:200]
    assert len(text) == 200 and tokens("<|im_start|>")[0] not in text   # no turn start: only the interval applies
    changed = text[:150] + tokens(" something else entirely, then more words follow here.")
    got = serve(engine_bin, [text, changed], "--checkpoint-every", "64")
    assert got[1]["resume"] == 128
    assert got[1]["tokens"] == serve(engine_bin, [changed])[0]["tokens"]
    assert serve(engine_bin, [text, changed], "--checkpoint-every", "0")[1]["resume"] == 0
