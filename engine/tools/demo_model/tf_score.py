# Teacher-forced held-out scores of a saved demo checkpoint, per kind: the share of assistant tokens predicted right
# and of final answers (the tokens after </think> of the last trained turn) predicted right on every token.
# Uses only the data/tokenizer API that v1 and v2 share, so compare_recipes.py runs it in both trees.
# Run from engine/tools:  python3 -m demo_model.tf_score CHECKPOINT_DIR [--per-kind 16] [--seed 20261129]
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo_model import data, qsa_indexer  # noqa: E402
from demo_model import tokenizer as demo_tokenizer  # noqa: E402

THINK_END = "</think>"


def answer_mask(tokenizer, pieces):
    """Per token: True on the final answer of the last trained piece (after </think> when there is one)."""
    mask = []
    trained_pieces = [i for i, (_, trained) in enumerate(pieces) if trained]
    for index, (text, trained) in enumerate(pieces):
        count = len(tokenizer.encode(text, add_special_tokens=False).ids)
        if index != trained_pieces[-1]:
            mask += [False] * count
            continue
        head = text[:text.index(THINK_END) + len(THINK_END)] if THINK_END in text else ""
        head_count = len(tokenizer.encode(head, add_special_tokens=False).ids) if head else 0
        mask += [False] * head_count + [True] * (count - head_count)
    return mask


@torch.no_grad()
def score(model, tokenizer, cases):
    sums = defaultdict(lambda: [0, 0, 0, 0])  # kind -> [right tokens, tokens, right answers, answers]
    for case in cases:
        pieces = data.segments(case)
        if not any(trained for _, trained in pieces):
            continue  # v1 made a few tool cases whose only assistant turn is history (nothing to score)
        ids, trained = demo_tokenizer.encode_segments(tokenizer, pieces)
        answer = answer_mask(tokenizer, pieces)
        if len(answer) != len(ids):  # the answer boundary split a token: score the whole turn as the answer
            answer = trained
        x = torch.tensor([ids], device=next(model.parameters()).device)
        hits = (model(input_ids=x).logits[0, :-1].argmax(-1) == x[0, 1:]).tolist()
        kind = sums[case.kind]
        kind[0] += sum(h for h, t in zip(hits, trained[1:]) if t)
        kind[1] += sum(trained[1:])
        kind[2] += int(all(h for h, a in zip(hits, answer[1:]) if a))
        kind[3] += 1
    return {kind: {"token_accuracy": round(a / max(1, b), 4), "answer_exact": round(c / d, 4), "n": d}
            for kind, (a, b, c, d) in sums.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--per-kind", type=int, default=16)
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args()
    from transformers import Qwen4ExpForCausalLM
    qsa_indexer.patch_qsa_indexer()
    model = Qwen4ExpForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32).eval()
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    print(json.dumps(score(model, tokenizer, data.held_out_cases(args.seed, args.per_kind))))


if __name__ == "__main__":
    main()
