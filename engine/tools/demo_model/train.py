# Trains the demo model: transformers' Qwen4ExpForCausalLM (vectorised QSA indexer patched in) plus the MTP head,
# jointly (next token + next-next token), loss on assistant tokens only; then evaluates on held-out conversations
# and writes an HF checkpoint (fp16 shards + mtp.safetensors) and train_log.json to --out.
# Run from engine/tools:  python3 -m demo_model.train --out DIR [--steps N] [--device cuda]
import argparse
import json
import math
import multiprocessing
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo_model import data, evaluate_hf, qsa_indexer  # noqa: E402
from demo_model import tokenizer as demo_tokenizer  # noqa: E402
from demo_model.model_config import DEMO, TINY, make_config  # noqa: E402
from demo_model.mtp import MtpHead, WideResidualCapture, init_mtp_weights  # noqa: E402

SEED = 20261129
MTP_LOSS_WEIGHT = 0.5


def _encode_chunk(args):
    seed, chunk, count, max_len = args
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    rows = []
    for pieces in data.training_segments(seed * 100_000 + chunk, count):
        ids, trained = demo_tokenizer.encode_segments(tokenizer, pieces)
        if len(ids) <= max_len:
            rows.append((ids, trained))
    return rows


def make_dataset(seed, conversations, max_len, workers):
    chunk = 2000
    jobs = [(seed, i, min(chunk, conversations - i * chunk), max_len) for i in range((conversations + chunk - 1) // chunk)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return [row for rows in pool.map(_encode_chunk, jobs) for row in rows]


def batches(rows, tokens_per_batch, rng):
    """Length-bucketed batches of about tokens_per_batch tokens (padded), in random order."""
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i][0]), rng.random()))
    result, current, longest = [], [], 0
    for i in order:
        longest_next = max(longest, len(rows[i][0]))
        if current and longest_next * (len(current) + 1) > tokens_per_batch:
            result.append(current)
            current, longest_next = [], len(rows[i][0])
        current.append(i)
        longest = longest_next
    if current:
        result.append(current)
    rng.shuffle(result)
    return result


def collate(rows, indices, pad_id, device):
    length = max(len(rows[i][0]) for i in indices)
    ids = torch.full((len(indices), length), pad_id, dtype=torch.long)
    trained = torch.zeros((len(indices), length), dtype=torch.bool)
    for row, i in enumerate(indices):
        ids[row, :len(rows[i][0])] = torch.tensor(rows[i][0])
        trained[row, :len(rows[i][1])] = torch.tensor(rows[i][1])
    return ids.to(device, non_blocking=True), trained.to(device, non_blocking=True)


def joint_loss(model, head, capture, ids, trained):
    """(main loss on next tokens, MTP loss on next-next tokens, router aux loss); targets are assistant tokens."""
    out = model(input_ids=ids, output_router_logits=True)
    logits = out.logits[:, :-1]
    target_mask = trained[:, 1:]
    main = F.cross_entropy(logits[target_mask].float(), ids[:, 1:][target_mask])
    wide = capture.value  # [B, T, n*H]
    next_embed = model.model.embed_tokens(ids[:, 1:])  # token t+1 for position t
    draft_hidden, _ = head(wide[:, :-1], next_embed)
    draft_logits = model.lm_head(draft_hidden[:, :-1])  # position t predicts t+2
    mtp_mask = trained[:, 2:]
    mtp = F.cross_entropy(draft_logits[mtp_mask].float(), ids[:, 2:][mtp_mask])
    return main, mtp, out.aux_loss


def build(sizes, vocab_size, device, seed):
    from transformers import Qwen4ExpForCausalLM
    torch.manual_seed(seed)
    config = make_config(sizes, vocab_size=vocab_size, eos_token_id=0, pad_token_id=0)
    config._attn_implementation = "sdpa"
    model = Qwen4ExpForCausalLM(config).to(device)
    head = MtpHead(config).to(device)
    init_mtp_weights(head, config.initializer_range)
    return model, head


def save_checkpoint(model, head, out: Path):
    """fp16 HF checkpoint in shards under 16 MiB, plus mtp.safetensors (mtp.* names)."""
    from safetensors.torch import save_file
    model.half().save_pretrained(out, max_shard_size="10MB")
    tensors = {f"mtp.{name}": value.detach().half().contiguous().cpu() for name, value in head.state_dict().items()
               if not name.startswith("rotary_emb")}
    save_file(tensors, str(out / "mtp.safetensors"))
    model.float()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--conversations", type=int, default=200_000)
    parser.add_argument("--tokens-per-batch", type=int, default=24_576)
    parser.add_argument("--max-len", type=int, default=768)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=150)
    parser.add_argument("--max-minutes", type=float, default=1e9, help="stop training early after this long")
    parser.add_argument("--eval-per-kind", type=int, default=24)
    parser.add_argument("--tiny", action="store_true", help="the tiny test config (CPU smoke test)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workers", type=int, default=max(1, min(16, multiprocessing.cpu_count())))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = {"seed": SEED, "args": {k: str(v) for k, v in vars(args).items()}, "steps": []}
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    qsa_indexer.patch_qsa_indexer()

    started = time.time()
    tokenizer = demo_tokenizer.load(demo_tokenizer.TOKENIZER_DIR)
    rows = make_dataset(SEED, args.conversations, args.max_len, args.workers)
    trained_tokens = sum(sum(t) for _, t in rows)
    print(f"data: {len(rows)} conversations, {sum(len(r[0]) for r in rows)} tokens "
          f"({trained_tokens} trained) in {time.time() - started:.1f}s", flush=True)
    model, head = build(TINY if args.tiny else DEMO, tokenizer.get_vocab_size(), args.device, SEED)
    params = sum(p.numel() for p in model.parameters()), sum(p.numel() for p in head.parameters())
    print(f"params: model {params[0]:,}, mtp {params[1]:,}", flush=True)
    log["params"] = {"model": params[0], "mtp": params[1]}
    capture = WideResidualCapture(model)
    parameters = list(model.parameters()) + list(head.parameters())
    decay = [p for p in parameters if p.ndim >= 2]
    no_decay = [p for p in parameters if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    rng = random.Random(SEED)
    plan = []
    model.train()
    head.train()
    train_start = time.time()
    step = 0
    while step < args.steps:
        if not plan:
            plan = batches(rows, args.tokens_per_batch, rng)
        ids, trained = collate(rows, plan.pop(), 0, args.device)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        main_loss, mtp_loss, aux = joint_loss(model, head, capture, ids, trained)
        loss = main_loss + MTP_LOSS_WEIGHT * mtp_loss + model.config.router_aux_loss_coef * aux
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        optimizer.step()
        step += 1
        if step % 25 == 0 or step == 1 or step == args.steps:
            if args.device == "cuda":
                torch.cuda.synchronize()
            elapsed = time.time() - train_start
            entry = {"step": step, "loss": round(main_loss.item(), 4), "mtp_loss": round(mtp_loss.item(), 4),
                     "aux": round(aux.item(), 4), "grad_norm": round(grad_norm.item(), 3),
                     "lr": round(lr_at(step - 1), 6), "seconds": round(elapsed, 1), "batch": list(ids.shape)}
            log["steps"].append(entry)
            print(json.dumps(entry), flush=True)
        if (time.time() - train_start) / 60 > args.max_minutes:
            print(f"stopping at step {step}: --max-minutes reached", flush=True)
            break
    log["train_steps"] = step
    log["train_seconds"] = round(time.time() - train_start, 1)
    capture.remove()

    model.eval()
    head.eval()
    # Round to fp16 before evaluating, so the scores are those of the shipped weights.
    save_checkpoint(model, head, args.out)
    with torch.no_grad():
        for p in list(model.parameters()) + list(head.parameters()):
            p.copy_(p.half().float())
    eval_start = time.time()
    log["eval"] = evaluate_hf.evaluate(model, head, tokenizer, data.held_out_cases(SEED, args.eval_per_kind),
                                       args.device)
    log["eval_seconds"] = round(time.time() - eval_start, 1)
    print(json.dumps(log["eval"], indent=1), flush=True)
    (args.out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")
    print(f"total {time.time() - started:.1f}s", flush=True)


if __name__ == "__main__":
    main()
