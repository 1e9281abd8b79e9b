"""GBNF for anchor-free nodes. Every character is written as canonical JSON writes it inside a
string (see `grammars.gbnf`), so the grammar describes the text between the quotes of the JSON
string, not the raw value."""

from __future__ import annotations

import re

from grammars.gbnf import (
    JSON_CHAR,
    JSON_CHAR_BODY,
    MAX_CODE_POINT,
    GrammarBuilder,
    Ranges,
    char_class,
    intersect,
    json_chars,
    json_string_literal,
    literal,
    normalize,
    repeat,
    subtract,
)
from grammars.regex.nodes import ANY, Alt, CharSet, Node, Repeat, Seq

_SIMPLE_EXPRESSION = re.compile(r'^(?:[a-zA-Z0-9-]+|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\])$')
_SHORT_JSON_ESCAPES = {0x22: '"', 0x5C: "\\", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_JSON_ESCAPED = normalize([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
# what a pattern that matches no string (within the bounds) translates to
NEVER = char_class([(0, MAX_CODE_POINT)], negated=True)


class Emitter:
    def __init__(self, builder: GrammarBuilder):
        self.builder = builder
        self.done: dict[Node, str] = {}

    def any_char(self) -> str:
        return self.builder.fixed(JSON_CHAR, JSON_CHAR_BODY)

    def emit(self, node: Node) -> str:
        """An expression for `node` that can stand in a sequence (no top-level `|`)."""
        expression = self.done.get(node)
        if expression is None:
            expression = self.done[node] = self.fresh(node)
        elif not _SIMPLE_EXPRESSION.match(expression):
            # a node reached twice (the anchor analysis shares subtrees) gets a rule, so the
            # text stays linear in the number of distinct nodes
            expression = self.done[node] = self.builder.rule("seq", expression)
        return expression

    def fresh(self, node: Node) -> str:
        match node:
            case CharSet(ranges):
                return self.char_set(list(ranges))
            case Seq(items):
                return self.sequence(items)
            case Alt(options):
                return self.builder.rule("alt", " | ".join(self.emit(option) for option in options))
            case Repeat(item, low, high):
                return repeat(self.builder, self.emit(item), low, high)
        raise TypeError(node)

    def sequence(self, items: tuple[Node, ...]) -> str:
        parts: list[str] = []
        text = ""
        for item in items:
            if isinstance(item, CharSet) and len(item.ranges) == 1 and item.ranges[0][0] == item.ranges[0][1]:
                text += chr(item.ranges[0][0])
                continue
            if text:
                parts.append(json_string_literal(text))
                text = ""
            parts.append(self.emit(item))
        if text:
            parts.append(json_string_literal(text))
        return " ".join(parts) if parts else '""'

    def char_set(self, ranges: Ranges) -> str:
        if ranges == ANY:
            return self.any_char()
        if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
            return json_string_literal(chr(ranges[0][0]))
        escaped = intersect(ranges, _JSON_ESCAPED)
        if sum(last - first + 1 for first, last in escaped) <= 2:
            expression = json_chars(ranges)
        else:
            expression = self.compact_char_set(ranges, escaped)
        return expression if _SIMPLE_EXPRESSION.match(expression) else self.builder.rule("char", expression)

    @staticmethod
    def compact_char_set(ranges: Ranges, escaped: Ranges) -> str:
        """Like `json_chars`, but all escaped characters share one `\\` branch, instead of a
        literal each (`[^a]` would otherwise be 34 alternatives, each one parser stack)."""
        codes = [code for first, last in escaped for code in range(first, last + 1)]
        after_backslash = []
        short = [ord(_SHORT_JSON_ESCAPES[c]) for c in codes if c in _SHORT_JSON_ESCAPES]
        if short:
            after_backslash.append(char_class(normalize((c, c) for c in short)))
        by_high_digit = []
        for high in (0, 1):
            low_digits = [f"{c & 0xF:x}" for c in codes if c >> 4 == high and c not in _SHORT_JSON_ESCAPES]
            if low_digits:
                digits = normalize((ord(d), ord(d)) for d in low_digits)
                by_high_digit.append(f"{literal(str(high))} {char_class(digits)}")
        if by_high_digit:
            after_backslash.append(f"{literal('u00')} ({' | '.join(by_high_digit)})")
        escapes = after_backslash[0] if len(after_backslash) == 1 else f"({' | '.join(after_backslash)})"
        alternatives = [f"{literal(chr(0x5C))} {escapes}"]
        raw = subtract(ranges, _JSON_ESCAPED)
        if raw:
            alternatives.insert(0, json_chars(raw))
        return " | ".join(alternatives)
