"""Patterns: a small PEG that knows when the input may still be incomplete.

`match(text, i, final, caps)` returns the end of the match, None when the text cannot match, or
MORE when it cannot tell yet (only when not `final`). Choices are ordered and wait on an earlier
alternative that may still match, so a decision never depends on how the text was chunked.

A text that ends where a match could still go on is a call cut short (at `max_tokens`, a stop
sequence): matched not `final` with `caps["_cut"]` set (to None), MORE tells so, `caps` keeps
what was read whole, and `caps["_cut"]` becomes `(key, text)` when the text ended inside a
capture: its key, and what was written of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from templates.reasoning_parser import find_first, partial_marker_length
from templates.tool_calls.strict_json import load_json

Caps = dict[str, Any]


MORE = -1


def _cut(caps: Caps, key: str | None, text: str) -> int:
    """MORE, noting in a cut's `caps` that the text ended inside the capture `key`."""
    if "_cut" in caps:
        caps["_cut"] = (key, text)
    return MORE


class Pattern:
    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        raise NotImplementedError


class L(Pattern):
    """A literal."""

    def __init__(self, text: str):
        self.text = text

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        if text.startswith(self.text, i):
            return i + len(self.text)
        if not final and len(text) - i < len(self.text) and self.text.startswith(text[i:]):
            return MORE
        return None


class W(Pattern):
    """Optional whitespace (all of it)."""

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        n = len(text)
        while i < n and text[i].isspace():
            i += 1
        return MORE if i == n and not final else i


class Chars(Pattern):
    """A run of characters satisfying `ok` (captured as `key`), `low` to `high` long."""

    def __init__(self, key: str | None, ok: Callable[[str], bool], low: int = 1, high: int = 256):
        self.key, self.ok, self.low, self.high = key, ok, low, high

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        j, n = i, len(text)
        while j < n and j - i <= self.high and self.ok(text[j]):
            j += 1
        if j - i > self.high:
            return None
        if j == n and not final:
            return _cut(caps, self.key, text[i:])
        if j - i < self.low:
            return None
        if self.key:
            caps[self.key] = text[i:j]
        return j


class Until(Pattern):
    """Everything up to the first of `stops` (not consumed), captured as `key`; at the end of the
    output, the rest."""

    def __init__(self, key: str, stops: Sequence[str]):
        self.key, self.stops = key, tuple(stops)

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        index, stop = find_first(text[i:], self.stops)
        if stop is None:
            if not final:  # a cut: what was written, less a stop that had begun
                return _cut(caps, self.key, text[i:len(text) - partial_marker_length(text[i:], self.stops)])
            caps[self.key] = text[i:]
            return len(text)
        caps[self.key] = text[i:i + index]
        return i + index


class Json(Pattern):
    """A JSON object or array (parsed into `caps[key]`); with `many`, one or more of them separated
    by whitespace, commas or semicolons (a list in `caps[key]`)."""

    def __init__(self, key: str, many: bool = False):
        self.key, self.many = key, many

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        values: list[Any] = []
        start, n = i, len(text)
        while True:
            end = json_end(text, i, caps.get("_memo"))
            if end == MORE:
                return None if final else _cut(caps, self.key, text[start:])
            if end is None:
                value = None
            else:
                try:
                    value = load_json(text[i:end])
                except (ValueError, RecursionError):
                    end = None
            if end is None:
                if not values:
                    return None
                break
            values.append(value)
            i = end
            if not self.many:
                break
            j = i
            while j < n and text[j].isspace():
                j += 1
            if j < n and text[j] in ",;":
                j += 1
                while j < n and text[j].isspace():
                    j += 1
            if j == n and not final:
                return _cut(caps, self.key, text[start:])
            if j == n or text[j] not in "{[":
                break
            i = j
        caps[self.key] = values if self.many else values[0]
        return i


_OUTSIDE_STRINGS = re.compile(r'[^"{}\[\]]*')
_INSIDE_STRING = re.compile(r'[^"\\]*')


def json_end(text: str, i: int, memo: dict[int, tuple[int, int, bool]] | None = None) -> int | None:
    """Where the JSON object or array starting at `i` ends (by its brackets), MORE if it has not
    ended yet, None if `i` does not start one. `memo` keeps where an unfinished scan stopped, so
    that scanning a text that only grows at its end costs linear time overall."""
    n = len(text)
    if i >= n:
        return MORE
    if text[i] not in "{[":
        return None
    pos, depth, in_string = memo.get(i, (i, 0, False)) if memo is not None else (i, 0, False)
    while True:
        if in_string:
            pos = _INSIDE_STRING.match(text, pos).end()  # type: ignore[union-attr]
            if pos >= n or (text[pos] == "\\" and pos + 1 >= n):
                break
            if text[pos] == "\\":
                pos += 2
                continue
            in_string, pos = False, pos + 1
            continue
        pos = _OUTSIDE_STRINGS.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= n:
            break
        char = text[pos]
        pos += 1
        if char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return pos
    if memo is not None:
        memo[i] = (pos, depth, in_string)
    return MORE


class Seq(Pattern):
    def __init__(self, *parts: Pattern):
        self.parts = parts

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        for part in self.parts:
            r = part.match(text, i, final, caps)
            if r is None or r == MORE:
                return r
            i = r
        return i


class Alt(Pattern):
    """Ordered choice: the first alternative that matches, waiting on any before it that may."""

    def __init__(self, *options: Pattern):
        self.options = options

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        for option in self.options:
            trial = dict(caps)
            r = option.match(text, i, final, trial)
            if r == MORE:
                if "_cut" in caps:  # a cut: what this alternative read so far
                    caps.update(trial)
                return MORE
            if r is not None:
                caps.update(trial)
                return r
        return None


class _Empty(Pattern):
    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        return i


EMPTY = _Empty()


def Opt(*parts: Pattern) -> Pattern:
    return Alt(parts[0] if len(parts) == 1 else Seq(*parts), _Empty())


class Closer(Pattern):
    """An optional closing literal; at the end of the whole output also any start of it (the
    output stopped inside a closer spelled in several tokens, at `max_tokens`)."""

    def __init__(self, text: str):
        self.literal = L(text)

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        r = self.literal.match(text, i, final, caps)
        if r is not None:
            return r
        if final and i < len(text) and self.literal.text.startswith(text[i:]):
            return len(text)
        return i


class Peek(Pattern):
    """Lookahead: `inner` must match here, nothing is consumed."""

    def __init__(self, inner: Pattern):
        self.inner = inner

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        r = self.inner.match(text, i, final, {})
        return r if r is None or r == MORE else i


class Span(Pattern):
    """`inner`, with the text it matched captured as `key`."""

    def __init__(self, key: str, inner: Pattern):
        self.key, self.inner = key, inner

    def match(self, text: str, i: int, final: bool, caps: Caps) -> int | None:
        r = self.inner.match(text, i, final, caps)
        if r is not None and r != MORE:
            caps[self.key] = text[i:r]
        return r


def name_char(c: str) -> bool:
    return c.isalnum() or c in "_-."


def other_than(chars: str, space: bool = True) -> Callable[[str], bool]:
    """Characters other than `chars` (and, unless `space` is False, other than whitespace)."""
    if space:
        return lambda c: c not in chars and not c.isspace()
    return lambda c: c not in chars
