# Parsing a generated assistant turn (reasoning, content, XML tool calls) and checking it against a held-out
# case's expected answer; shared by the transformers evaluation and the gateway evaluation.
import re

from demo_model import facts

_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?(?=</parameter>|<parameter=|</function>)", re.S)


def parse_tool_calls(text):
    calls = []
    for block in re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.S):
        match = re.search(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", block, re.S)
        if match:
            calls.append({"name": match.group(1).strip(),
                          "arguments": {k.strip(): v for k, v in _PARAMETER.findall(match.group(2))}})
    return calls


def parse_completion(text, thinking: bool):
    """text: what the model generated after the generation prompt (up to, not including, <|im_end|>).
    Returns dict(reasoning, closed, content, tool_calls). With thinking the output starts inside <think>."""
    reasoning, closed = "", True
    if thinking:
        closed = "</think>" in text
        reasoning, _, text = text.partition("</think>") if closed else (text, "", "")
    content, _, _ = text.partition("<tool_call>")
    return {"reasoning": reasoning.strip(), "closed": closed, "content": content.strip(),
            "tool_calls": parse_tool_calls(text)}


def same_arguments(got: dict, expected: dict) -> bool:
    """Arguments compare as text (a tool call carries text; numbers are parsed with the schema by the gateway)."""
    return {k: str(v).strip() for k, v in got.items()} == {k: str(v) for k, v in expected.items()}


def check(case, parsed, turn="first"):
    """Score one generated turn: dict of booleans (exact answer, tool call right, thinking behaviour)."""
    thinking = case.effort != "none"
    result = {"thinking_ok": (parsed["closed"] and bool(parsed["reasoning"])) if thinking else not parsed["reasoning"]}
    expected = case.expected
    if turn == "after_tool":
        result["exact"] = parsed["content"] == expected["content_after_tool"] and not parsed["tool_calls"]
        return result
    if expected.get("tool_call"):
        call = expected["tool_call"]
        calls = parsed["tool_calls"]
        result["tool_call_ok"] = (len(calls) == 1 and calls[0]["name"] == call["name"]
                                  and same_arguments(calls[0]["arguments"], call["arguments"]))
        result["exact"] = result["tool_call_ok"] and parsed["content"] == ""
    else:
        result["exact"] = parsed["content"] == expected["content"] and not parsed["tool_calls"]
    return result


def argument_types(name):
    """The JSON-schema type of each parameter of a demo tool (for comparing parsed OpenAI/Anthropic arguments)."""
    return {k: v.get("type", "string") for k, v in facts.TOOLS[name]["function"]["parameters"]["properties"].items()}
