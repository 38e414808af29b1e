"""The PLE table's rows (engine/src/model/ple_reader.h) read unbuffered or through the page cache, a prompt in one
chunk or in chunks whose rows are begun during the chunk before: the generated tokens are the same every way, and
the engine says which way it read them. On the shipped demo model (PLE at layer 1)."""
import os
import re
import subprocess

from test_checkpoints import DEMO, tokens

PROMPT = ("<|im_start|>user\nName three colours of the rainbow and say which one is between the other two.<|im_end|>\n"
          "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def generate(engine_bin, ids, chunk, unbuffered):
    env = dict(os.environ, STRATA_PLE_UNBUFFERED=unbuffered)
    r = subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", ",".join(map(str, ids)), "-n", "24",
                        "--ignore-eos", "--threads", "2", "--chunk", str(chunk)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-800:]
    out = [int(t) for t in r.stdout.strip().splitlines()[-1].split(",")]
    m = re.search(r"PLE table: (\d+) passes read (\d+) rows \((\d+) distinct\) (unbuffered|through the page cache) "
                  r"with \d+ I/O threads, (\d+) begun during the pass before", r.stderr)
    assert m, r.stderr[-800:]
    return out, m.group(4), int(m.group(1)), int(m.group(5))


def test_ple_rows_read_every_way_give_the_same_tokens(engine_bin):
    ids = tokens(PROMPT)
    assert len(ids) > 40
    want, how, passes, ahead = generate(engine_bin, ids, 4096, "0")
    # 24 tokens take 23 decode passes; the prompt may be cut at a checkpoint (the turn start), and every prompt chunk
    # after the first has its rows begun during the chunk before
    assert how == "through the page cache" and ahead == passes - 23 - 1
    for unbuffered, expect in (("1", "unbuffered"), ("0", "through the page cache")):
        got, how, passes, ahead = generate(engine_bin, ids, 16, unbuffered)
        assert got == want, f"chunks of 16, STRATA_PLE_UNBUFFERED={unbuffered}"
        assert how == expect
        assert passes - 23 >= -(-len(ids) // 16) and ahead == passes - 23 - 1, (ahead, passes, len(ids))
    got, how, _, _ = generate(engine_bin, ids, 4096, "1")
    assert got == want and how == "unbuffered"
