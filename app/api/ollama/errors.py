"""Ollama's error shape, `{"error": "message"}` with the HTTP status, for every error under
`/api` (the API-key guard's 401, unknown models, bodies that break the schema), while the other
dialects keep theirs: these handlers sit on the Ollama router, not on the app.

A body that breaks the schema is a 400 here, as Ollama answers it, not the 422 of `/v1`.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from app.api.ollama.wire import OllamaErrorResponse
from app.server.errors import ApiError, ModelNotFound, RequestValidationError

log = logging.getLogger("fireside.server")


def _api_error(_: Request, error: ApiError) -> Response:
    message = error.message
    if isinstance(error, ModelNotFound):  # raised by the shared path: Ollama's words
        message = message.replace("The model `", "model '").replace("` does not exist.", "' not found")
    return Response(OllamaErrorResponse(message), status_code=error.status_code, headers=error.headers)


def _validation_error(_: Request, error: RequestValidationError) -> Response:
    item = error.items[0] if error.items else None
    if item is None:
        return Response(OllamaErrorResponse(str(error)), status_code=400)
    loc = [str(part) for part in item.loc[1:]]  # after "body"
    if item.type in ("missing", "extra_forbidden"):
        loc = loc[:-1]  # the message names the field itself
    where = ".".join(loc)
    return Response(OllamaErrorResponse(f"{where}: {item.msg}" if where else item.msg), status_code=400)


def _http_error(request: Request, error: HTTPException) -> Response:
    if isinstance(error, RequestEntityTooLarge):
        limit = request.route_handler.resolve_request_max_body_size()
        return Response(OllamaErrorResponse(f"request body too large (the limit is {limit} bytes)"), status_code=413,
                        headers={"Connection": "close"})
    return Response(OllamaErrorResponse(str(error.detail)), status_code=error.status_code, headers=error.headers)


def _unexpected(_: Request, error: Exception) -> Response:
    log.exception("unhandled error", exc_info=error)
    return Response(OllamaErrorResponse(f"internal error: {type(error).__name__}"), status_code=500)


HANDLERS: dict[Any, Any] = {
    ApiError: _api_error,
    RequestValidationError: _validation_error,
    RequestEntityTooLarge: _http_error,
    HTTPException: _http_error,
    Exception: _unexpected,
}
