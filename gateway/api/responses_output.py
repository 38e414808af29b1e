"""Deltas → Responses output items (reasoning, message, function_call) and their stream events, and the response
object. The non-stream body holds the items the stream built, so the two cannot disagree."""
from __future__ import annotations

import copy
import secrets
import time

from gateway.api.chat_job import Final
from gateway.api.responses_models import ResponsesRequest
from gateway.text.output_parser import Delta


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class OutputItems:
    """add() and close() return the stream events (without sequence_number) of what they did to the items."""

    def __init__(self, with_logprobs: bool = False, namespaced: dict[str, tuple[str, str]] | None = None):
        self.items: list[dict] = []
        self.namespaced = namespaced or {}    # responses_input.namespaced_tools: calls carry their namespace
        self._open: dict | None = None
        self._text = ""               # the open reasoning or message item's text so far
        self.with_logprobs = with_logprobs
        self._pending: list[dict] = []    # logprobs entries of tokens whose text has not been added yet
        self._logprobs: list[dict] = []   # the open message's entries so far

    def add_logprob(self, entry: dict) -> None:
        """A token's logprobs entry (openai_routes.logprob_entry), before its text's delta; message text only keeps
        them (reasoning and tool-call tokens have none in the reference)."""
        self._pending.append(entry)

    @property
    def reasoning(self) -> str:
        return "".join(p["text"] for i in self.items if i["type"] == "reasoning" for p in i["content"])

    def add(self, d: Delta) -> list[dict]:
        if d.kind in ("reasoning", "content"):
            return self._add_text("reasoning" if d.kind == "reasoning" else "message", d.text)
        if d.kind == "tool_start":
            self._pending.clear()
            item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress", "call_id": d.call_id,
                    "name": d.name, "arguments": ""}
            if d.name in self.namespaced:
                item["namespace"], item["name"] = self.namespaced[d.name]
            return self.close() + [self._added(item)]
        if d.kind == "tool_args" and self._is_open("function_call"):
            self._open["arguments"] += d.text
            return [self._event("response.function_call_arguments.delta", delta=d.text)]
        if d.kind == "tool_end":
            return self.close()
        return []

    def close(self, status: str = "completed") -> list[dict]:
        """Ends the open item ("incomplete" when max_output_tokens cut it)."""
        item = self._open
        if item is None:
            return []
        events = []
        if item["type"] == "function_call":
            events.append(self._event("response.function_call_arguments.done", arguments=item["arguments"]))
        else:
            reasoning = item["type"] == "reasoning"
            part = {"type": "reasoning_text", "text": self._text} if reasoning else \
                {"type": "output_text", "text": self._text, "annotations": []}
            if not reasoning and self.with_logprobs:
                part["logprobs"] = self._logprobs + self._pending
            self._pending, self._logprobs = [], []
            item["content"] = [part]
            done = self._event("response.reasoning_text.done" if reasoning else "response.output_text.done",
                               content_index=0, text=self._text)
            if not reasoning:
                done["logprobs"] = part.get("logprobs", [])
            events += [done, self._event("response.content_part.done", content_index=0, part=copy.deepcopy(part))]
        item["status"] = status
        events.append({"type": "response.output_item.done", "output_index": len(self.items) - 1,
                       "item": copy.deepcopy(item)})
        self._open = None
        return events

    def _is_open(self, kind: str) -> bool:
        return self._open is not None and self._open["type"] == kind

    def _added(self, item: dict) -> dict:
        self.items.append(item)
        self._open = item
        self._text = ""
        return {"type": "response.output_item.added", "output_index": len(self.items) - 1,
                "item": copy.deepcopy(item)}

    def _event(self, kind: str, **fields) -> dict:
        return {"type": kind, "item_id": self._open["id"], "output_index": len(self.items) - 1, **fields}

    def _add_text(self, kind: str, text: str) -> list[dict]:
        events = []
        if not self._is_open(kind):
            events += self.close()
            if kind == "reasoning":
                item = {"id": new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": [],
                        "content": []}
                part = {"type": "reasoning_text", "text": ""}
            else:
                item = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                        "content": []}
                part = {"type": "output_text", "text": "", "annotations": []}
            events += [self._added(item), self._event("response.content_part.added", content_index=0, part=part)]
        self._text += text
        entries, self._pending = self._pending, []
        if kind == "reasoning":
            events.append(self._event("response.reasoning_text.delta", content_index=0, delta=text))
        else:
            entries = entries if self.with_logprobs else []
            self._logprobs += entries
            events.append(self._event("response.output_text.delta", content_index=0, delta=text, logprobs=entries))
        return events


def status_of(final: Final | None) -> str:
    if final is None:
        return "in_progress"
    return "incomplete" if final.finish_reason == "length" else "completed"


def usage(final: Final, reasoning_tokens: int) -> dict:
    return {"input_tokens": final.prompt_tokens,
            "input_tokens_details": {"cached_tokens": final.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": final.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": min(reasoning_tokens, final.completion_tokens)},
            "total_tokens": final.prompt_tokens + final.completion_tokens}


def response_object(req: ResponsesRequest, resp_id: str, created_at: int, model: str, output: list[dict],
                    final: Final | None = None, reasoning_tokens: int = 0) -> dict:
    """The response with the request's settings echoed (the SDK's Response type requires several of them)."""
    status = status_of(final)
    text_format = req.text.format.model_dump(by_alias=True, exclude_none=True) if req.text and req.text.format \
        else {"type": "text"}
    return {
        "id": resp_id, "object": "response", "created_at": created_at, "status": status,
        "completed_at": int(time.time()) if status == "completed" else None, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": req.instructions, "max_output_tokens": req.max_output_tokens, "model": model,
        "output": output, "parallel_tool_calls": req.parallel_tool_calls is not False,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": req.reasoning.effort if req.reasoning else None, "summary": None},
        "store": req.store is not False, "temperature": req.temperature, "text": {"format": text_format},
        "tool_choice": req.tool_choice or "auto", "tools": [t.model_dump(exclude_none=True) for t in req.tools or []],
        "top_p": req.top_p, "truncation": req.truncation or "disabled",
        "usage": usage(final, reasoning_tokens) if final else None, "user": req.user, "metadata": req.metadata or {}}
