"""A request body decoded into its door's wire Struct (DESIGN step 1): any failure to decode or
validate is a `RequestValidationError` naming the field's path, which each door renders in its
own shape (`app.api.common.errors`)."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from app.pipeline.errors import RequestValidationError

T = TypeVar("T")

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
