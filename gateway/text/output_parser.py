"""THE streaming output state machine: model text in (any split), typed deltas out — reasoning, content, and XML
tool calls (`<tool_call><function=NAME><parameter=KEY>value</parameter>…</function></tool_call>`, CLIENTS.md §2).

Rules: a partial tag is never emitted (text that could still become a tag is held back); a call's name is emitted as
soon as its `>` arrives, then its arguments as JSON fragments (string values stream as they come, other values when
complete, converted by the tool's JSON schema); `</parameter>` ends a value only when a `<parameter=`, `</function>`
or `</tool_call>` follows it, so it may appear inside a value; an unterminated call is closed at the end. The
non-stream answer is these deltas joined, so the two can never disagree.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Callable

from gateway.text.tool_args import convert_value, is_string_param

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
FUNC_OPEN, FUNC_CLOSE = "<function=", "</function>"
PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"
VALUE_ENDS = (PARAM_OPEN, FUNC_CLOSE, CALL_CLOSE)  # what may follow a real </parameter>
MAX_NAME_CHARS = 256


@dataclass
class Delta:
    kind: str            # "reasoning" | "content" | "tool_start" | "tool_args" | "tool_end"
    text: str = ""       # reasoning / content text, or a JSON fragment of the arguments
    index: int = 0       # tool-call index within the answer
    call_id: str = ""    # tool_start only
    name: str = ""       # tool_start only


@dataclass
class ParsedCall:
    call_id: str
    name: str
    arguments: str = ""  # the JSON text, joined from the fragments


@dataclass
class ParsedOutput:
    """Deltas joined: what a non-stream answer holds."""
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ParsedCall] = field(default_factory=list)

    def add(self, d: Delta) -> None:
        if d.kind == "reasoning":
            self.reasoning += d.text
        elif d.kind == "content":
            self.content += d.text
        elif d.kind == "tool_start":
            self.tool_calls.append(ParsedCall(d.call_id, d.name))
        elif d.kind == "tool_args":
            self.tool_calls[d.index].arguments += d.text


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _partial_tag_at(text: str, tags: tuple[str, ...]) -> int:
    """Index of the earliest suffix of text that is a proper prefix of one of the tags (len(text) if none)."""
    for i in range(max(0, len(text) - max(len(t) for t in tags) + 1), len(text)):
        tail = text[i:]
        if any(t.startswith(tail) for t in tags):
            return i
    return len(text)


class OutputParser:
    """Feed text with feed(); call finish() at the end. Both return the new deltas."""

    def __init__(self, tool_schemas: dict[str, dict] | None = None, starts_in_reasoning: bool = False,
                 call_id_factory: Callable[[], str] = new_call_id):
        self._schemas = tool_schemas or {}          # tool name -> its parameters schema
        self._new_id = call_id_factory
        self._buf = ""
        self._state = "reasoning_start" if starts_in_reasoning else "content_start"
        self._out: list[Delta] = []
        self._held_space = ""       # whitespace held back in reasoning/content (dropped before a tag or the end)
        self._space_before_tag = ""
        self._calls = 0
        self._call_name = ""
        self._n_params = 0
        self._param_name = ""
        self._value = ""            # raw text of the current value so far (after the one leading newline)
        self._value_sent = 0        # chars of _value already streamed (string values)
        self._value_streaming = False
        self._value_started = False

    # ---- public -------------------------------------------------------------------------------------------

    @property
    def tool_call_count(self) -> int:
        return self._calls

    def feed(self, text: str) -> list[Delta]:
        self._buf += text
        self._run(final=False)
        return self._take()

    def finish(self) -> list[Delta]:
        self._run(final=True)
        if self._state in ("params", "param_name", "value"):  # an unterminated call: close what it has
            self._close_call(final=True)
        self._held_space = ""
        return self._take()

    # ---- machinery ----------------------------------------------------------------------------------------

    def _take(self) -> list[Delta]:
        out, self._out = self._out, []
        return out

    def _emit(self, kind: str, text: str = "", **kw) -> None:
        if kind in ("reasoning", "content", "tool_args") and not text:
            return
        last = self._out[-1] if self._out else None
        if last is not None and last.kind == kind and kind in ("reasoning", "content"):
            last.text += text
        elif last is not None and last.kind == kind == "tool_args" and last.index == kw.get("index"):
            last.text += text
        else:
            self._out.append(Delta(kind, text, **kw))

    def _emit_text(self, kind: str, text: str) -> None:
        """Text with its trailing whitespace held back (it is dropped if a tag or the end comes next)."""
        if not text:
            return
        body = text.rstrip()
        if body:
            self._emit(kind, self._held_space + body)
            self._held_space = text[len(body):]
        else:
            self._held_space += text

    def _run(self, final: bool) -> None:
        while True:
            before = (self._state, len(self._buf))
            getattr(self, "_step_" + self._state)(final)
            if (self._state, len(self._buf)) == before:
                return

    # reasoning: everything up to </think> (or a <tool_call>, which ends reasoning too)
    def _step_reasoning_start(self, final: bool) -> None:
        stripped = self._buf.lstrip()
        if not stripped and not final:
            return
        if THINK_OPEN.startswith(stripped) and stripped and not final:
            return
        if stripped.startswith(THINK_OPEN):
            stripped = stripped[len(THINK_OPEN):].lstrip()
        self._buf = stripped
        self._state = "reasoning"

    def _step_reasoning(self, final: bool) -> None:
        ends = [(self._buf.find(t), t) for t in (THINK_CLOSE, CALL_OPEN)]
        ends = [(i, t) for i, t in ends if i >= 0]
        if ends:
            i, tag = min(ends)
            self._emit_text("reasoning", self._buf[:i])
            self._held_space = self._space_before_tag = ""
            self._buf = self._buf[i + len(tag):]
            self._state = "content_start" if tag == THINK_CLOSE else "call_open"
            return
        cut = len(self._buf) if final else _partial_tag_at(self._buf, (THINK_CLOSE, CALL_OPEN))
        self._emit_text("reasoning", self._buf[:cut])
        self._buf = self._buf[cut:]

    # content: everything up to <tool_call> (or a bare <function=)
    def _step_content_start(self, final: bool) -> None:
        stripped = self._buf.lstrip()
        if not stripped and not final:
            self._buf = ""
            return
        self._buf = stripped
        self._held_space = ""
        self._state = "content"

    def _step_content(self, final: bool) -> None:
        ends = [(self._buf.find(t), t) for t in (CALL_OPEN, FUNC_OPEN)]
        ends = [(i, t) for i, t in ends if i >= 0]
        if ends:
            i, tag = min(ends)
            self._emit_text("content", self._buf[:i])
            self._space_before_tag = self._held_space  # restored if the tag turns out not to start a call
            self._held_space = ""
            self._buf = self._buf[i + len(tag):]
            self._state = "call_open" if tag == CALL_OPEN else "func_name"
            return
        cut = len(self._buf) if final else _partial_tag_at(self._buf, (CALL_OPEN, FUNC_OPEN))
        self._emit_text("content", self._buf[:cut])
        self._buf = self._buf[cut:]

    # after <tool_call>: whitespace, then <function=
    def _step_call_open(self, final: bool) -> None:
        stripped = self._buf.lstrip()
        if stripped.startswith(FUNC_OPEN):
            self._buf = stripped[len(FUNC_OPEN):]
            self._state = "func_name"
        elif not final and (not stripped or FUNC_OPEN.startswith(stripped) or CALL_CLOSE.startswith(stripped)):
            return
        elif stripped.startswith(CALL_CLOSE):  # an empty call
            self._buf = stripped[len(CALL_CLOSE):]
            self._state = "between_calls"
        else:
            # Not the XML format (e.g. JSON inside the wrapper): keep the text as content.
            self._emit("content", self._space_before_tag + CALL_OPEN + self._buf)
            self._buf = ""
            self._state = "content"

    def _step_func_name(self, final: bool) -> None:
        end = self._buf.find(">")
        if end < 0:
            if len(self._buf) > MAX_NAME_CHARS or "\n" in self._buf or final:
                self._emit("content", self._space_before_tag + FUNC_OPEN + self._buf)  # not a call: give it back
                self._buf = ""
                self._state = "content"
            return
        name = self._buf[:end].strip()
        self._buf = self._buf[end + 1:]
        self._call_name = name
        self._space_before_tag = ""
        self._n_params = 0
        self._emit("tool_start", index=self._calls, call_id=self._new_id(), name=name)
        self._state = "params"

    # inside <function=NAME>: parameters until </function>
    def _step_params(self, final: bool) -> None:
        stripped = self._buf.lstrip()
        for tag in (PARAM_OPEN, FUNC_CLOSE, CALL_CLOSE):
            if stripped.startswith(tag):
                self._buf = stripped[len(tag):]
                if tag == PARAM_OPEN:
                    self._state = "param_name"
                else:
                    self._close_call(final=False)
                    self._state = "after_function" if tag == FUNC_CLOSE else "between_calls"
                return
        if not stripped or any(t.startswith(stripped) for t in (PARAM_OPEN, FUNC_CLOSE, CALL_CLOSE)):
            self._buf = stripped
            return
        # Stray text between parameters: skip to the next tag.
        nxt = stripped.find("<", 1)
        self._buf = stripped[nxt:] if nxt > 0 else ""

    def _step_param_name(self, final: bool) -> None:
        end = self._buf.find(">")
        if end < 0:
            if final:
                self._buf = ""
            return
        self._param_name = self._buf[:end].strip()
        self._buf = self._buf[end + 1:]
        sep = "{" if self._n_params == 0 else ", "
        self._n_params += 1
        self._emit("tool_args", sep + json.dumps(self._param_name, ensure_ascii=False) + ": ", index=self._calls)
        self._value = ""
        self._value_sent = 0
        self._value_started = False
        self._value_streaming = is_string_param(self._param_schema())
        self._state = "value"

    def _param_schema(self) -> dict | None:
        params = self._schemas.get(self._call_name) or {}
        return (params.get("properties") or {}).get(self._param_name)

    def _value_end(self, final: bool) -> tuple[int, int] | None:
        """(end of value, end of terminator) within _buf, or None while undecided."""
        pos = 0
        while True:
            i = self._buf.find("<", pos)
            if i < 0:
                return (len(self._buf), len(self._buf)) if final else None
            rest = self._buf[i:]
            if rest.startswith(PARAM_CLOSE):
                after = rest[len(PARAM_CLOSE):].lstrip()
                if any(after.startswith(t) for t in VALUE_ENDS) or (final and not after):
                    return i, i + len(PARAM_CLOSE)
                if not final and (not after or any(t.startswith(after) for t in VALUE_ENDS)):
                    return None  # cannot tell yet
                pos = i + 1   # a </parameter> inside the value
                continue
            if any(rest.startswith(t) for t in VALUE_ENDS):  # a missing </parameter>
                return i, i
            if not final and any(t.startswith(rest) for t in (PARAM_CLOSE,) + VALUE_ENDS):
                return None
            pos = i + 1

    def _step_value(self, final: bool) -> None:
        if not self._value_started:
            if not self._buf and not final:
                return
            if self._buf.startswith("\n"):
                self._buf = self._buf[1:]
            self._value_started = True
        found = self._value_end(final)
        if found is None:
            # Undecided: everything before the first '<' that might start a terminator is value text.
            safe = self._undecided_from()
            self._value += self._buf[:safe]
            self._buf = self._buf[safe:]
            self._stream_value(done=False)
            return
        end, term_end = found
        self._value += self._buf[:end]
        self._buf = self._buf[term_end:]
        if self._value.endswith("\n"):
            self._value = self._value[:-1]
        self._stream_value(done=True)
        self._state = "params"

    def _undecided_from(self) -> int:
        pos = 0
        while True:
            i = self._buf.find("<", pos)
            if i < 0:
                return len(self._buf)
            rest = self._buf[i:]
            if any(t.startswith(rest) or rest.startswith(t) for t in (PARAM_CLOSE,) + VALUE_ENDS):
                return i
            pos = i + 1

    def _stream_value(self, done: bool) -> None:
        schema = self._param_schema()
        if not self._value_streaming:
            if done:
                value = convert_value(self._value, schema)
                self._emit("tool_args", json.dumps(value, ensure_ascii=False), index=self._calls)
            return
        # A string value streams; its last newline is held (it may be the one stripped before </parameter>),
        # and so is a value that could still be the literal null.
        if done:
            if self._value == "null" and self._value_sent == 0:
                self._emit("tool_args", "null", index=self._calls)
                return
            if self._value_sent == 0:
                self._emit("tool_args", '"', index=self._calls)
            self._emit("tool_args", json.dumps(self._value[self._value_sent:], ensure_ascii=False)[1:],
                       index=self._calls)
            return
        limit = len(self._value) - (1 if self._value.endswith("\n") else 0)
        if self._value_sent == 0 and "null".startswith(self._value[:limit]):
            return
        if limit > self._value_sent:
            if self._value_sent == 0:
                self._emit("tool_args", '"', index=self._calls)
            self._emit("tool_args", json.dumps(self._value[self._value_sent:limit], ensure_ascii=False)[1:-1],
                       index=self._calls)
            self._value_sent = limit

    def _close_call(self, final: bool) -> None:
        if self._state == "value":
            if final:
                self._value += self._buf
                self._buf = ""
            if self._value.endswith("\n"):
                self._value = self._value[:-1]
            self._stream_value(done=True)
        self._emit("tool_args", "{}" if self._n_params == 0 else "}", index=self._calls)
        self._emit("tool_end", index=self._calls)
        self._calls += 1
        self._state = "between_calls"

    def _step_after_function(self, final: bool) -> None:
        stripped = self._buf.lstrip()
        if stripped.startswith(CALL_CLOSE):
            self._buf = stripped[len(CALL_CLOSE):]
            self._state = "between_calls"
        elif not final and (not stripped or CALL_CLOSE.startswith(stripped)):
            self._buf = stripped
        else:
            self._buf = stripped
            self._state = "between_calls"

    # after a call: another call, or (against the format, but kept) more content
    def _step_between_calls(self, final: bool) -> None:
        stripped = self._buf.lstrip()
        for tag, state in ((CALL_OPEN, "call_open"), (FUNC_OPEN, "func_name")):
            if stripped.startswith(tag):
                self._buf = stripped[len(tag):]
                self._state = state
                return
        if not final and (not stripped or any(t.startswith(stripped) for t in (CALL_OPEN, FUNC_OPEN))):
            self._buf = stripped
            return
        self._buf = stripped
        self._state = "content"
