"""The demo model's gateway evaluation (engine/tools/demo_model/evaluate_gateway.py) on the shipped GGUF, one held-out
case per kind: both SDKs get every prompt rendered exactly as the model was trained on it, tool calls come back as
OpenAI tool_calls / Anthropic tool_use with the expected arguments, and thinking follows the effort."""
import json
import os
import subprocess
import sys

from gateway_harness import REPO


def test_gateway_evaluation_one_case_per_kind(engine_bin, tmp_path):
    out = tmp_path / "gateway_eval.json"
    script = os.path.join(REPO, "engine", "tools", "demo_model", "evaluate_gateway.py")
    r = subprocess.run([sys.executable, script, "--strata", engine_bin, "--per-kind", "1", "--log",
                        str(tmp_path / "gateway.log"), "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(out.read_text())
    for api in ("openai", "anthropic"):
        scores = report[api]["scores"]
        assert {"chat", "arithmetic", "counting", "copy", "tool_call", "tool_refusal", "tool_chat"} <= set(scores)
        for group, values in scores.items():
            assert values["prompt_as_trained"] == 1.0, (api, group)
            assert values["thinking_ok"] == 1.0, (api, group)
        assert scores["tool_call"]["tool_call_ok"] == 1.0, report[api]["failures"]
        assert scores["tool_refusal"]["exact"] == 1.0, report[api]["failures"]
