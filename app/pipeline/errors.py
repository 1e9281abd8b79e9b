"""Typed API errors, raised anywhere (the pipeline, the doors, the server) and rendered by each
door in its API's shape (`app.api.common.errors`).

The default shapes, the Fireworks paths': schema errors are 422 in the spec's `HTTPValidationError`
shape; everything else is OpenAI's `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import msgspec


class ErrorBody(msgspec.Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(msgspec.Struct):
    error: ErrorBody


class ValidationErrorItem(msgspec.Struct):
    loc: list[str | int]
    msg: str
    type: str


class HTTPValidationError(msgspec.Struct):
    detail: list[ValidationErrorItem]


class ApiError(Exception):
    """An error with an HTTP status, rendered in OpenAI's error shape."""

    status_code = 400
    error_type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> ErrorResponse:
        return ErrorResponse(ErrorBody(self.message, self.error_type, self.param, self.code))


class BadRequest(ApiError):
    """The request is well-formed but means something we refuse (400)."""


class ModelNotFound(ApiError):
    status_code = 404
    error_type = "not_found_error"

    def __init__(self, model: str):
        super().__init__(f"The model `{model}` does not exist.", param="model", code="model_not_found")


class TooManyRequests(ApiError):
    """The wait queue is full (429 with Retry-After, as OpenAI answers rate limits)."""

    status_code = 429
    error_type = "rate_limit_error"

    def __init__(self, message: str, retry_after: int):
        super().__init__(message, code="server_busy", headers={"Retry-After": str(retry_after)})


class BodyTooLarge(ApiError):
    """A request body over the server's limit (413; the connection closes, the rest is not read)."""

    status_code = 413

    def __init__(self, message: str):
        super().__init__(message, code="request_too_large", headers={"Connection": "close"})


class ModelUnavailable(ApiError):
    """A known model that cannot be loaded now (its file is missing or unreadable)."""

    status_code = 503
    error_type = "server_error"

    def __init__(self, message: str):
        super().__init__(message, param="model", code="model_unavailable")


class EngineFailure(ApiError):
    """Generation failed inside the engine for this request alone."""

    status_code = 500
    error_type = "server_error"


class RequestValidationError(Exception):
    """A body that does not fit the schema (422)."""

    def __init__(self, items: list[ValidationErrorItem]):
        super().__init__(items[0].msg if items else "invalid request")
        self.items = items

    def body(self) -> HTTPValidationError:
        return HTTPValidationError(self.items)

    @classmethod
    def at(cls, loc: list[str | int], msg: str, type_: str = "value_error") -> RequestValidationError:
        return cls([ValidationErrorItem(loc=["body", *loc], msg=msg, type=type_)])
