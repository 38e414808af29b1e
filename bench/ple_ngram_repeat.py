"""How often a decode step's PLE rows were all read before (engine/src/model/ple_row_cache.h).

A token's 16 PLE rows are hashes of its bigram and trigram (MODEL.md §6.3): every row of a step is in the engine's row
cache exactly when the step's trigram (and so its bigram) occurred earlier in the session, so the share of "free"
decode steps is the share of output positions whose trigram was seen before in the prompt or the output so far.
This counts it with the model's tokenizer on text that stands in for output:

  edit     a source file's new version after its old one as the prompt (an agent rewriting a file it was shown):
           the last commits' changed files in this repository;
  alone    a document or source file with no prompt (free output);
  answer   a document after another one as the prompt.

usage: python bench/ple_ngram_repeat.py --tokenizer build/tiny/vocab-real/tokenizer.json [--commits 6]
       [--docs ../shared/MODEL.md ...] [--code engine/src/model/ple_reader.cpp ...] > out.json
"""
import argparse
import json
import subprocess

from tokenizers import Tokenizer


def repeat_shares(tok, prompt: str, output: str) -> dict:
    p, o = tok.encode(prompt).ids, tok.encode(output).ids
    seq = p + o
    seen2, seen3 = set(), set()
    for i in range(len(p)):
        if i >= 1:
            seen2.add(tuple(seq[i - 1:i + 1]))
        if i >= 2:
            seen3.add(tuple(seq[i - 2:i + 1]))
    h2 = h3 = 0
    for i in range(len(p), len(seq)):
        b, t = tuple(seq[max(0, i - 1):i + 1]), tuple(seq[max(0, i - 2):i + 1])
        h2 += b in seen2
        h3 += t in seen3
        seen2.add(b)
        seen3.add(t)
    n = max(1, len(o))
    return {"prompt_tokens": len(p), "output_tokens": len(o), "bigram_seen": round(h2 / n, 3),
            "trigram_seen_all_rows_cached": round(h3 / n, 3)}


def git(*args) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--commits", type=int, default=6)
    ap.add_argument("--docs", nargs="*", default=[])
    ap.add_argument("--code", nargs="*", default=[])
    ap.add_argument("--max-chars", type=int, default=20000)
    a = ap.parse_args()
    tok = Tokenizer.from_file(a.tokenizer)
    rows = []
    for c in git("log", f"-{a.commits}", "--format=%h").split():
        for f in git("show", "--name-only", "--format=", c).split()[:3]:
            old, new = git("show", f"{c}~1:{f}"), git("show", f"{c}:{f}")
            if old and new and old != new:
                rows.append({"kind": "edit", "text": f"{c} {f}", **repeat_shares(tok, old, new)})
    for path in a.docs + a.code:
        rows.append({"kind": "alone", "text": path, **repeat_shares(tok, "", open(path).read()[:a.max_chars])})
    if len(a.docs) >= 2:
        rows.append({"kind": "answer", "text": f"{a.docs[1]} after {a.docs[0]}",
                     **repeat_shares(tok, open(a.docs[0]).read()[:a.max_chars], open(a.docs[1]).read()[:8000])})
    print(json.dumps({"tokenizer": a.tokenizer, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
