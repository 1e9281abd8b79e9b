"""Typed API errors, raised anywhere and rendered in one place (`app.server.app`).

Two shapes, as the design sets: schema errors are 422 in the spec's `HTTPValidationError`
shape; everything else is OpenAI's `{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


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


# msgspec reports e.g. "Expected `int` >= 1, got `0` - at `$.n`" or
# "Object missing required field `model`" (no path at the top level).
_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[(?:'|\")?(.*?)(?:'|\")?\]")
_FIELD_NAMED = re.compile(r"(missing required field|contains unknown field) `([^`]*)`")


def _parse_path(path: str) -> list[str | int]:
    loc: list[str | int] = []
    for name, index, key in _PATH_PART.findall(path):
        if name:
            loc.append(name)
        elif index:
            loc.append(int(index))
        elif key != "...":  # msgspec writes `[...]` for a dict value without naming its key
            loc.append(key)
    return loc


def from_msgspec(exc: msgspec.MsgspecError) -> RequestValidationError:
    """Turn a msgspec decode/validation error into a 422 naming the field's path."""
    if not isinstance(exc, msgspec.ValidationError):
        return RequestValidationError.at([], f"Request body is not valid JSON: {exc}", "json_invalid")
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches any string
    msg = match["msg"]
    loc = _parse_path(match["path"] or "")
    named = _FIELD_NAMED.search(msg)
    if named:
        loc.append(named[2])
        type_ = "missing" if named[1].startswith("missing") else "extra_forbidden"
    elif msg.startswith("Expected `object`") and not loc:
        type_ = "model_attributes_type"
    else:
        type_ = "value_error" if "got" not in msg else "type_error"
    return RequestValidationError.at(loc, msg, type_)


_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def decode_body(body: bytes, request_type: type[T]) -> T:
    """Decode and validate a JSON body into its wire Struct; any failure is a 422 naming the field."""
    decoder = _decoders.get(request_type)
    if decoder is None:
        decoder = _decoders[request_type] = msgspec.json.Decoder(request_type)
    try:
        return decoder.decode(body)
    except msgspec.MsgspecError as error:
        raise from_msgspec(error) from None
    except RecursionError:
        raise RequestValidationError.at([], "Request body is nested too deeply", "json_invalid") from None
