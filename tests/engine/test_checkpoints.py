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
