"""The PLE table's rows (engine/src/model/ple_reader.h) read unbuffered or through the page cache, a prompt in one
chunk or in chunks whose rows are begun during the chunk before, with and without the row cache: the generated tokens
are the same every way, and the engine says which way it read them. On the shipped demo model (PLE at layer 1)."""
import os
import re
import subprocess

from test_checkpoints import DEMO, tokens

PROMPT = ("<|im_start|>user\nName three colours of the rainbow and say which one is between the other two.<|im_end|>\n"
          "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def generate(engine_bin, ids, chunk, unbuffered, cache_mib=None):
    env = dict(os.environ, STRATA_PLE_UNBUFFERED=unbuffered)
    if cache_mib is not None:
        env["STRATA_PLE_CACHE_MIB"] = str(cache_mib)
    r = subprocess.run([engine_bin, "generate", "--model", DEMO, "--prompt-ids", ",".join(map(str, ids)), "-n", "24",
                        "--ignore-eos", "--threads", "2", "--chunk", str(chunk)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-800:]
    out = [int(t) for t in r.stdout.strip().splitlines()[-1].split(",")]
    m = re.search(r"PLE table: (\d+) passes asked (\d+) rows, (\d+) distinct rows found in the row cache \((\d+) rows\), "
                  r"(\d+) read (unbuffered|through the page cache) with \d+ I/O threads; (\d+) passes found every row "
                  r"cached, (\d+) were begun during the pass before", r.stderr)
    assert m, r.stderr[-800:]
    g = [m.group(1), m.group(2), m.group(3), m.group(4), m.group(5), m.group(7), m.group(8)]
    passes, rows, cached, cache_rows, read, all_cached, ahead = map(int, g)
    return out, {"how": m.group(6), "passes": passes, "rows": rows, "cached": cached, "cache_rows": cache_rows,
                 "read": read, "all_cached": all_cached, "ahead": ahead}


def test_ple_rows_read_every_way_give_the_same_tokens(engine_bin):
    ids = tokens(PROMPT)
    assert len(ids) > 40
    want, st = generate(engine_bin, ids, 4096, "0")
    # 24 tokens take 23 decode passes; the prompt may be cut at a checkpoint (the turn start), and every prompt chunk
    # after the first has its rows begun during the chunk before
    assert st["how"] == "through the page cache" and st["ahead"] == st["passes"] - 23 - 1
    for unbuffered, expect in (("1", "unbuffered"), ("0", "through the page cache")):
        got, st = generate(engine_bin, ids, 16, unbuffered)
        assert got == want, f"chunks of 16, STRATA_PLE_UNBUFFERED={unbuffered}"
        assert st["how"] == expect
        assert st["passes"] - 23 >= -(-len(ids) // 16) and st["ahead"] == st["passes"] - 23 - 1, (st, len(ids))
    got, st = generate(engine_bin, ids, 4096, "1")
    assert got == want and st["how"] == "unbuffered"


def test_ple_row_cache_serves_repeated_ngrams_and_changes_no_token(engine_bin):
    # The prompt twice: from the second copy's third token on, every n-gram was seen in an earlier chunk.
    ids = tokens(PROMPT)
    twice = ids + ids
    want, off = generate(engine_bin, twice, 16, "1", cache_mib=0)
    assert off["cache_rows"] == 0 and off["cached"] == 0 and off["all_cached"] == 0
    assert off["read"] > 0
    got, on = generate(engine_bin, twice, 16, "1")
    assert got == want, "the row cache changes no token"
    assert on["cache_rows"] > 0 and on["rows"] == off["rows"]
    assert on["cached"] >= (len(ids) - 2) * 16 - 16, on   # the second copy's rows (each head's), bar the seam
    assert on["read"] + on["cached"] == off["read"], (on, off)   # a row is read once, or found
    assert on["all_cached"] >= (len(ids) - 2) // 16 - 1, on      # chunks of the second copy read nothing
