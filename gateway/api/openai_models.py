"""Pydantic models of the OpenAI chat-completions request (https://platform.openai.com/docs/api-reference/chat),
in the reference's field order; unknown fields are ignored and logged at debug level."""
from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

log = logging.getLogger("gateway.api")


class Lenient(BaseModel):
    """Base of every request model: unknown fields are accepted, ignored and logged (clients keep adding fields)."""
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _log_extra(self):
        if self.model_extra:
            log.debug("%s: ignoring fields %s", type(self).__name__, sorted(self.model_extra))
        return self


class FunctionCall(Lenient):
    name: str
    arguments: str | dict[str, Any] | None = None


class ToolCall(Lenient):
    id: str | None = None
    type: str = "function"
    function: FunctionCall


class Message(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDef(Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(Lenient):
    type: str = "function"
    function: FunctionDef


class JsonSchemaFormat(Lenient):
    name: str | None = None
    description: str | None = None
    schema_: Any = Field(default=None, alias="schema")   # a JSON schema (the converter checks it); None: any value
    strict: bool | None = None


class ResponseFormat(Lenient):
    """Structured outputs (gateway/api/structured_output.py)."""
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs a json_schema object ({\"name\": ..., \"schema\": {...}})")
        return self


class StreamOptions(Lenient):
    include_usage: bool = False


class Reasoning(Lenient):
    effort: str | None = None


class ChatCompletionRequest(Lenient):
    messages: list[Message] = Field(min_length=1)
    model: str | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool | None = None
    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    n: int | None = Field(default=1, ge=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    reasoning_effort: str | None = None
    response_format: ResponseFormat | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**64)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0)
    tool_choice: str | dict[str, Any] | None = None
    tools: list[Tool] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    top_p: float | None = Field(default=None, gt=0, le=1)
    # Not in OpenAI's reference; sent by llama.cpp / vLLM clients.
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0, le=1)
    repetition_penalty: float | None = Field(default=None, gt=0)
    reasoning: Reasoning | None = None
    chat_template_kwargs: dict[str, Any] | None = None
