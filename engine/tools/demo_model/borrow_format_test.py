# CPU check of a subtraction working format for the next demo run (NEXT_RUN.md §4): the same small model is trained
# on differences only, in v2's working ("Ones: 6 is less than 9, borrow 1: …", the borrow decided on the token after
# "Ones: 6") or in a local one that copies both ones digits first ("Ones: 6 - 9: 6 is less than 9, …"), and scored
# teacher-forced on held-out pairs: the borrow decision token, and the whole working right.
# Run from engine/tools:  python3 -m demo_model.borrow_format_test --format v2|local --steps 300 --batch 32 --out FILE
import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo_model import data, qsa_indexer  # noqa: E402
from demo_model import tokenizer as demo_tokenizer  # noqa: E402
from demo_model.model_config import CPU_COMPARE  # noqa: E402
from demo_model.train import build  # noqa: E402


def v2_steps(a, b):
    """v2's working of a - b (facts.column_steps before v3), which this test compared with the local format."""
    a_ones, a_tens, b_ones, b_tens = a % 10, a // 10, b % 10, b // 10
    borrow = int(a_ones < b_ones)
    ones = a_ones + 10 * borrow - b_ones
    if borrow:
        first = (f"Ones: {a_ones} is less than {b_ones}, borrow 1: {a_ones + 10} - {b_ones} = {ones}. "
                 f"Write {ones}, borrow 1.")
    else:
        first = f"Ones: {a_ones} - {b_ones} = {ones}. Write {ones}, borrow 0."
    return f"{first}\nTens: {a_tens} - {b_tens} - {borrow} = {a_tens - b_tens - borrow}."


def working(fmt, a, b):
    """(reasoning, text before the decision token) for a - b at xhigh."""
    full = v2_steps(a, b)
    a_ones, b_ones = a % 10, b % 10
    if fmt == "v2":
        return full, f"Ones: {a_ones}"
    first, rest = full.split("\n", 1)
    if a_ones < b_ones:
        first = first.replace("Ones: ", f"Ones: {a_ones} - {b_ones}: ", 1)
    else:
        first = first.replace(f"Ones: {a_ones} - {b_ones} = ",
                              f"Ones: {a_ones} - {b_ones}: {a_ones} is not less than {b_ones}: "
                              f"{a_ones} - {b_ones} = ", 1)
    return f"{first}\n{rest}", f"Ones: {a_ones} - {b_ones}: {a_ones} is"


def encode(tokenizer, fmt, a, b):
    """(ids, trained flags, index of the decision token, indices of the reasoning tokens)."""
    reasoning, before = working(fmt, a, b)
    answer = f"{a} - {b} = {a - b}."
    messages = [{"role": "user", "content": f"What is {a} - {b}?"},
                {"role": "assistant", "content": answer, "reasoning_content": f"{reasoning}\nSo {answer}"}]
    pieces = data.segments(data.Case("arithmetic", messages, effort="xhigh"))
    ids, trained = demo_tokenizer.encode_segments(tokenizer, pieces)
    prompt_length = trained.index(True)
    completion = tokenizer.encode(pieces[1][0], add_special_tokens=False)
    decision = next(i for i, (start, _) in enumerate(completion.offsets) if start >= len(before))
    reasoning_end = next(i for i, (start, _) in enumerate(completion.offsets)
                         if start >= pieces[1][0].index("</think>"))
    return ids, trained, prompt_length + decision, range(prompt_length, prompt_length + reasoning_end)


def pairs(held_out):
    return [(a, b) for a in range(100) for b in range(a + 1) if data.is_held_out(("-", a, b, None)) == held_out]


@torch.no_grad()
def score(model, rows):
    decisions, workings = 0, 0
    for ids, _, decision, reasoning in rows:
        predicted = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1)
        decisions += int(predicted[decision - 1] == ids[decision])
        workings += int(all(predicted[i - 1] == ids[i] for i in reasoning))
    return {"decision_right": round(decisions / len(rows), 4), "working_right": round(workings / len(rows), 4),
            "n": len(rows)}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--format", choices=("v2", "local"), required=True)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=48, help="conversations per step")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--held-out", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    qsa_indexer.patch_qsa_indexer()
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    rng = random.Random(args.seed)
    train_rows = [encode(tokenizer, args.format, a, b) for a, b in pairs(False)]
    test_rows = [encode(tokenizer, args.format, a, b) for a, b in rng.sample(pairs(True), args.held_out)]
    v2_layers = ["indexed_attention" if i in (3, 7) else "linear_attention" for i in range(8)]  # as measured
    model, _ = build(dict(CPU_COMPARE, indexer_budget=2048, layer_types=v2_layers), tokenizer.get_vocab_size(), "cpu",
                     args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.05)
    log, started = [], time.time()
    for step in range(1, args.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = args.lr * min(1.0, step / 20)
        batch = rng.sample(train_rows, args.batch)
        length = max(len(ids) for ids, *_ in batch)
        ids = torch.zeros((len(batch), length), dtype=torch.long)
        mask = torch.zeros((len(batch), length), dtype=torch.bool)
        for row, (row_ids, trained, *_) in enumerate(batch):
            ids[row, :len(row_ids)] = torch.tensor(row_ids)
            mask[row, :len(trained)] = torch.tensor(trained)
        logits = model(input_ids=ids).logits[:, :-1]
        loss = F.cross_entropy(logits[mask[:, 1:]], ids[:, 1:][mask[:, 1:]])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == args.steps:
            model.eval()
            entry = {"step": step, "loss": round(loss.item(), 4), "seconds": round(time.time() - started)}
            entry |= score(model, test_rows)
            model.train()
            log.append(entry)
            print(json.dumps(entry), flush=True)
    report = {"format": args.format, "train_pairs": len(train_rows), "example": working(args.format, 36, 29)[0],
              "args": {k: str(v) for k, v in vars(args).items()}, "log": log}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
