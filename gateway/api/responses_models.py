"""Pydantic models of the OpenAI Responses request (https://platform.openai.com/docs/api-reference/responses/create).
Input items keep every kind's fields in one lenient model; responses_input.py turns them into chat messages."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway.api.openai_models import Lenient, Reasoning


class InputItem(Lenient):
    """A message (role, content), function_call, function_call_output or reasoning item."""
    type: str | None = None                      # left out: a message ("EasyInputMessage")
    role: str | None = None
    content: str | list[dict[str, Any]] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | dict[str, Any] | None = None
    output: str | list[dict[str, Any]] | None = None
    summary: list[dict[str, Any]] | None = None
    id: str | None = None
    namespace: str | None = None                 # a function_call of a tool inside a namespace tool


class ResponsesTool(Lenient):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[ResponsesTool] | None = None     # type "namespace": its function tools


class TextFormat(Lenient):
    """Structured outputs (gateway/api/structured_output.py): json_schema's fields sit next to its type."""
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: Any = Field(default=None, alias="schema")   # a JSON schema (the converter checks it); None: any value
    strict: bool | None = None


class TextConfig(Lenient):
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesRequest(Lenient):
    model: str | None = None
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    reasoning: Reasoning | None = None
    stream: bool = False
    store: bool | None = None                     # None: stored (the reference's default is true)
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    include: list[str] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
