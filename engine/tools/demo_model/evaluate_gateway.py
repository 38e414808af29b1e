# Held-out evaluation of the demo GGUF through the real gateway (`python -m gateway` on our engine, CPU), driven by
# the official openai (non-streamed) and anthropic (streamed) SDKs: tool calls must come back as OpenAI `tool_calls` /
# Anthropic `tool_use` with the right function and typed arguments, answers must be exact, thinking per effort.
# Run from the repo root:  python3 engine/tools/demo_model/evaluate_gateway.py --strata build/engine/strata
#                              [--gguf installer/demo/strata-demo.gguf] [--mtp installer/demo/strata-demo-mtp.gguf]
#                              [--per-kind 32] [--out installer/demo/gateway_eval.json]
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from demo_model import data, evaluate_hf  # noqa: E402
from demo_model import tokenizer as demo_tokenizer  # noqa: E402
from demo_model.train import SEED  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
SIGNATURE = "strata"  # the gateway's thinking-block signature, sent back unchanged as clients do


class GatewayProcess:
    """`python -m gateway` on a free 127.0.0.1 port, its log in log_path; stop() ends it with SIGINT."""

    def __init__(self, gguf, strata, mtp, ctx, log_path: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "w")
        extra = ["--engine-arg=--mtp", f"--engine-arg={mtp}"] if mtp else []
        self.proc = subprocess.Popen([sys.executable, "-m", "gateway", "--model", str(gguf), "--engine", str(strata),
                                      "--port", str(self.port), "--ctx", str(ctx), *extra],
                                     cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}; see {log_path}")
            try:
                if requests.get(self.url + "/health", timeout=2).json().get("status") == "ok":
                    return
            except (requests.ConnectionError, requests.Timeout, ValueError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"gateway not ready after 300 s; see {log_path}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ----------------------------------------------------------------------------------------------------------------
# A held-out history in each API's request form

def openai_messages(history):
    messages = []
    for index, m in enumerate(history):
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{"id": f"call_{index}_{j}", "type": "function",
                                "function": {"name": c["function"]["name"],
                                             "arguments": json.dumps(c["function"]["arguments"])}}
                               for j, c in enumerate(m["tool_calls"])]
        if m["role"] == "tool":
            m["tool_call_id"] = f"call_{index - 1}_0"
        if not m.get("reasoning_content"):
            m.pop("reasoning_content", None)
        messages.append(m)
    return messages


def anthropic_request(history):
    """(system, messages): assistant turns become thinking/text/tool_use blocks, tool replies tool_result blocks."""
    system, messages = None, []
    for index, m in enumerate(history):
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "user":
            messages.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool":
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{index - 1}_0",
                                                          "content": m["content"]}]})
        else:
            blocks = []
            if m.get("reasoning_content"):
                blocks.append({"type": "thinking", "thinking": m["reasoning_content"], "signature": SIGNATURE})
            if m.get("content"):
                blocks.append({"type": "text", "text": m["content"]})
            for j, c in enumerate(m.get("tool_calls") or []):
                blocks.append({"type": "tool_use", "id": f"toolu_{index}_{j}", "name": c["function"]["name"],
                               "input": c["function"]["arguments"]})
            messages.append({"role": "assistant", "content": blocks})
    return system, messages


def anthropic_tools(tools):
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in tools]


# ----------------------------------------------------------------------------------------------------------------
# Asking and scoring. An answer is {reasoning, content, calls: [(name, arguments)], finish, prompt_tokens}.

def ask_openai(client, case, history, max_tokens):
    kwargs = {"tools": case.tools} if case.tools else {}
    r = client.chat.completions.create(model="demo", messages=openai_messages(history), max_tokens=max_tokens,
                                       temperature=0, reasoning_effort=case.effort, **kwargs)
    message = r.choices[0].message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
    return {"reasoning": getattr(message, "reasoning_content", None) or "", "content": message.content or "",
            "calls": calls, "finish": r.choices[0].finish_reason, "prompt_tokens": r.usage.prompt_tokens}


def ask_anthropic(client, case, history, max_tokens):
    system, messages = anthropic_request(history)
    kwargs = {"tools": anthropic_tools(case.tools)} if case.tools else {}  # greedy: the gateway's default
    if system:
        kwargs["system"] = system
    if case.effort == "none":
        kwargs["thinking"] = {"type": "disabled"}
    else:
        kwargs["output_config"] = {"effort": case.effort}
    with client.messages.stream(model="demo", messages=messages, max_tokens=max_tokens, **kwargs) as stream:
        msg = stream.get_final_message()
    return {"reasoning": "".join(b.thinking for b in msg.content if b.type == "thinking"),
            "content": "".join(b.text for b in msg.content if b.type == "text"),
            "calls": [(b.name, b.input) for b in msg.content if b.type == "tool_use"],
            "finish": {"end_turn": "stop", "tool_use": "tool_calls"}.get(msg.stop_reason, msg.stop_reason),
            "prompt_tokens": msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)}


def check(case, turn, answer):
    """Booleans for one turn. Thinking on: reasoning present and closed (the turn ended with an answer or a call,
    not by running out of tokens); off: no reasoning at all."""
    ended = answer["finish"] in ("stop", "tool_calls") and bool(answer["content"].strip() or answer["calls"])
    thinking = case.effort != "none"
    result = {"thinking_ok": (bool(answer["reasoning"].strip()) and ended) if thinking
              else not answer["reasoning"].strip()}
    expected = case.expected
    content, calls = answer["content"].strip(), answer["calls"]
    if turn == "after_tool":
        result["exact"] = content == expected["content_after_tool"] and not calls and answer["finish"] == "stop"
    elif expected.get("tool_call"):
        call = expected["tool_call"]
        result["tool_call_ok"] = (len(calls) == 1 and calls[0][0] == call["name"]
                                  and calls[0][1] == dict(call["arguments"]) and answer["finish"] == "tool_calls")
        result["exact"] = result["tool_call_ok"] and content == ""
    else:
        result["exact"] = content == expected["content"] and not calls and answer["finish"] == "stop"
    return result


def summarise(rows):
    groups = defaultdict(lambda: defaultdict(list))
    for row in rows:
        kind = row["kind"] if row["turn"] == "first" else row["kind"] + "_after_tool"
        for group in (kind, "effort_" + row["effort"]):
            for name, value in row["result"].items():
                groups[group][name].append(value)
            groups[group]["prompt_as_trained"].append(row["prompt_as_trained"])
    return {group: {name: round(sum(v) / len(v), 4) for name, v in values.items()} | {"n": len(values["exact"])}
            for group, values in groups.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True, help="the engine binary")
    parser.add_argument("--gguf", type=Path, default=REPO / "installer" / "demo" / "strata-demo.gguf")
    parser.add_argument("--mtp", type=Path, default=REPO / "installer" / "demo" / "strata-demo-mtp.gguf",
                        help="the MTP head GGUF the installer runs with ('' for none)")
    parser.add_argument("--per-kind", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--apis", default="openai,anthropic")
    parser.add_argument("--tokenizer", type=Path, default=demo_tokenizer.TOKENIZER_DIR)
    parser.add_argument("--log", type=Path, default=Path("/tmp/evaluate_gateway.log"), help="the gateway's log")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import anthropic
    import openai

    tokenizer = demo_tokenizer.load(args.tokenizer)
    jobs = [(case, turn, history) for case in data.held_out_cases(SEED, args.per_kind)
            for turn, history in evaluate_hf.turns(case)]
    gateway = GatewayProcess(args.gguf, args.strata, str(args.mtp) if str(args.mtp) else None, 4096, args.log)
    clients = {"openai": (openai.OpenAI(base_url=gateway.url + "/v1", api_key="none", max_retries=0, timeout=300),
                          ask_openai),
               "anthropic": (anthropic.Anthropic(base_url=gateway.url, api_key="none", max_retries=0, timeout=300),
                             ask_anthropic)}
    report = {"prompts": len(jobs), "gguf": args.gguf.name, "mtp": args.mtp.name if str(args.mtp) else None}
    started = time.time()
    try:
        for api in args.apis.split(","):
            client, ask = clients[api]
            rows, failures = [], []
            for index, (case, turn, history) in enumerate(jobs):
                answer = ask(client, case, history, args.max_tokens)
                prompt = data.render(history, case.tools, case.effort, add_generation_prompt=True)
                trained_length = len(tokenizer.encode(prompt, add_special_tokens=False).ids)
                result = check(case, turn, answer)
                rows.append({"kind": case.kind, "turn": turn, "effort": case.effort, "result": result,
                             "prompt_as_trained": answer["prompt_tokens"] == trained_length})
                if not all(result.values()) and len(failures) < 40:
                    failures.append({"index": index, "kind": case.kind, "turn": turn, "effort": case.effort,
                                     "expected": case.expected, "got": answer})
                if (index + 1) % 25 == 0:
                    print(f"{api}: {index + 1}/{len(jobs)} turns, {time.time() - started:.0f} s", flush=True)
            report[api] = {"scores": summarise(rows), "failures": failures}
    finally:
        gateway.stop()
    report["seconds"] = round(time.time() - started, 1)
    text = json.dumps(report, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
