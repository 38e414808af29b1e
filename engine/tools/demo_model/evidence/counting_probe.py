# The counting probe of NEXT_RUN.md §4 ("Why v4") and MODEL_CARD.md: 160 held-out counting cases (40 per effort,
# random.Random(123)) on our engine, greedy (`strata --serve`), scored as evaluate.py scores them, split into item
# lists and ranges. Run: python3 engine/tools/demo_model/evidence/counting_probe.py STRATA GGUF
import json, random, subprocess, sys
from pathlib import Path
from collections import Counter
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from demo_model import data, completion, evaluate_hf
from demo_model import tokenizer as demo_tokenizer
strata, gguf = sys.argv[1], sys.argv[2]
tok = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
rng = random.Random(123)
cases = [data.counting_case(rng, e, True) for e in data.EFFORTS for _ in range(40)]
jobs = []
for c in cases:
    (turn, history), = list(evaluate_hf.turns(c))
    ids = tok.encode(data.render(history, c.tools, c.effort, add_generation_prompt=True), add_special_tokens=False).ids
    jobs.append((c, turn, ids))
lines = "".join(f"GEN 160 {','.join(map(str, ids))}\n" for *_, ids in jobs)
run = subprocess.run([strata, "--serve", "--model", gguf, "--threads", "2"], input=lines, capture_output=True, text=True, timeout=1800)
outs, cur = [], []
for line in run.stdout.splitlines():
    if line.startswith("T "): cur.append(int(line.split()[1]))
    elif line.startswith("DONE"): outs.append([t for t in cur if t != 2]); cur = []
assert len(outs) == len(jobs), (len(outs), run.stderr[-500:])
table, misses = Counter(), []
for (c, turn, _), o in zip(jobs, outs):
    text = tok.decode(o, skip_special_tokens=False)
    r = completion.check(c, completion.parse_completion(text, c.effort != "none"), turn)
    sub = "range" if c.expected["content"][0].isdigit() else "items"
    table[f"{sub} {c.effort} {'right' if r['exact'] else 'wrong'}"] += 1
    if not r["exact"]: misses.append({"effort": c.effort, "prompt": c.messages[-2]["content"], "expected": c.expected["content"], "got": text.strip()[:200]})
print(json.dumps({"table": dict(sorted(table.items())), "misses": misses}, indent=1))
