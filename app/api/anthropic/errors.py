"""Errors on this API's paths in Anthropic's shape, `{"type": "error", "error": {"type", "message"}}`,
with the HTTP status our typed errors carry (the framing of its streams is in `app.api.common.streams`).

These handlers sit on the dialect's Router, so they win over the app's OpenAI-shaped ones for
every request routed here: the API-key guard (401), an unknown model (404), a full queue (429),
a body over the size limit (413) and schema errors. Schema errors are 400 `invalid_request_error`,
not the 422 of the other dialects, because Anthropic answers them so and its SDKs expect it.
"""

from __future__ import annotations

from typing import Any

from app.api.anthropic.responses import ErrorDetail, ErrorEvent, ErrorType
from app.api.common.errors import error_handlers, validation_message
from app.pipeline.errors import ApiError, RequestValidationError

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


class AnthropicShape:
    @staticmethod
    def body(status: int, message: str, _: ApiError | None) -> ErrorEvent:
        return error_body(status, message)

    def invalid(self, error: RequestValidationError) -> tuple[int, Any]:
        return 400, error_body(400, validation_message(error))


EXCEPTION_HANDLERS = error_handlers(AnthropicShape())
