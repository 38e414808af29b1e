"""ApiError and its kinds, rendered in the OpenAI or the Anthropic error shape (by route) by one middleware; a
pydantic ValidationError becomes a 400 naming the field, an unexpected exception a logged 500."""
from __future__ import annotations

import json
import logging

import pydantic
from aiohttp import web

log = logging.getLogger("gateway.errors")

# HTTP status → Anthropic error type (https://docs.anthropic.com/en/api/errors).
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}


class ApiError(Exception):
    status = 500
    openai_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    @property
    def anthropic_type(self) -> str:
        return _ANTHROPIC_TYPES.get(self.status, "api_error")

    def openai_body(self) -> dict:
        return {"error": {"message": self.message, "type": self.openai_type, "param": self.param,
                          "code": self.code}}

    def anthropic_body(self) -> dict:
        return {"type": "error", "error": {"type": self.anthropic_type, "message": self.message}}


class BadRequest(ApiError):
    status = 400
    openai_type = "invalid_request_error"


class ContextTooLong(BadRequest):
    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, max_new: int, context: int):
        want = f"{prompt_tokens} prompt tokens" + (f" + {max_new} tokens to generate" if max_new else "")
        super().__init__(f"This request needs {want}, more than the model's context of {context} tokens. "
                         f"Shorten the conversation or lower max_tokens; nothing was cut.", param="messages")


class Unauthorized(ApiError):
    status = 401
    openai_type = "authentication_error"
    code = "invalid_api_key"


class NotFound(ApiError):
    status = 404
    openai_type = "invalid_request_error"
    code = "not_found"


class PayloadTooLarge(ApiError):
    status = 413
    openai_type = "invalid_request_error"


class EngineUnavailable(ApiError):
    status = 503
    openai_type = "server_error"
    code = "engine_unavailable"


class VisionUnavailable(EngineUnavailable):
    code = "vision_unavailable"


def is_anthropic(request: web.Request) -> bool:
    return request.path.startswith("/v1/messages")


def error_response(request: web.Request, err: ApiError) -> web.Response:
    body = err.anthropic_body() if is_anthropic(request) else err.openai_body()
    return web.json_response(body, status=err.status)


def validation_error(e: pydantic.ValidationError) -> BadRequest:
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return BadRequest(f"{where}: {first['msg']}" + (f" ({len(e.errors())} problems)" if len(e.errors()) > 1 else ""),
                      param=where)


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except ApiError as e:
        log.info("%s %s -> %d %s", request.method, request.path, e.status, e.message)
        return error_response(request, e)
    except pydantic.ValidationError as e:
        err = validation_error(e)
        log.info("%s %s -> 400 %s", request.method, request.path, err.message)
        return error_response(request, err)
    except web.HTTPRequestEntityTooLarge as e:
        return error_response(request, PayloadTooLarge(f"request body too large: {e.text}"))
    except web.HTTPException as e:
        if e.status >= 400 and request.path.startswith("/v1/"):
            kind = NotFound if e.status == 404 else BadRequest if e.status < 500 else ApiError
            err = kind(e.reason or str(e.status))
            err.status = e.status
            return error_response(request, err)
        raise
    except (ConnectionResetError, ConnectionError):
        raise
    except Exception as e:  # a bug: log it whole, answer 500 without internals
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(request, ApiError(f"internal error: {type(e).__name__}"))


async def read_json(request: web.Request) -> dict:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        raise PayloadTooLarge(f"request body too large (limit {e.max_size} bytes)") from e
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    return data
