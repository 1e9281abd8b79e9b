"""JSON as tool calls read and write it: strict parsing and compact writing."""

from __future__ import annotations

import json
import math
import re
from typing import Any


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


def load_json(text: str) -> Any:
    """Strict JSON (no NaN/Infinity, no numbers that overflow to infinity)."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)


def arguments_object(text: str) -> dict[str, Any]:
    """A call's arguments as an object, for the APIs whose calls carry one (Anthropic's
    `tool_use.input`, Ollama's `arguments`): the JSON object `text` holds; for a call cut short,
    whose text is the start of one, the members written so far, nested objects and arrays as far
    as they go, a number as far as it was written, a string or literal only once whole (as
    Anthropic's SDK reads a streamed `input_json_delta`: jiter's partial mode); else {}."""
    try:
        value = load_json(text) if text.strip() else {}
    except (ValueError, RecursionError):
        try:
            value = _prefix_value(text, _skip_space(text, 0), 0)[0]
        except (ValueError, RecursionError):
            value = {}
    return value if isinstance(value, dict) else {}


_NOTHING = object()
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_NUMBER_CHARS = re.compile(r"[-+.eE0-9]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_LITERALS = {"true": True, "false": False, "null": None}
_DEEPEST = 256


def _skip_space(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    return i


def _prefix_value(text: str, i: int, depth: int) -> tuple[Any, int, bool]:
    """The JSON value that starts at `i` of a text that may end inside it: (value, its end,
    whether it is whole); the value is _NOTHING where nothing of it counts yet."""
    n = len(text)
    if i >= n:
        return _NOTHING, n, False
    if depth > _DEEPEST:
        raise ValueError("nested too deeply")
    char = text[i]
    if char in "{[":
        close = "}" if char == "{" else "]"
        container: Any = {} if char == "{" else []
        i = _skip_space(text, i + 1)
        if i < n and text[i] == close:
            return container, i + 1, True
        while i < n:
            if char == "{":
                if text[i] != '"':
                    raise ValueError("expected a key")
                key, i, whole = _prefix_value(text, i, depth + 1)
                i = _skip_space(text, i)
                if not whole or i >= n:
                    break
                if text[i] != ":":
                    raise ValueError("expected ':'")
                value, i, whole = _prefix_value(text, _skip_space(text, i + 1), depth + 1)
                if value is not _NOTHING:
                    container[key] = value
            else:
                value, i, whole = _prefix_value(text, i, depth + 1)
                if value is not _NOTHING:
                    container.append(value)
            i = _skip_space(text, i)
            if not whole or i >= n:
                break
            if text[i] == close:
                return container, i + 1, True
            if text[i] != ",":
                raise ValueError("expected ',' or a closing bracket")
            i = _skip_space(text, i + 1)
        return container, n, False
    if char == '"':
        match = _STRING.match(text, i)
        if match is None:
            return _NOTHING, n, False
        return load_json(match.group()), match.end(), True
    number = _NUMBER.match(text, i)
    if number is not None and number.end() == n:
        return load_json(number.group()), n, False  # as far as it was written
    if _NUMBER_CHARS.match(text, i).end() == n:  # type: ignore[union-attr]
        return _NOTHING, n, False  # a number cut where it is none yet ("-", "1.", "1e")
    if number is not None:
        return load_json(number.group()), number.end(), True
    for word, literal in _LITERALS.items():
        if text.startswith(word, i):
            return literal, i + len(word), True
        if word.startswith(text[i:]):
            return _NOTHING, n, False
    raise ValueError("not a JSON value")
