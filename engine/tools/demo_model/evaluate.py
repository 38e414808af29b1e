# Held-out evaluation of the shipped demo GGUF on our engine (CPU, `strata generate`, greedy): exact answers,
# tool calls and thinking behaviour per kind, and greedy agreement with transformers on the same prompts.
# Run from engine/tools:  python3 -m demo_model.evaluate --strata BUILD/engine/strata --gguf installer/demo/strata-demo.gguf
#                                                        --hf-dir CHECKPOINT [--per-kind 32] [--agreement 24]
# The same held-out cases through the gateway's OpenAI tool_calls / Anthropic tool_use: evaluate_gateway.py.
import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo_model import completion, data, evaluate_hf  # noqa: E402
from demo_model import tokenizer as demo_tokenizer  # noqa: E402
from demo_model.train import SEED  # noqa: E402

STOP_IDS = (evaluate_hf.IM_END, evaluate_hf.ENDOFTEXT)


def engine_greedy(strata: str, gguf: str, prompt_ids, max_new_tokens=160, threads=2):
    result = subprocess.run([strata, "generate", "--model", gguf, "--prompt-ids", ",".join(map(str, prompt_ids)),
                             "-n", str(max_new_tokens), "--threads", str(threads)],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"strata generate failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    ids = [int(t) for t in result.stdout.strip().splitlines()[0].split(",") if t]
    cut = next((i + 1 for i, t in enumerate(ids) if t in STOP_IDS), len(ids))
    return ids[:cut]


def jobs_for(cases, tokenizer):
    jobs = []
    for case in cases:
        for turn, history in evaluate_hf.turns(case):
            prompt = data.render(history, case.tools, case.effort, add_generation_prompt=True)
            jobs.append((case, turn, tokenizer.encode(prompt, add_special_tokens=False).ids))
    return jobs


def score(jobs, outputs, tokenizer):
    scores = defaultdict(lambda: defaultdict(list))
    for (case, turn, _), output in zip(jobs, outputs):
        text = tokenizer.decode([t for t in output if t not in STOP_IDS], skip_special_tokens=False)
        result = completion.check(case, completion.parse_completion(text, case.effort != "none"), turn)
        for group in (case.kind if turn == "first" else case.kind + "_after_tool", "effort_" + case.effort):
            for name, value in result.items():
                scores[group][name].append(value)
    return {group: {name: round(sum(v) / len(v), 4) for name, v in values.items()} | {"n": len(values["exact"])}
            for group, values in scores.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--gguf", required=True)
    parser.add_argument("--hf-dir", help="HF checkpoint of the same weights, for the greedy agreement check")
    parser.add_argument("--per-kind", type=int, default=32)
    parser.add_argument("--agreement", type=int, default=24, help="prompts compared with transformers")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tokenizer", type=Path, default=demo_tokenizer.TOKENIZER_DIR,
                        help="the tokenizer of the GGUF (default: the shipped one, tokenizer/)")
    args = parser.parse_args()
    tokenizer = demo_tokenizer.load(args.tokenizer)
    jobs = jobs_for(data.held_out_cases(SEED, args.per_kind), tokenizer)
    outputs = [engine_greedy(args.strata, args.gguf, prompt) for _, _, prompt in jobs]
    report = {"engine_greedy": score(jobs, outputs, tokenizer), "prompts": len(jobs)}
    if args.hf_dir and args.agreement:
        import torch
        from transformers import Qwen4ExpForCausalLM

        from demo_model import qsa_indexer
        qsa_indexer.patch_qsa_indexer()
        model = Qwen4ExpForCausalLM.from_pretrained(args.hf_dir, dtype=torch.float32).eval()
        step = max(1, len(jobs) // args.agreement)
        picked = list(range(0, len(jobs), step))[:args.agreement]
        same = 0
        mismatches = []
        for index in picked:
            hf = evaluate_hf.greedy(model, [jobs[index][2]], "cpu", batch_size=1)[0]
            if hf == outputs[index]:
                same += 1
            else:
                mismatches.append({"prompt_index": index, "engine": tokenizer.decode(outputs[index], False),
                                   "transformers": tokenizer.decode(hf, False)})
        report["agreement"] = {"identical": same, "compared": len(picked), "mismatches": mismatches}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
