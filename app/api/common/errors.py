"""Error rendering for every front door: one set of handlers, each door giving its own shape.

A door's `ErrorShape` says how its API writes an error body for a status and message, and how
it answers a body that breaks its schema (the spec's 422 `HTTPValidationError` on Fireworks'
paths; a 400 in the API's own shape on the others, as their SDKs expect). `error_handlers`
turns a shape into Litestar's handler table, set on the door's Router, so the API-key guard's
401, an unknown model's 404, a full queue's 429, an over-large body's 413, a lost worker's 503
and an unexpected 500 all come back in the shape of the API that was called.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from app.pipeline.errors import (
    ApiError,
    BodyTooLarge,
    ErrorBody,
    ErrorResponse,
    RequestValidationError,
    ValidationErrorItem,
)
from app.pipeline.run import ClientLeft
from app.settings.sizes import format_size

log = logging.getLogger("fireside.server")

# nginx's "client closed request": written to the request log; the client never reads it
CLIENT_CLOSED_REQUEST = 499


class ErrorShape(Protocol):
    def body(self, status: int, message: str, error: ApiError | None) -> Any:
        """The API's error body; `error` is the typed error when there is one (its param and code)."""
        ...

    def invalid(self, error: RequestValidationError) -> tuple[int, Any]:
        """The status and body for a request body that breaks the schema."""
        ...


def field_path(item: ValidationErrorItem) -> str:
    """A schema error's place as the APIs write it: `messages[0].content` (the leading "body" dropped)."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item.loc[1:]).lstrip(".")


def validation_message(error: RequestValidationError) -> str:
    """`place: what is wrong`, or the message alone for the whole body."""
    item = error.items[0] if error.items else None
    if item is None:
        return str(error)
    where = field_path(item)
    return f"{where}: {item.msg}" if where else item.msg


def body_too_large(request: Request) -> BodyTooLarge:
    """The 413 for a body over the limit. Litestar raises `RequestEntityTooLarge` from
    `request.body()` before reading anything when Content-Length is over the limit, or as soon as
    a chunked upload passes it, so at most the limit is ever held in memory."""
    limit = request.route_handler.resolve_request_max_body_size()
    return BodyTooLarge(f"Request body too large: the limit is {format_size(limit)}." if limit
                        else "Request body too large.")


def error_handlers(shape: ErrorShape) -> dict[Any, Any]:
    """Litestar's exception handlers for a door whose errors take `shape`."""

    def api_error(_: Request, error: ApiError) -> Response:
        return Response(shape.body(error.status_code, error.message, error), status_code=error.status_code,
                        headers=error.headers)

    def invalid(_: Request, error: RequestValidationError) -> Response:
        status, body = shape.invalid(error)
        return Response(body, status_code=status)

    def too_large(request: Request, _: RequestEntityTooLarge) -> Response:
        return api_error(request, body_too_large(request))

    def http_error(_: Request, error: HTTPException) -> Response:
        return Response(shape.body(error.status_code, str(error.detail), None), status_code=error.status_code,
                        headers=error.headers)

    def client_left(_: Request, __: ClientLeft) -> Response:
        return Response(b"", status_code=CLIENT_CLOSED_REQUEST)

    def unexpected(_: Request, error: Exception) -> Response:
        log.exception("unhandled error", exc_info=error)
        return Response(shape.body(500, f"internal error: {type(error).__name__}", None), status_code=500)

    return {
        ApiError: api_error,
        RequestValidationError: invalid,
        RequestEntityTooLarge: too_large,
        HTTPException: http_error,
        ClientLeft: client_left,
        Exception: unexpected,
    }


def openai_error(status: int, message: str, error: ApiError | None) -> ErrorResponse:
    """OpenAI's `{"error": {"message", "type", "param", "code"}}` (a typed error's own `body`)."""
    if error is not None:
        return error.body()
    return ErrorResponse(ErrorBody(message, "invalid_request_error" if status < 500 else "server_error", None, None))


class SpecShape:
    """The Fireworks paths (chat, completions, embeddings, rerank, models): OpenAI's error body;
    schema errors in the spec's 422 `HTTPValidationError`."""

    body = staticmethod(openai_error)

    def invalid(self, error: RequestValidationError) -> tuple[int, Any]:
        return 422, error.body()


# OpenAI's codes for a body that breaks the schema, by our validation item's type
_OPENAI_CODES = {"missing": "missing_required_parameter", "extra_forbidden": "unknown_parameter",
                 "type_error": "invalid_type", "model_attributes_type": "invalid_type", "json_invalid": None}


class OpenAIShape(SpecShape):
    """OpenAI's own paths (Responses): schema errors are a 400 in the same `{"error": ...}` body,
    naming the parameter, as OpenAI answers them."""

    def invalid(self, error: RequestValidationError) -> tuple[int, Any]:
        item = error.items[0] if error.items else None
        param = field_path(item) if item is not None else ""
        code = _OPENAI_CODES.get(item.type, "invalid_value") if item is not None else None
        return 400, ErrorResponse(ErrorBody(validation_message(error), "invalid_request_error", param or None, code))
