"""Pydantic models of the Anthropic Messages request (https://docs.anthropic.com/en/api/messages) and of
count_tokens; unknown fields (metadata, context_management, cache_control, …) are ignored."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway.api.openai_models import Lenient


class Block(Lenient):
    type: str
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class Message(Lenient):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class Tool(Lenient):
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None


class Thinking(Lenient):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class OutputFormat(Lenient):
    """Structured outputs (gateway/api/structured_output.py)."""
    type: Literal["json_schema"]
    schema_: Any = Field(alias="schema")   # a JSON schema (the converter checks it)


class OutputConfig(Lenient):
    effort: str | None = None
    format: OutputFormat | None = None


class CountTokensRequest(Lenient):
    messages: list[Message] = Field(min_length=1)
    model: str | None = None
    system: str | list[Block] | None = None
    thinking: Thinking | None = None
    tool_choice: dict[str, Any] | None = None
    tools: list[Tool] | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int | None = Field(default=None, ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0)
    top_k: int | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
