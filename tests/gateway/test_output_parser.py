"""The streaming output parser on recorded answers in the model's format, tokenized with the real vocabulary: fed
token by token and split at every byte boundary, the joined result is identical; no partial tag is ever emitted."""
from __future__ import annotations

import codecs
import json

import pytest

from gateway.text.detokenizer import Detokenizer
from gateway.text.output_parser import OutputParser, ParsedOutput

SCHEMAS = {
    "get_weather": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "ratio": {"type": "number"}, "tags": {"type": "array"}, "opts": {"type": "object"},
        "note": {"type": ["string", "null"]}}},
    "run": {"type": "object", "properties": {"command": {"type": "string"}}},
}

# (name, thinking prompt?, model output, expected reasoning, content, [(name, arguments)])
RECORDED = [
    ("reasoning then text", True, "Let me think.\nIt is 4.\n</think>\n\nThe answer is **4**. 😀<|im_end|>",
     "Let me think.\nIt is 4.", "The answer is **4**. 😀", []),
    ("no thinking", False, "Plain answer, 日本語 and <b>html</b> & a < b.<|im_end|>",
     "", "Plain answer, 日本語 and <b>html</b> & a < b.", []),
    ("one call", True,
     "User wants weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call><|im_end|>",
     "User wants weather.", "", [("get_weather", {"city": "Paris", "days": 2})]),
    ("text then two calls, typed values", False,
     "I'll check both.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
     "<parameter=metric>\ntrue\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n<parameter=tags>\n[\"a\", 1]\n"
     "</parameter>\n<parameter=opts>\n{'x': None}\n</parameter>\n<parameter=note>\nnull\n</parameter>\n</function>\n"
     "</tool_call>\n<tool_call>\n<function=run>\n<parameter=command>\nls -la\n</parameter>\n</function>\n"
     "</tool_call><|im_end|>",
     "", "I'll check both.",
     [("get_weather", {"city": "São Paulo", "metric": True, "ratio": 0.5, "tags": ["a", 1], "opts": {"x": None},
                       "note": None}), ("run", {"command": "ls -la"})]),
    ("closing tag inside a value, multi-line code", False,
     "<tool_call>\n<function=run>\n<parameter=command>\necho '</parameter>' > x.xml\n\ncat x.xml\n</parameter>\n"
     "</function>\n</tool_call>",
     "", "", [("run", {"command": "echo '</parameter>' > x.xml\n\ncat x.xml"})]),
    ("missing closers and bad values", False,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\nthree\n</function>\n"
     "</tool_call>",
     "", "", [("get_weather", {"city": "Oslo", "days": "three"})]),
    ("bare function without wrapper", False,
     "Sure.\n<function=run>\n<parameter=command>\npwd\n</parameter>\n</function>",
     "", "Sure.", [("run", {"command": "pwd"})]),
    ("tool call inside thinking", True,
     "Need data.\n<tool_call>\n<function=run>\n<parameter=command>\ndate\n</parameter>\n</function>\n</tool_call>",
     "Need data.", "", [("run", {"command": "date"})]),
    ("unterminated call (cut by max_tokens)", False,
     "<tool_call>\n<function=run>\n<parameter=command>\nfind / -name '*.py' | hea",
     "", "", [("run", {"command": "find / -name '*.py' | hea"})]),
    ("no parameters", True, "</think>\n\n<tool_call>\n<function=run>\n</function>\n</tool_call>", "", "",
     [("run", {})]),
    ("unterminated name is given back as text", False, "Try <function=ru", "", "Try <function=ru", []),
    ("unknown tool, untyped values stay strings", False,
     "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>",
     "", "", [("other", {"n": "5"})]),
]

TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=",
        "</parameter>")


def parse(pieces: list[str], thinking: bool) -> tuple[ParsedOutput, list]:
    counter = iter(range(1000))
    parser = OutputParser(SCHEMAS, thinking, call_id_factory=lambda: f"call_{next(counter)}")
    out, deltas = ParsedOutput(), []
    for piece in pieces:
        deltas += parser.feed(piece)
    deltas += parser.finish()
    for d in deltas:
        out.add(d)
    return out, deltas


def check(out: ParsedOutput, reasoning: str, content: str, calls: list) -> None:
    assert out.reasoning == reasoning
    assert out.content == content
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == calls
    for text in (out.reasoning, out.content):
        assert not any(tag in text for tag in TAGS if tag not in (reasoning + content))


@pytest.mark.parametrize("case", RECORDED, ids=[c[0] for c in RECORDED])
def test_recorded_stream_token_by_token(case, tokenizer):
    name, thinking, text, reasoning, content, calls = case
    ids = tokenizer.encode(text)
    detok = Detokenizer(tokenizer)
    pieces = [detok.push(i) for i in ids if i not in tokenizer.stop_ids] + [detok.flush()]
    out, deltas = parse(pieces, thinking)
    check(out, reasoning, content, calls)
    starts = [d for d in deltas if d.kind == "tool_start"]
    assert [d.index for d in starts] == list(range(len(calls)))
    assert all(d.call_id.startswith("call_") for d in starts)


@pytest.mark.parametrize("case", RECORDED, ids=[c[0] for c in RECORDED])
def test_recorded_stream_split_at_every_byte(case):
    name, thinking, text, reasoning, content, calls = case
    text = text.replace("<|im_end|>", "")
    whole, _ = parse([text], thinking)
    check(whole, reasoning, content, calls)
    data = text.encode()
    for cut in range(len(data) + 1):
        dec = codecs.getincrementaldecoder("utf-8")()
        pieces = [dec.decode(data[:cut]), dec.decode(data[cut:], final=True)]
        out, _ = parse(pieces, thinking)
        assert out == whole, f"split at byte {cut} differs"
    out, _ = parse(list(text), thinking)  # one character at a time
    assert out == whole


def test_names_stream_first_and_arguments_in_pieces():
    text = ("<tool_call>\n<function=run>\n<parameter=command>\n" + "x" * 50 + "\n</parameter>\n</function>\n"
            "</tool_call>")
    counter = iter(range(10))
    parser = OutputParser(SCHEMAS, False, call_id_factory=lambda: f"call_{next(counter)}")
    seen = []
    for ch in text:
        seen.append(parser.feed(ch))
    seen.append(parser.finish())
    flat = [d for batch in seen for d in batch]
    assert flat[0].kind == "tool_start" and flat[0].name == "run"
    first_start = next(i for i, batch in enumerate(seen) if batch)
    assert first_start == len("<tool_call>\n<function=run>") - 1   # emitted at the name's '>'
    arg_batches = [b for b in seen if any(d.kind == "tool_args" for d in b)]
    assert len(arg_batches) > 10   # the string value streamed as it came
    assert flat[-1].kind == "tool_end"
    assert json.loads("".join(d.text for d in flat if d.kind == "tool_args")) == {"command": "x" * 50}


def test_partial_tags_are_held_back():
    parser = OutputParser(SCHEMAS, False)
    assert [d.text for d in parser.feed("Hello <tool_")] == ["Hello"]
    assert parser.feed("ca") == []
    deltas = parser.feed("t> no, a plain ending")
    assert [(d.kind, d.text) for d in deltas] == [("content", " <tool_cat> no, a plain ending")]
