"""Errors on this API's paths in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`,
with the HTTP status our typed errors carry, and the SSE framing its streams use.

These handlers sit on the dialect's Router, so they win over the app's OpenAI-shaped ones for
every request routed here: the API-key guard (401), an unknown model (404), a full queue (429),
a body over the size limit (413) and schema errors. Schema errors are 400 `invalid_request_error`,
not the 422 of the other dialects, because Anthropic answers them so and its SDKs expect it.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from app.api.anthropic.responses import ErrorDetail, ErrorEvent, ErrorType
from app.server import security
from app.server.errors import ApiError, ErrorResponse, RequestValidationError
from app.server.sse import SSE_HEADERS, Framing

log = logging.getLogger("fireside.anthropic")

# Anthropic's error type for each status (https://docs.anthropic.com/en/api/errors)
_TYPES: dict[int, ErrorType] = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error",
}


def error_type(status: int) -> ErrorType:
    if status in _TYPES:
        return _TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(status: int, message: str) -> ErrorEvent:
    return ErrorEvent(ErrorDetail(error_type(status), message))


def from_api_error(error: ApiError) -> ErrorEvent:
    return error_body(error.status_code, error.message)


def _api_error(_: Request, error: ApiError) -> Response:
    return Response(from_api_error(error), status_code=error.status_code, headers=error.headers)


def validation_message(error: RequestValidationError) -> str:
    item = error.items[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item.loc[1:]).lstrip(".")
    return f"{where}: {item.msg}" if where else item.msg


def _validation_error(_: Request, error: RequestValidationError) -> Response:
    return Response(error_body(400, validation_message(error)), status_code=400)


def _http_error(_: Request, error: HTTPException) -> Response:
    return Response(error_body(error.status_code, str(error.detail)), status_code=error.status_code,
                    headers=error.headers)


def _too_large(request: Request, error: RequestEntityTooLarge) -> Response:
    openai_shaped = security.body_too_large(request, error)
    assert isinstance(openai_shaped.content, ErrorResponse)
    return Response(error_body(413, openai_shaped.content.error.message), status_code=413,
                    headers={"Connection": "close"})


def _unexpected_error(_: Request, error: Exception) -> Response:
    log.exception("unhandled error", exc_info=error)
    return Response(error_body(500, f"internal error: {type(error).__name__}"), status_code=500)


EXCEPTION_HANDLERS: dict[Any, Any] = {
    ApiError: _api_error,
    RequestValidationError: _validation_error,
    RequestEntityTooLarge: _too_large,
    HTTPException: _http_error,
    Exception: _unexpected_error,
}

_encoder = msgspec.json.Encoder()


def sse_event(event: msgspec.Struct) -> bytes:
    """One server-sent event named by the payload's own `type`, as Anthropic streams them."""
    name = type(event).__struct_config__.tag
    return b"event: " + str(name).encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


ANTHROPIC_SSE = Framing(sse_event, b"", "text/event-stream", SSE_HEADERS)  # no [DONE]: message_stop ends it
