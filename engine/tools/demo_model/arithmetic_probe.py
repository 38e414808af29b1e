# Where the demo model's held-out (or training) sums and differences go wrong, per operator and effort, on our
# engine (greedy, `strata --serve`): a wrong borrow decision in the ones column, a wrong one-digit fact, or a wrong
# answer after right working. v4: thinking off shows the working in the answer too (before v4 it had none).
# Run from engine/tools:  python3 -m demo_model.arithmetic_probe --strata BUILD/engine/strata
#                             --gguf ../../installer/demo/strata-demo.gguf [--per-cell 40] [--out FILE]
import argparse
import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo_model import data, facts  # noqa: E402
from demo_model import tokenizer as demo_tokenizer  # noqa: E402

IM_END = 2


def split_pairs(op, count, seed, held_out=True):
    """count distinct (a, b) for op from one split, drawn as held-out cases are (uniform 0..99, a >= b for -)."""
    rng, pairs = random.Random(seed), []
    while len(pairs) < count:
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        key = (op, max(a, b), min(a, b), None) if op == "-" else (op, a, b, None)
        if data.is_held_out(key) == held_out and key[1:3] not in pairs:
            pairs.append(key[1:3])
    return pairs


def classify(op, a, b, effort, text):
    """'right', or why not: 'decision' (the borrow branch of the ones column of a -), 'fact' (a one-digit fact or
    a copied digit in the working), 'answer' (working right, answer wrong), 'no working' (thinking off: a bare
    answer, as before v4). v3's working names both ones digits before the branch ("Ones: 6 - 9: 6 is less than 9,
    ..."); low effort has the same steps on one line, and v4's answer with thinking off is that line followed by
    "So a - b = c." (facts.thinking_off_answer)."""
    reasoning, _, content = text.rpartition("</think>")
    content = content.strip()
    if effort == "none":
        expected_content = facts.thinking_off_answer(op, a, b)
        got, _, _ = content.partition(" So ")
        expected = facts.column_steps(op, a, b)[1]
    else:
        expected_content = facts.equation(op, a, b)
        got = reasoning.strip().split("\nSo ")[0]
        full, short = facts.column_steps(op, a, b)
        expected = short if effort == "low" else full
    if content == expected_content:
        return "right"
    if effort == "none" and not content.startswith("Ones:"):
        return "no working"
    if got == expected:
        return "answer"
    if op == "-" and ("is less than" in got.split("Tens:")[0]) != (a % 10 < b % 10):
        return "decision"
    return "fact"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--per-cell", type=int, default=40, help="cases per operator and effort")
    parser.add_argument("--split", choices=("held-out", "training"), default="held-out",
                        help="training: pairs the model was trained on, to tell memorised from computed")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    cells = [(op, effort) for op in "+-" for effort in data.EFFORTS]
    jobs = []
    for op, effort in cells:
        for a, b in split_pairs(op, args.per_cell, 7, args.split == "held-out"):  # the same pairs at every effort
            prompt = data.render([{"role": "user", "content": f"What is {a} {op} {b}?"}], None, effort,
                                 add_generation_prompt=True)
            jobs.append((op, effort, a, b, tokenizer.encode(prompt, add_special_tokens=False).ids))
    lines = "".join(f"GEN 120 {','.join(map(str, ids))}\n" for *_, ids in jobs)
    run = subprocess.run([args.strata, "--serve", "--model", args.gguf, "--threads", "2"], input=lines,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"strata --serve failed ({run.returncode}): {run.stderr[-500:]}")
    outputs, current = [], []
    for line in run.stdout.splitlines():
        if line.startswith("T "):
            current.append(int(line.split()[1]))
        elif line.startswith("DONE"):
            outputs.append([t for t in current if t != IM_END])
            current = []
    if len(outputs) != len(jobs):
        raise RuntimeError(f"{len(outputs)} answers for {len(jobs)} prompts")
    table, examples = {}, {}
    for (op, effort, a, b, _), output in zip(jobs, outputs):
        text = tokenizer.decode(output, skip_special_tokens=False)
        verdict = classify(op, a, b, effort, text)
        table.setdefault(f"{op} {effort}", Counter())[verdict] += 1
        if verdict != "right":
            examples.setdefault(f"{op} {effort} {verdict}", text.strip()[:200])
    report = {"split": args.split, "per_cell": args.per_cell, "prompt": "What is {a} {op} {b}?", "table": table,
              "examples": examples}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
