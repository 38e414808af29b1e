"""Greedy speculation with drafts from the text itself (--spec-lookup, engine/src/generate/prompt_lookup.h): the
tokens equal plain greedy decoding's, through `strata generate` and the serve protocol, while drafts are offered,
accepted and rejected (so the rollback runs too). On the shipped demo model."""
import os
import re
import subprocess

from strata_testing import REPO
from test_checkpoints import DEMO, DEMO_MTP, serve, tokens

PROMPTS = [
    "<|im_start|>user\nRepeat this twice: the red fox, the red fox, the red fox.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|im_start|>user\nWrite a Python function that adds two numbers, then the same function again.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n",
    "<|im_start|>user\nList the numbers one two three four five, then list them again.<|im_end|>\n"
    "<|im_start|>assistant\n",
]


def generate(engine_bin, ids, *extra):
    r = subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", ",".join(map(str, ids)), "-n", "96",
                        "--ignore-eos", "--threads", "2", *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-800:]
    out = [int(t) for t in r.stdout.strip().splitlines()[-1].split(",")]
    m = re.search(r"speculation: (\d+) passes, (\d+) drafts offered, (\d+) accepted", r.stderr)
    return out, (tuple(map(int, m.groups())) if m else None)


def test_lookup_drafts_keep_greedy_tokens(engine_bin):
    offered = accepted = 0
    for text in PROMPTS:
        ids = tokens(text)
        plain, none = generate(engine_bin, ids)
        spec, stats = generate(engine_bin, ids, "--spec-lookup", "4")
        assert none is None and stats is not None
        assert spec == plain, f"--spec-lookup changed the text of {text!r}"
        passes, o, a = stats
        # Every token is the first of a pass or an accepted draft (the last one's pass may not have run).
        assert passes + a in (len(plain) - 1, len(plain)) and a <= o, (passes, o, a, len(plain))
        offered += o
        accepted += a
        print(f"{passes} passes, {o} drafts offered, {a} accepted for {len(plain)} tokens")
    assert accepted > 0, "no draft was ever accepted: the test would not see the lookup path work"
    assert offered > accepted, "no draft was ever rejected: the rollback path went untested"


def test_lookup_drafts_over_the_serve_protocol(engine_bin):
    ids = [tokens(t) for t in PROMPTS]
    assert serve(engine_bin, ids, "--spec-lookup", "4") == serve(engine_bin, ids)


def test_lookup_refuses_an_mtp_head(engine_bin):
    r = subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", "1,2,3", "-n", "2", "--mtp", DEMO_MTP,
                        "--spec-lookup", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--spec-lookup is for a model without --mtp" in r.stderr
    assert os.path.exists(DEMO_MTP)
