# Held-out evaluation of the demo model with transformers: teacher-forced token accuracy, greedy answers (exact
# answers, tool calls, thinking behaviour, per kind and effort) and the MTP head's greedy draft acceptance, depth 1-3.
from collections import defaultdict

import torch

from demo_model import completion, data
from demo_model import tokenizer as demo_tokenizer
from demo_model.mtp import WideResidualCapture

IM_END, ENDOFTEXT = 2, 0


def turns(case):
    """[(turn name, history)] to generate: the answer to the last user query, and the answer after the tool."""
    messages = data.strip_untrained_flags(case.messages)
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user" and m is not None
                    and not m["content"].startswith("<tool_response>"))
    result = [("first", messages[:last_user + 1])]
    tool_index = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    if tool_index:
        result.append(("after_tool", messages[:tool_index[-1] + 1]))
    return result


@torch.no_grad()
def greedy(model, prompts, device, max_new_tokens=160, batch_size=64):
    """prompts: lists of token ids. Returns the generated ids of each (up to and including the stop token)."""
    outputs = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        length = max(len(p) for p in chunk)
        ids = torch.zeros((len(chunk), length), dtype=torch.long)
        mask = torch.zeros((len(chunk), length), dtype=torch.long)
        for row, prompt in enumerate(chunk):
            ids[row, length - len(prompt):] = torch.tensor(prompt)
            mask[row, length - len(prompt):] = 1
        generated = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                                   max_new_tokens=max_new_tokens, eos_token_id=[IM_END, ENDOFTEXT], pad_token_id=0)
        for row in generated[:, length:].tolist():
            cut = next((i + 1 for i, t in enumerate(row) if t in (IM_END, ENDOFTEXT)), len(row))
            outputs.append(row[:cut])
    return outputs


@torch.no_grad()
def teacher_forced(model, tokenizer, cases, device):
    correct = total = exact = 0
    for case in cases:
        ids, trained = demo_tokenizer.encode_segments(tokenizer, data.segments(case))
        x = torch.tensor([ids], device=device)
        predicted = model(input_ids=x).logits[0, :-1].argmax(-1)
        mask = torch.tensor(trained[1:], device=device)
        hits = (predicted == x[0, 1:])[mask]
        correct += int(hits.sum())
        total += int(hits.numel())
        exact += int(bool(hits.all()))
    return {"token_accuracy": round(correct / max(1, total), 4), "conversation_exact": round(exact / len(cases), 4)}


@torch.no_grad()
def mtp_drafts(model, head, sequence, depth, device):
    """Greedy drafts for one token sequence: drafts[k][t] is the head's guess for token t+2+k given the tokens up
    to t+1 (depth 1 uses the trunk's state at t; deeper drafts chain the head's own wide output and its previous
    draft). One forward: real slots t (pairs X_t, token t+1) plus, per depth, chained slots that see the real slots
    up to t and their own chain; positions t, t+1, ..."""
    capture = WideResidualCapture(model)
    ids = torch.tensor([sequence], device=device)
    model(input_ids=ids)
    capture.remove()
    wide = capture.value[:, :-1]  # X_0 .. X_{N-2}
    embed = model.model.embed_tokens
    count = wide.shape[1]
    drafts = []
    wide_inputs, embed_inputs = [wide], [embed(ids[:, 1:])]
    for level in range(depth):
        slots = count * (level + 1)
        index = torch.arange(slots, device=device)
        slot_level, slot_t = index // count, index % count
        # query (level a, t) sees key (0, t') for t' <= t and key (b, t) for 1 <= b <= a
        mask = ((slot_level[None, :] == 0) & (slot_t[None, :] <= slot_t[:, None])) | \
               ((slot_t[None, :] == slot_t[:, None]) & (slot_level[None, :] <= slot_level[:, None]))
        positions = (slot_t + slot_level)[None]
        hidden, wide_out = head(torch.cat(wide_inputs, 1), torch.cat(embed_inputs, 1), positions,
                                mask[None, None])
        last_hidden, last_wide = hidden[:, level * count:], wide_out[:, level * count:]
        draft = model.lm_head(last_hidden).argmax(-1)  # [1, count]
        drafts.append(draft[0].tolist())
        wide_inputs.append(last_wide)
        embed_inputs.append(embed(draft))
    return drafts


def mtp_acceptance(model, head, sequences, prompt_lengths, device, depth=3):
    """Per depth k: the share of decode positions whose first k drafts all equal the greedy continuation."""
    accepted, total = [0] * depth, [0] * depth
    for sequence, prompt_length in zip(sequences, prompt_lengths):
        drafts = mtp_drafts(model, head, sequence, depth, device)
        # decode step after token t+1 was produced: t+1 >= prompt_length - 1 (the last prompt token onwards)
        for t in range(max(0, prompt_length - 2), len(sequence) - 2):
            ok = True
            for k in range(depth):
                if t + 2 + k >= len(sequence):
                    break
                ok = ok and drafts[k][t] == sequence[t + 2 + k]
                total[k] += 1
                accepted[k] += int(ok)
    return {f"depth_{k + 1}": round(accepted[k] / max(1, total[k]), 4) for k in range(depth)} | \
        {"positions": total[0]}


def evaluate(model, head, tokenizer, cases, device, mtp_sequences=48):
    jobs = []  # (case, turn, prompt ids)
    for case in cases:
        for turn, history in turns(case):
            prompt = data.render(history, case.tools, case.effort, add_generation_prompt=True)
            jobs.append((case, turn, tokenizer.encode(prompt, add_special_tokens=False).ids))
    generated = greedy(model, [job[2] for job in jobs], device)
    scores = defaultdict(lambda: defaultdict(list))
    samples = []
    for (case, turn, prompt), output in zip(jobs, generated):
        text = tokenizer.decode([t for t in output if t not in (IM_END, ENDOFTEXT)], skip_special_tokens=False)
        parsed = completion.parse_completion(text, case.effort != "none")
        result = completion.check(case, parsed, turn)
        group = case.kind if turn == "first" else case.kind + "_after_tool"
        for name, value in result.items():
            scores[group][name].append(value)
            scores["effort_" + case.effort][name].append(value)
        if len(samples) < 40 and (not result["exact"] or len(samples) < 12):
            samples.append({"kind": group, "effort": case.effort, "output": text, **result})
    summary = {group: {name: round(sum(v) / len(v), 4) for name, v in values.items()} | {"n": len(values["exact"])}
               for group, values in scores.items()}
    # MTP acceptance on turns spread evenly over the kinds (the jobs are ordered by kind)
    picked = list(range(0, len(jobs), max(1, len(jobs) // mtp_sequences)))[:mtp_sequences]
    sequences = [jobs[i][2] + generated[i] for i in picked]
    return {"greedy": summary,
            "teacher_forced": teacher_forced(model, tokenizer, cases, device),
            "mtp_acceptance": mtp_acceptance(model, head, sequences, [len(jobs[i][2]) for i in picked], device),
            "samples": samples}
